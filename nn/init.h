#pragma once
// How layers make their parameters: dtype, device, the random stream and the init scale.
#include <mvgpt/tensor/generator.h>
#include <mvgpt/tensor/tensor.h>

namespace mvgpt::nn {

struct Init {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  Generator* gen = nullptr;  // default_generator() when null
  double std = 0.02;         // GPT-2: weights ~ N(0, 0.02^2)
};

// N(0, std^2) samples of `shape` drawn from init.gen (contiguous, a leaf).
Tensor normal(const Shape& shape, double std, const Init& init);
Tensor zeros(const Shape& shape, const Init& init);
Tensor ones(const Shape& shape, const Init& init);

}  // namespace mvgpt::nn
