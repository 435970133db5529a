// bfloat16 GEMM through oneDNN's matmul primitive, one call per thread.
//
// NOTE [ oneDNN on the TBB pool ]
// Debian's oneDNN is built on OpenMP: left alone, its first matmul starts an OpenMP team of one
// thread per core whose threads spin after every call, the fight NOTE [ One thread pool ] (blas.cpp)
// describes for OpenBLAS. So oneDNN is held to one thread on every thread that calls it
// (omp_set_num_threads(1) sets the calling thread's own OpenMP setting, and oneDNN runs a
// one-thread call inline, with no team), and blas::gemm cuts large products into blocks, one
// oneDNN call per TBB task, as it does for float32. A matmul primitive is made once per shape and
// thread and kept (the blocks repeat the same few shapes every step); a primitive descriptor costs
// tens of microseconds, as much as a whole decoding product.
#include <mvgpt/backends/cpu/bf16_gemm.h>

#include <cblas.h>
#include <cpuid.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

namespace mvgpt::cpu::bf16 {
namespace {

// Linux: ask for the AMX tile data state (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)),
// without which the first tile instruction kills the process.
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

bool os_saves_avx512_state() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE
  uint32_t lo, hi;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 0xe6) == 0xe6;  // SSE, AVX, opmask, ZMM upper halves and ZMM16-31
}

CpuSupport detect() {
  CpuSupport s;
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return s;
  const unsigned max_leaf7 = a;
  const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24);
  if (max_leaf7 >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d))
    s.avx512_bf16 = (a & (1u << 5)) && os_saves_avx512_state();
  if (amx_bf16 && amx_tile) s.amx_bf16 = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return s;
}

std::atomic<bool> g_force_fallback{false};

dnnl::engine& engine() {
  static dnnl::engine e = [] {
    (void)cpu_support();  // AMX permission before oneDNN looks at the CPU
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}

// This thread's oneDNN setup: one OpenMP thread (NOTE [ oneDNN on the TBB pool ]) and a stream.
dnnl::stream& thread_stream() {
  thread_local dnnl::stream s = [] {
    omp_set_num_threads(1);
    return dnnl::stream(engine());
  }();
  return s;
}

struct Key {
  bool ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  float alpha, beta;
  bool operator==(const Key&) const = default;
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = std::hash<int64_t>()(k.M);
    for (int64_t v : {k.N, k.K, k.lda, k.ldb, k.ldc, int64_t(k.ta) * 2 + int64_t(k.tb)})
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    return h * 1000003u ^ std::hash<float>()(k.alpha) ^ (std::hash<float>()(k.beta) << 1);
  }
};

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;
struct Plan {
  std::optional<dnnl::matmul> matmul;  // empty: oneDNN has only its reference kernel here
  dnnl::memory::desc a, b, c;
  std::string impl;
};

Plan make_plan(const Key& k) {
  Plan p;
  p.a = dnnl::memory::desc({k.M, k.K}, dt::bf16, k.ta ? dims{1, k.lda} : dims{k.lda, 1});
  p.b = dnnl::memory::desc({k.K, k.N}, dt::bf16, k.tb ? dims{1, k.ldb} : dims{k.ldb, 1});
  p.c = dnnl::memory::desc({k.M, k.N}, dt::f32, dims{k.ldc, 1});
  dnnl::primitive_attr attr;
  if (k.alpha != 1.0f) attr.set_output_scales(0, {k.alpha});
  if (k.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(k.beta);
    attr.set_post_ops(ops);
  }
  try {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.a, p.b, p.c), attr, engine());
    p.impl = pd.impl_info_str();
    if (p.impl.rfind("ref", 0) != 0) p.matmul.emplace(pd);
  } catch (const dnnl::error& e) {
    p.impl = std::string("none (") + e.what() + ")";
  }
  return p;
}

// X stored as rows x cols with leading dimension ld, widened into a dense float32 buffer.
const float* widen(const bfloat16* x, int64_t rows, int64_t cols, int64_t ld, std::vector<float>& buf) {
  buf.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) buf[size_t(r * cols + c)] = float(x[r * ld + c]);
  return buf.data();
}

void gemm_float32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A, int64_t lda,
                  const bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  thread_local std::vector<float> abuf, bbuf;
  const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  const float* a = widen(A, ar, ac, lda, abuf);
  const float* b = widen(B, br, bc, ldb, bbuf);
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
              alpha, a, int(std::max<int64_t>(ac, 1)), b, int(std::max<int64_t>(bc, 1)), beta, C, int(ldc));
}

}  // namespace

std::string CpuSupport::describe() const {
  if (amx_bf16) return "AMX-BF16";
  if (avx512_bf16) return "AVX512-BF16";
  return "no bf16 instructions";
}

const CpuSupport& cpu_support() {
  static const CpuSupport s = detect();
  return s;
}

std::string kernel_name() {
  if (g_force_fallback.load()) return "float32 fallback (forced)";
  const Plan p = make_plan({false, true, 256, 384, 384, 384, 384, 384, 1.0f, 0.0f});
  return p.matmul ? p.impl : "float32 fallback (oneDNN: " + p.impl + ")";
}

void use_fallback(bool on) { g_force_fallback.store(on); }

void gemm_one_thread(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A, int64_t lda,
                     const bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0 || K <= 0) throw std::logic_error("bf16::gemm_one_thread: an empty product reached the kernel");
  if (g_force_fallback.load(std::memory_order_relaxed))
    return gemm_float32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  dnnl::stream& stream = thread_stream();
  thread_local std::unordered_map<Key, Plan, KeyHash> plans;
  const Key key{ta, tb, M, N, K, lda, ldb, ldc, alpha, beta};
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_plan(key)).first;
  const Plan& p = it->second;
  if (!p.matmul) return gemm_float32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  dnnl::memory a(p.a, engine(), const_cast<bfloat16*>(A));
  dnnl::memory b(p.b, engine(), const_cast<bfloat16*>(B));
  dnnl::memory c(p.c, engine(), C);
  p.matmul->execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
  stream.wait();
}

}  // namespace mvgpt::cpu::bf16
