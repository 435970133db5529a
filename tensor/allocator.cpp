#include <mvgpt/tensor/allocator.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>

namespace mvgpt {

size_t CachingAllocator::size_class(size_t nbytes, size_t small_step, size_t small_limit) {
  if (nbytes <= small_limit) return (std::max<size_t>(nbytes, 1) + small_step - 1) / small_step * small_step;
  const size_t p = size_t(1) << (63 - __builtin_clzll(nbytes));
  const size_t step = p / 8;
  return (nbytes + step - 1) / step * step;
}

AllocatorMode allocator_mode_from_env(const char* variable) {
  const char* value = std::getenv(variable);
  const std::string v = value ? value : "";
  if (v.empty() || v == "caching") return AllocatorMode::caching;
  if (v == "direct") return AllocatorMode::direct;
  throw std::runtime_error(std::string(variable) + "=" + v +
                           " is not an allocator mode: use caching (the default) or direct (every tensor its own "
                           "block, for compute-sanitizer)");
}

size_t CachingAllocator::block_size(size_t nbytes) const {
  return mode_ == AllocatorMode::direct ? std::max<size_t>(nbytes, 1) : size_class(nbytes, small_step_, small_limit_);
}

void* CachingAllocator::allocate(size_t nbytes) {
  const size_t size = block_size(nbytes);
  if (mode_ == AllocatorMode::caching) {
    std::lock_guard lock(mutex_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= size;
      live_ += size;
      peak_ = std::max(peak_, live_);
      return p;
    }
  }
  void* p = allocate_block(size);
  if (!p) {
    // Give cached blocks back and try once more before failing.
    empty_cache();
    p = allocate_block(size);
  }
  if (!p) out_of_memory(size);
  std::lock_guard lock(mutex_);
  live_ += size;
  peak_ = std::max(peak_, live_);
  return p;
}

void CachingAllocator::deallocate(void* ptr, size_t nbytes) {
  if (!ptr) return;
  const size_t size = block_size(nbytes);
  {
    std::lock_guard lock(mutex_);
    live_ -= size;
    if (mode_ == AllocatorMode::caching) {
      free_[size].push_back(ptr);
      cached_ += size;
      return;
    }
  }
  free_block(ptr);
}

size_t CachingAllocator::live_bytes() const {
  std::lock_guard lock(mutex_);
  return live_;
}
size_t CachingAllocator::peak_bytes() const {
  std::lock_guard lock(mutex_);
  return peak_;
}
void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  peak_ = live_;
}
size_t CachingAllocator::cached_bytes() const {
  std::lock_guard lock(mutex_);
  return cached_;
}

void CachingAllocator::empty_cache() {
  release_cached([this](void* p) { free_block(p); });
}

CpuAllocator::~CpuAllocator() { empty_cache(); }

void* CpuAllocator::allocate_block(size_t size) {
  if (size < kHugePage) return std::aligned_alloc(kAlignment, size);
  // Sized up to whole 2 MB for aligned_alloc's rule; the pages past `size` are never touched.
  void* p = std::aligned_alloc(kHugePage, (size + kHugePage - 1) / kHugePage * kHugePage);
  if (p) (void)madvise(p, size / kHugePage * kHugePage, MADV_HUGEPAGE);  // advice: without THP, 4 KB pages
  return p;
}
void CpuAllocator::free_block(void* ptr) { std::free(ptr); }
void CpuAllocator::out_of_memory(size_t) { throw std::bad_alloc(); }

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
