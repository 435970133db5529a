#pragma once
// Host memory handed out in consecutive pieces of large chunks backed by huge pages.
//
// NOTE [ Host arena ]
// Decoding reads every weight once a token: the series' model streams 25 bf16 matrices of 0.3 to
// 7.7 MB (29 MB) from wherever the allocator put them, each a block of its own on 4 KB pages, so
// every page costs a TLB walk and the hardware prefetchers, which stop at page edges, start again
// every 4 KB. An arena hands out consecutive pieces of 2 MB-aligned chunks that Linux is asked to back
// with transparent huge pages (madvise(MADV_HUGEPAGE); where THP is off the same memory on 4 KB
// pages, only slower): what is made in order is read as one stream. A storage keeps its chunk alive,
// so a piece never outlives its memory; a chunk is freed with its last piece, and reused from its
// start once only the arena holds it. Its chunks are not counted in the CPU allocator's live or peak
// bytes. Who uses it: the bf16 weight copies made for inference (NOTE [ Precision policy ] in
// autograd/precision.h).
#include <cstddef>
#include <memory>

#include <mvgpt/tensor/storage.h>

namespace mvgpt {

class HostArena {
 public:
  HostArena() = default;
  // One owner of the bump offset: a copy would hand out the same bytes twice.
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;
  HostArena(HostArena&&) = default;
  HostArena& operator=(HostArena&&) = default;

  static constexpr size_t kChunk = size_t(32) << 20;     // a small model's weights in one chunk
  static constexpr size_t kHugePage = size_t(2) << 20;   // x86-64's transparent huge page
  static constexpr size_t kAlignment = 64;               // each piece, as CpuAllocator's blocks

  // nbytes (> 0) of uninitialised CPU memory, kAlignment-aligned, right after the previous piece
  // (rounded up to kAlignment) where the current chunk has room; else at the start of a new chunk of
  // kChunk, or of the request rounded up to kHugePage when larger. Throws std::bad_alloc.
  std::shared_ptr<Storage> storage(size_t nbytes);

 private:
  std::shared_ptr<std::byte> chunk_;
  size_t size_ = 0, used_ = 0;
};

}  // namespace mvgpt
