#pragma once
// Allocators hand out device memory. The CPU one aligns to 64 bytes and keeps freed blocks in
// size-class free lists, so a training step reuses its temporaries instead of calling malloc.
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "tensor/device.h"

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

class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  ~CpuAllocator() override;
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  size_t live_bytes() const override;
  size_t peak_bytes() const override;
  void reset_peak() override;
  size_t cached_bytes() const override;
  void empty_cache() override;

  // The size class a request of nbytes is served from.
  static size_t round_size(size_t nbytes);

 private:
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> free blocks
  size_t live_ = 0, peak_ = 0, cached_ = 0;
};

// The allocator of a device. The CPU one always exists; other devices' backends register theirs.
Allocator& allocator_for(Device device);
void register_allocator(Device device, Allocator* allocator);

}  // namespace mvgpt
