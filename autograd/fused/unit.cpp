#include <mvgpt/fused/unit.h>

#include <mvgpt/backends/ops.h>

namespace mvgpt::fused {

#define MVGPT_FUSED_UNIT(name) Unit name##_unit();
#include <mvgpt/fused/units.def>
#undef MVGPT_FUSED_UNIT

const std::vector<Unit>& units() {
  static const std::vector<Unit> all = {
#define MVGPT_FUSED_UNIT(name) name##_unit(),
#include <mvgpt/fused/units.def>
#undef MVGPT_FUSED_UNIT
  };
  return all;
}

Tensor uniform_on(Device d, const Shape& shape, DType dtype, uint64_t seed, double lo, double hi) {
  Generator g(seed);
  return ops::to(ops::add(ops::mul(ops::rand(shape, dtype, Device::cpu(), &g), hi - lo), lo), d);
}

Tensor ids_on(Device d, const std::vector<int64_t>& values, DType dtype) {
  return ops::to(ops::to(Tensor::from_vector(values), dtype), d);
}

}  // namespace mvgpt::fused
