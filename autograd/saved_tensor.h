#pragma once
// A tensor saved for backward, with the storage version it had when saved. unpack() refuses to
// hand it back if it was written in place since (e.g. by the sliding KV cache), because backward
// would then compute with the wrong values.
#include <cstdint>

#include <mvgpt/tensor/tensor.h>

namespace mvgpt::autograd {

class SavedTensor {
 public:
  SavedTensor() = default;
  // Keeps a handle on t's data without its gradient history (saving an output must not make a
  // cycle through its own grad_fn). An undefined t saves nothing.
  explicit SavedTensor(const Tensor& t);

  bool defined() const { return data_.defined(); }
  // The saved tensor; throws naming `op` when it was modified in place after saving.
  Tensor unpack(const char* op) const;
  void reset() { data_ = Tensor(); }

 private:
  Tensor data_;
  uint64_t version_ = 0;
};

}  // namespace mvgpt::autograd
