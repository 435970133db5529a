#pragma once
// Gradient checking: the full Jacobian of a function of float64 tensors, by central finite
// differences and by backprop (one backward per output element with a one-hot gradient), compared
// element by element. The project's signature test: every differentiable op registers cases
// (autograd/op_registry.h) that run through here.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <mvgpt/tensor/tensor.h>

namespace mvgpt::autograd {

using Inputs = std::vector<Tensor>;
using GradcheckFn = std::function<Tensor(const Inputs&)>;

// Makes one input of a case from a seed. Floating inputs are differentiated unless marked constant;
// integer and bool inputs (indices, masks) never are.
struct InputSpec {
  std::function<Tensor(uint64_t seed)> make;
  bool differentiable = true;
};

struct GradcheckOptions {
  double eps = 1e-6;        // finite-difference step
  double tolerance = 1e-6;  // |backprop - fd| <= tolerance * max(1, |backprop|, |fd|)
};

struct GradcheckResult {
  bool ok = true;
  int64_t checked = 0;     // Jacobian entries compared
  int64_t mismatches = 0;
  std::string message;     // the first mismatch (op, input, element, both values), or the error
};

// Checks fn at `inputs` (float64, CPU). Differentiable inputs must be leaves; they are made to
// require grad for the check and put back as they were after. Never throws for a wrong gradient: the result says what differs.
GradcheckResult gradcheck(const std::string& op, const GradcheckFn& fn, const Inputs& inputs,
                          const std::vector<bool>& differentiable = {}, const GradcheckOptions& options = {});

// One registered case: inputs to make and the function to check.
struct GradcheckCase {
  std::string name;
  std::vector<InputSpec> inputs;
  GradcheckFn fn;
  double tolerance = 1e-6;
  double eps = 1e-6;
};

GradcheckResult run_case(const std::string& op, const GradcheckCase& c, uint64_t seed = 1);

// Input makers for cases: small float64 tensors with values placed where the op is smooth.
namespace gc {
// Uniform in [lo, hi).
InputSpec input(const Shape& shape, double lo = -1, double hi = 1);
// Uniform in [0.5, 2): for log, sqrt, rsqrt, pow, div.
InputSpec positive(const Shape& shape);
// |x| in [0.2, 1.2) with random sign: for relu and abs, away from their kink at 0.
InputSpec away_from_zero(const Shape& shape);
// A permutation of offset + 0.1 * k: no ties, for max, min, maximum, minimum.
InputSpec distinct(const Shape& shape, double offset = 0);
// A non-contiguous view of shape: the transpose of its last two axes' contiguous tensor.
InputSpec transposed(const Shape& shape, double lo = -1, double hi = 1);
// A non-contiguous view of shape: a slice of a tensor 3 wider on the last axis.
InputSpec sliced(const Shape& shape, double lo = -1, double hi = 1);
// int64 indices uniform in [0, high).
InputSpec indices(const Shape& shape, int64_t high);
// The same input, held constant (no gradient checked).
InputSpec constant(InputSpec spec);
// A fixed float64 tensor (same values on every call, from the shape): a constant inside a case.
Tensor fixed(const Shape& shape, double lo = -1, double hi = 1);
}  // namespace gc

}  // namespace mvgpt::autograd
