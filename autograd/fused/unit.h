#pragma once
// NOTE [ A fused op is one unit ]
// A fused op (a kernel of its own, forward and backward, rather than a composition of primitives)
// is defined in one place, autograd/fused/<unit>*, and nowhere else:
//   <unit>.h        the differentiable op models call, and the raw kernels' entry points (namespace
//                   fused: no gradient, used by the backward, the tests and inference paths);
//   <unit>.cpp      argument checks, dtype preparation, allocation and dispatch; the slow reference
//                   built from primitives; the backward (an autograd node); the gradient-check cases
//                   and the CPU-vs-device cases, returned by <unit>_unit();
//   <unit>_cpu.cpp  the CPU kernels;
//   <unit>.cu       the CUDA kernels (compiled when the CUDA backend is built);
// plus one line in units.def. The Backend interface keeps only primitives: a unit's kernels are
// looked up per device in its own table (KernelsByDevice below), and tests/fused/units_test.cpp
// runs every unit's gradient checks (float64) and device cases from units(), so a new unit cannot
// land without them.
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <mvgpt/autograd/op_registry.h>
#include <mvgpt/backends/fused_checks.h>  // the argument checks units share
#include <mvgpt/tensor/tensor.h>
#include <mvgpt/util/profile.h>  // each unit's kernels are spans of the op profile

namespace mvgpt::fused {

// Runs on the CPU and on another device; the results must agree (|got - cpu| <= tol (1 + |cpu|))
// and be bit-identical between two runs on the same device.
struct DeviceCase {
  std::string name;
  std::function<std::vector<Tensor>(Device)> run;
  std::vector<std::string> kernels;  // the unit's kernels this case exercises
  double tol_f32 = 2e-5;
  double tol_f64 = 1e-11;
};

struct Unit {
  std::string name;
  std::vector<std::string> kernels;  // every kernel entry point; each needs a device case
  // Adds a case for every differentiable op; empty when the unit has none (an optimizer step).
  std::function<void(autograd::OpRegistry&)> gradchecks;
  std::function<std::vector<DeviceCase>()> device_cases;
};

// A unit's CUDA kernels where this build has them (the CUDA .cu files are compiled then), else none:
//   static const KernelsByDevice<NormKernels> table{"norms", norms_cpu_kernels(), MVGPT_FUSED_CUDA_KERNELS(norms)};
#ifdef MVGPT_FUSED_CUDA
#define MVGPT_FUSED_CUDA_KERNELS(unit) unit##_cuda_kernels()
#else
#define MVGPT_FUSED_CUDA_KERNELS(unit) std::nullopt
#endif

// For device cases: seeded uniform values in [lo, hi), drawn on the CPU and moved to d, so that
// every device sees the same inputs.
Tensor uniform_on(Device d, const Shape& shape, DType dtype, uint64_t seed, double lo = -2, double hi = 2);
// For device cases: integer ids (targets, positions) on d.
Tensor ids_on(Device d, const std::vector<int64_t>& values, DType dtype = DType::i64);

// Every unit of units.def, in its order.
const std::vector<Unit>& units();

// A unit's kernel table per device type: the CPU's always, CUDA's when the CUDA backend is built.
template <typename Kernels>
struct KernelsByDevice {
  const char* unit;
  Kernels cpu;
  std::optional<Kernels> cuda;

  const Kernels& on(Device d) const {
    if (d.is_cpu()) return cpu;
    if (d.is_cuda() && cuda) return *cuda;
    throw std::invalid_argument(std::string(unit) + ": no kernel for " + d.str() + " in this build");
  }
};

}  // namespace mvgpt::fused
