#include <mvgpt/tensor/storage.h>

#include <mvgpt/tensor/allocator.h>

namespace mvgpt {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (nbytes > 0) data_ = allocator_for(device).allocate(nbytes);
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void()> release)
    : data_(data), nbytes_(nbytes), device_(device), release_(std::move(release)) {}

Storage::~Storage() {
  if (release_) {
    release_();
  } else if (data_) {
    allocator_for(device_).deallocate(data_, nbytes_);
  }
}

}  // namespace mvgpt
