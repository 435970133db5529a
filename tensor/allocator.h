#pragma once
// Allocators hand out device memory. The CPU one aligns to 64 bytes and keeps freed blocks in
// size-class free lists (CachingAllocator, as the CUDA one does), so a training step reuses its
// temporaries instead of calling malloc.
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include <mvgpt/tensor/device.h>

namespace mvgpt {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  // Bytes handed out and not yet returned.
  virtual size_t live_bytes() const = 0;
  // The most live_bytes has been since the last reset_peak().
  virtual size_t peak_bytes() const = 0;
  virtual void reset_peak() = 0;
  // Bytes held in free lists for reuse.
  virtual size_t cached_bytes() const = 0;
  // Returns cached blocks to the system.
  virtual void empty_cache() = 0;
};

// How a CachingAllocator hands out memory. caching: freed blocks are kept in size-class free lists
// and handed out again. direct: each request is its own block of exactly the bytes asked for, given
// back at once, so that a memory checker (compute-sanitizer's memcheck) sees every tensor's own
// bounds: a reused block of a larger size class hides a small overrun from it.
enum class AllocatorMode { caching, direct };

// The mode the environment variable `variable` names: unset, empty or "caching" is caching, "direct"
// is direct; anything else throws one line naming the variable, its value and the two choices.
AllocatorMode allocator_mode_from_env(const char* variable);

// Freed blocks go to size-class free lists and are handed out again (or, in direct mode, straight
// back), with the live / peak / cached accounting above. Subclasses supply the memory and the size
// classes' parameters: CpuAllocator, and the CUDA backend's device allocator.
class CachingAllocator : public Allocator {
 public:
  void* allocate(size_t nbytes) final;
  void deallocate(void* ptr, size_t nbytes) final;
  size_t live_bytes() const final;
  size_t peak_bytes() const final;
  void reset_peak() final;
  size_t cached_bytes() const final;
  // Returns cached blocks to the system through free_block.
  void empty_cache() final;

  // The size class of a request: a multiple of small_step up to small_limit, above that a multiple
  // of 1/8 of the power of two below it (waste under 12.5%).
  static size_t size_class(size_t nbytes, size_t small_step, size_t small_limit);

  AllocatorMode mode() const { return mode_; }

 protected:
  CachingAllocator(size_t small_step, size_t small_limit, AllocatorMode mode = AllocatorMode::caching)
      : small_step_(small_step), small_limit_(small_limit), mode_(mode) {}
  // A fresh block of `size` bytes, or nullptr when the system has no memory: allocate() then empties
  // the cache and asks once more. Other failures throw.
  virtual void* allocate_block(size_t size) = 0;
  virtual void free_block(void* ptr) = 0;
  // Throws for a request that failed after the retry.
  [[noreturn]] virtual void out_of_memory(size_t size) = 0;
  // Hands every cached block to `release` and forgets it. A subclass's destructor gives its cache
  // back with this (empty_cache(), or a release that must not throw): the base cannot, since
  // free_block is the subclass's.
  template <class Release>
  void release_cached(Release&& release) {
    std::lock_guard lock(mutex_);
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) release(p);
    free_.clear();
    cached_ = 0;
  }

 private:
  // The bytes a request of nbytes takes: its size class, or in direct mode exactly nbytes (at least 1).
  size_t block_size(size_t nbytes) const;

  const size_t small_step_, small_limit_;
  const AllocatorMode mode_;
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> free blocks
  size_t live_ = 0, peak_ = 0, cached_ = 0;
};

// Host memory aligned to 64 bytes; size classes in 64-byte steps up to 4 KiB. Always caching
// (std::aligned_alloc needs whole multiples of the alignment, which direct sizes are not).
// A block of 2 MB or more starts on a 2 MB boundary, and its whole 2 MB pieces are advised as
// transparent huge pages (madvise(MADV_HUGEPAGE)): the activations and gradients that elementwise
// ops stream, read without a TLB walk every 4 KB and with prefetchers that do not stop at every
// page edge. The tail short of 2 MB keeps 4 KB pages, so no block takes more memory than it asks
// (where THP is in madvise mode; with THP "always" the kernel may back any block with huge pages).
class CpuAllocator final : public CachingAllocator {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kHugePage = size_t(2) << 20;  // x86-64's transparent huge page
  CpuAllocator() : CachingAllocator(kAlignment, kSmallLimit) {}
  ~CpuAllocator() override;

  // The size class a request of nbytes is served from.
  static size_t round_size(size_t nbytes) { return size_class(nbytes, kAlignment, kSmallLimit); }

 private:
  static constexpr size_t kSmallLimit = 4096;
  void* allocate_block(size_t size) override;
  void free_block(void* ptr) override;
  [[noreturn]] void out_of_memory(size_t size) override;
};

// The allocator of a device. The CPU one always exists; other devices' backends register theirs.
Allocator& allocator_for(Device device);
void register_allocator(Device device, Allocator* allocator);

}  // namespace mvgpt
