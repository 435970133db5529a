// NOTE [ Host arena ] in host_arena.h.
#include <mvgpt/tensor/host_arena.h>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>

namespace mvgpt {
namespace {

size_t round_up(size_t n, size_t step) { return (n + step - 1) / step * step; }

}  // namespace

std::shared_ptr<Storage> HostArena::storage(size_t nbytes) {
  const size_t piece = round_up(std::max<size_t>(nbytes, 1), kAlignment);
  if (chunk_ && chunk_.use_count() == 1) {  // every piece is gone: start the chunk over
    std::atomic_thread_fence(std::memory_order_acquire);  // after the last holder's reads, wherever it ran
    used_ = 0;
  }
  if (!chunk_ || used_ + piece > size_) {
    const size_t size = std::max(kChunk, round_up(piece, kHugePage));
    void* p = std::aligned_alloc(kHugePage, size);
    if (!p) throw std::bad_alloc();
    // Advice only: a kernel without THP (or with it off) keeps 4 KB pages, and the memory is the same.
    (void)madvise(p, size, MADV_HUGEPAGE);
    chunk_ = std::shared_ptr<std::byte>(static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); });
    size_ = size;
    used_ = 0;
  }
  std::byte* data = chunk_.get() + used_;
  used_ += piece;
  return std::make_shared<Storage>(data, nbytes, Device::cpu(), [chunk = chunk_] {});
}

}  // namespace mvgpt
