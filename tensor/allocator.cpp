#include "tensor/allocator.h"

#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>

namespace mvgpt {

CpuAllocator::~CpuAllocator() { empty_cache(); }

size_t CpuAllocator::round_size(size_t nbytes) {
  // Small blocks round to 64 bytes; larger ones to 1/8 of their power of two, which bounds waste at 12.5%.
  if (nbytes <= 4096) return (std::max<size_t>(nbytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  size_t p = size_t(1) << (63 - __builtin_clzll(nbytes));
  size_t step = p / 8;
  return (nbytes + step - 1) / step * step;
}

void* CpuAllocator::allocate(size_t nbytes) {
  size_t size = round_size(nbytes);
  {
    std::lock_guard lock(mutex_);
    live_ += size;
    peak_ = std::max(peak_, live_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= size;
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlignment, size);
  if (!p) {
    // Give cached blocks back and try once more before failing.
    empty_cache();
    p = std::aligned_alloc(kAlignment, size);
  }
  if (!p) {
    std::lock_guard lock(mutex_);
    live_ -= size;
    throw std::bad_alloc();
  }
  return p;
}

void CpuAllocator::deallocate(void* ptr, size_t nbytes) {
  if (!ptr) return;
  size_t size = round_size(nbytes);
  std::lock_guard lock(mutex_);
  live_ -= size;
  free_[size].push_back(ptr);
  cached_ += size;
}

size_t CpuAllocator::live_bytes() const {
  std::lock_guard lock(mutex_);
  return live_;
}
size_t CpuAllocator::peak_bytes() const {
  std::lock_guard lock(mutex_);
  return peak_;
}
void CpuAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  peak_ = live_;
}
size_t CpuAllocator::cached_bytes() const {
  std::lock_guard lock(mutex_);
  return cached_;
}

void CpuAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  for (auto& [size, blocks] : free_)
    for (void* p : blocks) std::free(p);
  free_.clear();
  cached_ = 0;
}

namespace {
struct Registry {
  CpuAllocator cpu;
  std::mutex mutex;
  std::map<std::pair<int, int>, Allocator*> others;
};
Registry& registry() {
  // Never destroyed: tensors held in static objects may free memory during exit.
  static Registry* r = new Registry;
  return *r;
}
}  // namespace

Allocator& allocator_for(Device device) {
  Registry& r = registry();
  if (device.is_cpu()) return r.cpu;
  std::lock_guard lock(r.mutex);
  auto it = r.others.find({int(device.type), device.index});
  if (it == r.others.end())
    throw std::runtime_error("allocator_for: no allocator for device " + device.str() +
                             " (its backend is not initialised or not built)");
  return *it->second;
}

void register_allocator(Device device, Allocator* allocator) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.others[{int(device.type), device.index}] = allocator;
}

}  // namespace mvgpt
