// The AMX kernel's inner loop alone (backends/cpu/amx_gemm.cpp), on one thread with its operands in
// the cache: what a block's shape costs before memory has a say.
//
// NOTE [ The tile loop alone ]
// A 32 x 32 block of C sums in four tiles over `kts` k tiles: two A tiles (a 32-row panel, kts * 2 KB,
// reused across the pairs) and two B tiles (a pair of column tiles, kts * 2 KB a pair, read once a
// panel from a buffer of `pairs` of them) a k tile, four TDPBF16PS. C goes out per block: store:0
// never (the tiles only sum), store:1 zeroed then stored (a whole K), store:2 loaded and stored again
// from partial sums of `group` panels (K in chunks). stream:1 reads B with TILELOADDT1 (a hint that
// its lines are not wanted again), so the panel of A keeps L1. On the 2-core AMX Xeon (family 6
// model 167), one thread (the tile unit's rate is 16 cycles a TDPBF16PS, about 4.3-4.8 ns):
// - a block's C stored costs about 190 cycles (the tiles drain before the store, and the next block
//   waits for it): 5.2 ns a TDP at 4 k tiles without the store, 8.7 with it;
// - the panel of A and the B streaming past it fit L1 (48 KB) up to 8 k tiles: with the store 6.7 ns
//   a TDP at 8, 7.4 at 16, 10.9 at 24; with stream:1 6.3 at 16 and 6.8 at 24;
// - partial sums in L2 (store:2, 10 panels of 12 pairs): 8.1 ns at 8 k tiles, 8.9 at 16 (7.5 with
//   stream:1).
// The whole kernel ran slower than this loop on the same shapes (its operands come from memory, B
// packed by both threads), which is where a weight gradient's time goes (NOTE [ A weight gradient's
// chunks ] in amx_gemm.cpp).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include <mvgpt/backends/cpu/amx.h>
#include <mvgpt/backends/cpu/amx_tiles.h>  // MVGPT_AMX, the kernels' tile configuration

namespace mvgpt {
namespace {

#ifdef MVGPT_AMX
struct Free {
  void operator()(void* p) const { std::free(p); }
};
template <typename T>
std::unique_ptr<T, Free> zeroed(size_t n) {
  const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return std::unique_ptr<T, Free>(static_cast<T*>(p));
}

template <bool kStream>
inline void load_b(int tile, const uint16_t* b) {
  if constexpr (kStream) {
    if (tile == 6) _tile_stream_loadd(6, b, 64);
    else _tile_stream_loadd(7, b, 64);
  } else {
    if (tile == 6) _tile_loadd(6, b, 64);
    else _tile_loadd(7, b, 64);
  }
}

template <bool kStream>
void tile_loop(int64_t kts, int64_t pairs, int64_t store, int64_t group, const uint16_t* A, const uint16_t* B,
               float* partial) {
  const int64_t width = kts * 32, as = width * 2, ldc = pairs * 32, cs = ldc * 4;
  for (int64_t p = 0; p < group; ++p) {
    const uint16_t* a0 = A + p * 32 * width;
    const uint16_t* a1 = a0 + 16 * width;
    for (int64_t q = 0; q < pairs; ++q) {
      const uint16_t* b0 = B + 2 * q * kts * 512;
      const uint16_t* b1 = b0 + kts * 512;
      float* c = partial + p * 32 * ldc + q * 32;
      if (store == 2) {
        _tile_loadd(0, c, cs);
        _tile_loadd(1, c + 16, cs);
        _tile_loadd(2, c + 16 * ldc, cs);
        _tile_loadd(3, c + 16 * ldc + 16, cs);
      } else if (store == 1) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      for (int64_t kt = 0; kt < kts; ++kt) {
        _tile_loadd(4, a0 + kt * 32, as);
        load_b<kStream>(6, b0 + kt * 512);
        _tile_dpbf16ps(0, 4, 6);
        load_b<kStream>(7, b1 + kt * 512);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(5, a1 + kt * 32, as);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      if (store != 0) {
        _tile_stored(0, c, cs);
        _tile_stored(1, c + 16, cs);
        _tile_stored(2, c + 16 * ldc, cs);
        _tile_stored(3, c + 16 * ldc + 16, cs);
      }
    }
  }
}
#endif

void BM_AmxTileLoop(benchmark::State& state) {
#ifdef MVGPT_AMX
  if (!cpu::amx::usable()) {
    state.SkipWithError("skipped: this CPU has no usable AMX tiles");
    return;
  }
  const int64_t kts = state.range(0), pairs = state.range(1), stream = state.range(2), store = state.range(3);
  const int64_t group = store == 2 ? 10 : 1;  // panels whose partial sums stay in L2
  auto A = zeroed<uint16_t>(size_t(group * 32 * kts * 32));
  auto B = zeroed<uint16_t>(size_t(pairs * 2 * kts * 512));
  auto C = zeroed<float>(size_t(group * 32 * pairs * 32));
  cpu::amx::tiles::configure_tiles();
  for (auto _ : state) {
    if (stream) tile_loop<true>(kts, pairs, store, group, A.get(), B.get(), C.get());
    else tile_loop<false>(kts, pairs, store, group, A.get(), B.get(), C.get());
    benchmark::ClobberMemory();
  }
  _tile_release();
  const double tdps = double(group * pairs * kts * 4);
  state.counters["GFLOP/s"] =
      benchmark::Counter(tdps * 16 * 16 * 32 * 2 * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ns/TDP"] = benchmark::Counter(tdps * 1e-9, benchmark::Counter::kIsIterationInvariantRate |
                                                                 benchmark::Counter::kInvert);
#else
  state.SkipWithError("skipped: this build has no AMX tiles");
#endif
}
BENCHMARK(BM_AmxTileLoop)
    ->ArgNames({"kts", "pairs", "stream", "store"})
    ->ArgsProduct({{4, 8, 16, 24}, {12}, {0, 1}, {0, 1}})
    ->ArgsProduct({{8, 16}, {12}, {0, 1}, {2}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mvgpt
