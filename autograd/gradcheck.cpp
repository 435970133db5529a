#include <mvgpt/autograd/gradcheck.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include <mvgpt/autograd/engine.h>
#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/backends/ops.h>

namespace mvgpt::autograd {

namespace {

// Row-major values of a tensor as doubles.
std::vector<double> values(const Tensor& t) {
  std::vector<double> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = read_element(t, i);
  return v;
}

std::string describe_element(const Shape& shape, int64_t flat) {
  std::vector<int64_t> idx(size_t(shape.size()));
  for (int d = shape.size() - 1; d >= 0; --d) {
    idx[size_t(d)] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  std::string s = "[";
  for (size_t i = 0; i < idx.size(); ++i) s += (i ? ", " : "") + std::to_string(idx[i]);
  return s + "]";
}

// splitmix64: a deterministic stream for case inputs, the same on every platform.
struct Stream {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
};

Tensor filled(const Shape& shape, uint64_t seed, double lo, double hi) {
  Tensor t = Tensor::empty(shape, DType::f64);
  Stream s{seed};
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = lo + (hi - lo) * s.uniform();
  return t;
}

uint64_t shape_seed(const Shape& shape) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t d : shape) h = (h ^ uint64_t(d)) * 1099511628211ull;
  return h;
}

}  // namespace

GradcheckResult gradcheck(const std::string& op, const GradcheckFn& fn, const Inputs& inputs,
                          const std::vector<bool>& differentiable, const GradcheckOptions& options) {
  GradcheckResult result;
  auto fail = [&](const std::string& why) {
    result.ok = false;
    if (result.message.empty()) result.message = "gradcheck " + op + ": " + why;
    return result;
  };

  // The inputs whose gradient is checked.
  std::vector<size_t> wrt;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    bool wanted = i < differentiable.size() ? differentiable[i] : true;
    if (!wanted || !t.defined() || !is_floating(t.dtype())) continue;
    if (t.dtype() != DType::f64 || !t.device().is_cpu())
      return fail("input " + std::to_string(i) + " is " + t.describe() + "; gradcheck needs float64 CPU inputs");
    if (!t.is_leaf()) return fail("input " + std::to_string(i) + " is not a leaf");
    wrt.push_back(i);
  }
  if (wrt.empty()) return fail("no input to differentiate");

  // Inputs are made to require grad for the check and put back as they were after (parameters
  // passed in already require it).
  std::vector<Tensor> leaves;
  std::vector<bool> required;
  for (size_t i : wrt) {
    leaves.push_back(inputs[i]);
    required.push_back(inputs[i].requires_grad());
    leaves.back().requires_grad_(true);
  }
  auto restore = [&] {
    for (size_t w = 0; w < leaves.size(); ++w) leaves[w].requires_grad_(required[w]);
  };

  // Backprop: row k of the Jacobian is the gradient of out[k].
  std::vector<std::vector<double>> backprop(wrt.size());  // [input][k * n_in + j]
  int64_t n_out = 0;
  try {
    Tensor out = fn(inputs);
    if (out.dtype() != DType::f64) {
      restore();
      return fail("the function returned " + out.describe() + ", expected float64");
    }
    if (!out.requires_grad()) {
      restore();
      return fail("the output does not require grad (nothing was recorded)");
    }
    n_out = out.numel();
    for (size_t w = 0; w < wrt.size(); ++w) backprop[w].assign(size_t(n_out * inputs[wrt[w]].numel()), 0.0);
    for (int64_t k = 0; k < n_out; ++k) {
      Tensor onehot = ops::zeros(out.shape(), DType::f64);
      write_element(onehot, k, 1.0);
      std::vector<Tensor> grads = grad(out, leaves, onehot, /*retain_graph=*/k + 1 < n_out);
      for (size_t w = 0; w < wrt.size(); ++w) {
        if (!grads[w].defined()) continue;
        const int64_t n_in = inputs[wrt[w]].numel();
        for (int64_t j = 0; j < n_in; ++j) backprop[w][size_t(k * n_in + j)] = read_element(grads[w], j);
      }
    }
  } catch (const std::exception& e) {
    restore();
    return fail(std::string("threw during forward/backward: ") + e.what());
  }

  // Central differences, one input element at a time.
  NoGradGuard no_grad;
  Shape out_shape;
  for (size_t w = 0; w < wrt.size(); ++w) {
    const Tensor& x = inputs[wrt[w]];
    const int64_t n_in = x.numel();
    for (int64_t j = 0; j < n_in; ++j) {
      const double orig = read_element(x, j);
      std::vector<double> plus, minus;
      try {
        write_element(x, j, orig + options.eps);
        Tensor fp = fn(inputs);
        plus = values(fp);
        out_shape = fp.shape();
        write_element(x, j, orig - options.eps);
        minus = values(fn(inputs));
      } catch (const std::exception& e) {
        write_element(x, j, orig);
        restore();
        return fail(std::string("threw during finite differences: ") + e.what());
      }
      write_element(x, j, orig);
      for (int64_t k = 0; k < n_out; ++k) {
        const double fd = (plus[size_t(k)] - minus[size_t(k)]) / (2 * options.eps);
        const double bp = backprop[w][size_t(k * n_in + j)];
        ++result.checked;
        const double scale = std::max({1.0, std::abs(fd), std::abs(bp)});
        if (!(std::abs(fd - bp) <= options.tolerance * scale)) {
          ++result.mismatches;
          std::ostringstream os;
          os.precision(12);
          os << "d output" << describe_element(out_shape, k) << " / d input " << wrt[w] << describe_element(x.shape(), j)
             << ": backprop " << bp << ", finite difference " << fd << " (difference " << std::abs(fd - bp)
             << ", tolerance " << options.tolerance * scale << ")";
          fail(os.str());
        }
      }
    }
  }
  restore();
  if (!result.ok) result.message += " [" + std::to_string(result.mismatches) + " of " +
                                    std::to_string(result.checked) + " entries differ]";
  return result;
}

GradcheckResult run_case(const std::string& op, const GradcheckCase& c, uint64_t seed) {
  Inputs inputs;
  std::vector<bool> differentiable;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    inputs.push_back(c.inputs[i].make(seed * 1000003ull + i));
    differentiable.push_back(c.inputs[i].differentiable);
  }
  GradcheckOptions options;
  options.eps = c.eps;
  options.tolerance = c.tolerance;
  return gradcheck(op + " (" + c.name + ")", c.fn, inputs, differentiable, options);
}

namespace gc {

InputSpec input(const Shape& shape, double lo, double hi) {
  return {[shape, lo, hi](uint64_t seed) { return filled(shape, seed, lo, hi); }};
}

InputSpec positive(const Shape& shape) { return input(shape, 0.5, 2.0); }

InputSpec away_from_zero(const Shape& shape) {
  return {[shape](uint64_t seed) {
    Tensor t = filled(shape, seed, 0.2, 1.2);
    Stream s{seed ^ 0x5eedull};
    double* p = t.data<double>();
    for (int64_t i = 0; i < t.numel(); ++i)
      if (s.next() & 1) p[i] = -p[i];
    return t;
  }};
}

InputSpec distinct(const Shape& shape, double offset) {
  return {[shape, offset](uint64_t seed) {
    Tensor t = Tensor::empty(shape, DType::f64);
    std::vector<int64_t> order(size_t(t.numel()));
    std::iota(order.begin(), order.end(), 0);
    Stream s{seed};
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[size_t(s.next() % i)]);
    double* p = t.data<double>();
    const double mid = 0.05 * double(order.size());
    for (size_t i = 0; i < order.size(); ++i) p[i] = offset + 0.1 * double(order[i]) - mid;
    return t;
  }};
}

InputSpec transposed(const Shape& shape, double lo, double hi) {
  return {[shape, lo, hi](uint64_t seed) {
    if (shape.size() < 2) return filled(shape, seed, lo, hi);
    Shape base = shape;
    std::swap(base[base.size() - 1], base[base.size() - 2]);
    return ops::transpose(filled(base, seed, lo, hi), -1, -2);
  }};
}

InputSpec sliced(const Shape& shape, double lo, double hi) {
  return {[shape, lo, hi](uint64_t seed) {
    if (shape.empty()) return filled(shape, seed, lo, hi);
    Shape base = shape;
    base[base.size() - 1] += 3;
    return ops::narrow(filled(base, seed, lo, hi), -1, 1, shape.back());
  }};
}

InputSpec indices(const Shape& shape, int64_t high) {
  return {[shape, high](uint64_t seed) {
            Tensor t = Tensor::empty(shape, DType::i64);
            Stream s{seed};
            int64_t* p = t.data<int64_t>();
            for (int64_t i = 0; i < t.numel(); ++i) p[i] = int64_t(s.next() % uint64_t(high));
            return t;
          },
          false};
}

InputSpec constant(InputSpec spec) {
  spec.differentiable = false;
  return spec;
}

Tensor fixed(const Shape& shape, double lo, double hi) { return filled(shape, shape_seed(shape), lo, hi); }

}  // namespace gc

}  // namespace mvgpt::autograd
