#pragma once
// Storage owns the bytes of one or more tensors (views share it) and counts in-place writes,
// so autograd can tell when a tensor it saved for backward was changed under it.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>

#include <mvgpt/tensor/device.h>

namespace mvgpt {

class Storage {
 public:
  // Allocates nbytes from the device's allocator.
  Storage(size_t nbytes, Device device);
  // Wraps memory owned elsewhere (a memory-mapped file); `release` runs when the storage dies.
  Storage(void* data, size_t nbytes, Device device, std::function<void()> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  std::function<void()> release_;
  std::atomic<uint64_t> version_{0};
};

}  // namespace mvgpt
