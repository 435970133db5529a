#include <mvgpt/nn/muon.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <tuple>
#include <unordered_set>

#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/autograd/precision.h>
#include <mvgpt/nn/linear.h>

namespace mvgpt::nn {

namespace {
// Polar Express's coefficients for 5 steps, safety factor 2e-2 and cushion 2 (Amsel, Persson, Musco
// and Gower, arXiv:2505.16932; as modded-nanogpt and nanochat run them).
constexpr std::array<std::array<double, 3>, 5> kPolarExpress{{
    {8.156554524902461, -22.48329292557795, 15.878769915207462},
    {4.042929935166739, -2.808917465908714, 0.5000178451051316},
    {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
    {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
    {2.3465413258596377, -1.7097828382687081, 0.42323551169305323},
}};
}  // namespace

// NOTE [ Newton-Schulz on the Gram matrix ]
// Every iterate is X_k = Q_k X_0 with Q_k an (m, m) polynomial in R_0 = X_0 X_0^T: a step is
// X_{k+1} = Z_k X_k with Z_k = a I + b R_k + c R_k^2 and R_k = X_k X_k^T, so
//   Q_{k+1} = Z_k Q_k,   R_{k+1} = Z_k R_k Z_k   (Z_k is symmetric and commutes with R_k),
// and only the first product (R_0) and the last (Q X_0) touch the long side n. Products of s steps:
// s (4 m^2 n + 2 m^3) the usual way, 4 m^2 n + (8 s - 6) m^3 this way: fewer when n > 1.5 m (the
// series' MLP matrices, 384 x 1536, and its fused QKV, 384 x 1152), the same numbers in exact
// arithmetic. Rounding differs: R holds the squares of the singular values, so in bfloat16 it loses
// the small ones (Dao AI Lab's Gram Newton-Schulz restarts for that); it runs in float32 or
// float64 only, and under bf16 products the usual iteration runs.
bool use_gram_iteration(int64_t m, int64_t n, int steps) {
  return steps > 1 && 4 * m * m * n + (8 * int64_t(steps) - 6) * m * m * m < int64_t(steps) * (4 * m * m * n + 2 * m * m * m);
}

Tensor newton_schulz_gram(const Tensor& x0, const MuonOptions& o) {
  if (o.ns_steps == 0) return x0;
  const int r = x0.dim() - 2, c = x0.dim() - 1;
  const int64_t m = x0.size(r);
  std::vector<double> eye_values(size_t(m * m), 0.0);
  for (int64_t i = 0; i < m; ++i) eye_values[size_t(i * m + i)] = 1.0;
  const Tensor eye = to(to(Tensor::from_vector(eye_values, Shape{m, m}), x0.dtype()), x0.device());  // broadcast over the batch
  Tensor gram = matmul(x0, transpose(x0, r, c));  // R_0 (..., m, m)
  Tensor q;
  for (int k = 0; k < o.ns_steps; ++k) {
    const auto [ka, kb, kc] = newton_schulz_step(o, k);
    Tensor z = add(add(mul(gram, kb), mul(matmul(gram, gram), kc)), mul(eye, ka));  // a I + b R + c R^2
    q = k == 0 ? z : matmul(z, q);
    if (k + 1 < o.ns_steps) gram = matmul(z, matmul(gram, z));
  }
  return matmul(q, x0);  // (..., m, n)
}

std::array<double, 3> newton_schulz_step(const MuonOptions& o, int k) {
  if (o.coefficients == MuonOptions::Coefficients::jordan) return {o.ns_a, o.ns_b, o.ns_c};
  return kPolarExpress[size_t(std::min<int>(k, int(kPolarExpress.size()) - 1))];
}

std::string to_string(MuonOptions::Coefficients c) {
  return c == MuonOptions::Coefficients::jordan ? "jordan" : "polar_express";
}

MuonOptions::Coefficients muon_coefficients_from_string(const std::string& text) {
  if (text == "jordan") return MuonOptions::Coefficients::jordan;
  if (text == "polar_express") return MuonOptions::Coefficients::polar_express;
  throw std::invalid_argument("Muon: coefficients \"" + text + "\"; expected jordan or polar_express");
}

Tensor newton_schulz(const Tensor& g, const MuonOptions& o) {
  if (g.dim() < 2 || !is_floating(g.dtype()))
    throw std::invalid_argument("newton_schulz: expected float matrices (..., A, B), found " + g.describe());
  NoGradGuard no_grad;
  const int r = g.dim() - 2, c = g.dim() - 1;
  const bool tall = g.size(r) > g.size(c);
  Tensor x = tall ? transpose(g, r, c) : g;  // (..., m, n), m <= n: the Gram matrices are the small ones
  // Each matrix over its Frobenius norm: its spectral norm is then at most 1, as the iteration needs.
  const Tensor norm = sqrt(sum(square(x), {r, c}, true));
  if (o.coefficients == MuonOptions::Coefficients::jordan)
    x = div(x, maximum(norm, full({}, o.eps, x.dtype(), x.device())));
  else
    x = div(x, add(mul(norm, 1.02), o.eps));
  const int64_t m = x.size(r), n = x.size(c);
  // The Gram form in float32 products or float64 only (the NOTE above): not for bfloat16 tensors,
  // nor under bf16 products.
  const bool exact_enough = x.dtype() == DType::f64 || (x.dtype() == DType::f32 && autograd::product_precision() == Precision::fp32);
  if (exact_enough && use_gram_iteration(m, n, o.ns_steps)) {
    x = newton_schulz_gram(x, o);
  } else {
    for (int k = 0; k < o.ns_steps; ++k) {
      const auto [ka, kb, kc] = newton_schulz_step(o, k);
      Tensor a = matmul(x, transpose(x, r, c));           // (..., m, m)
      Tensor b = add(mul(a, kb), mul(matmul(a, a), kc));  // b A + c A^2
      x = add(mul(x, ka), matmul(b, x));                  // a X + B X
    }
  }
  return tall ? contiguous(transpose(x, r, c)) : x;
}

Muon::Muon(std::vector<ParamGroup> matrices, std::vector<ParamGroup> others, const MuonOptions& options)
    : Optimizer(
          [&] {
            // The AdamW groups' rate is adamw.lr when lr() is options.lr, and follows set_lr in proportion.
            if (!(options.lr > 0) || !(options.adamw.lr >= 0))
              throw std::invalid_argument("Muon: need lr > 0 and adamw.lr >= 0, found lr " + std::to_string(options.lr) +
                                          ", adamw.lr " + std::to_string(options.adamw.lr));
            std::vector<ParamGroup> all = std::move(matrices);
            for (ParamGroup& g : others) {
              if (!g.weight_decay) g.weight_decay = options.adamw.weight_decay;
              g.lr_scale *= options.adamw.lr / options.lr;
              all.push_back(std::move(g));
            }
            return all;
          }(),
          options.lr, options.weight_decay, {"momentum_buffer"}),
      options_(options),
      n_matrix_groups_(groups_.size() - others.size()) {
  // (`others` was moved from element by element above: its size is still the count.)
  if (!(options.momentum >= 0 && options.momentum < 1) || options.ns_steps < 0 || !(options.eps > 0))
    throw std::invalid_argument("Muon: need 0 <= momentum < 1, ns_steps >= 0 and eps > 0");
  check_adamw_options(options.adamw, "Muon's AdamW groups");
  for (size_t g = 0; g < n_matrix_groups_; ++g)
    for (const Tensor& p : groups_[g].params)
      if (p.dim() != 2)
        throw std::invalid_argument("Muon: '" + p.name() + "' " + p.describe() +
                                    " is not a matrix; give it to the AdamW groups (muon_split does)");
}

const std::vector<std::string>& Muon::slots_of(size_t group) const {
  return group < n_matrix_groups_ ? muon_slots_ : adamw_slots_;
}

void Muon::step() {
  NoGradGuard no_grad;
  ++step_;
  const MuonOptions& o = options_;
  // The matrices' momentum first; their orthogonalisation then runs once for all matrices of one
  // shape (a GPT's blocks have six of each), as batched products.
  struct Pending {
    size_t group;
    Tensor param, u;
  };
  std::map<std::tuple<int64_t, int64_t, DType, std::string>, std::vector<Pending>> by_shape;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      if (!p.grad().defined()) continue;
      std::vector<Tensor>& s = state_for(g, i);
      if (g >= n_matrix_groups_) {
        adamw_update(p, s, o.adamw, group_lr(g), weight_decay(g), step_);
        continue;
      }
      const Tensor grad = contiguous(p.grad());
      Tensor& buf = s[0];
      copy_(buf, add(mul(buf, o.momentum), mul(grad, 1 - o.momentum)));
      Tensor u = o.nesterov ? add(mul(grad, 1 - o.momentum), mul(buf, o.momentum)) : buf;
      by_shape[{p.size(0), p.size(1), p.dtype(), p.device().str()}].push_back({g, p, u});
    }
  }
  for (auto& [shape, pending] : by_shape) {
    std::vector<Tensor> us;
    for (const Pending& q : pending) us.push_back(q.u);
    const Tensor updates = newton_schulz(pending.size() == 1 ? us[0] : stack(us, 0), o);
    for (size_t k = 0; k < pending.size(); ++k) {
      const Pending& q = pending[k];
      const Tensor update = pending.size() == 1 ? updates : select(updates, 0, int64_t(k));
      const double lr = group_lr(q.group), wd = weight_decay(q.group);
      const double scale = std::sqrt(std::max(1.0, double(q.param.size(0)) / double(q.param.size(1))));
      copy_(q.param, sub(mul(q.param, 1 - lr * wd), mul(update, lr * scale)));
    }
  }
}

std::vector<std::pair<std::string, double>> Muon::hyper_parameters() const {
  return {{"momentum", options_.momentum},   {"nesterov", options_.nesterov ? 1.0 : 0.0},
          {"weight_decay", options_.weight_decay}, {"ns_steps", double(options_.ns_steps)},
          {"ns_polar_express", options_.coefficients == MuonOptions::Coefficients::polar_express ? 1.0 : 0.0},
          {"adamw_lr", options_.adamw.lr},   {"adamw_beta1", options_.adamw.beta1},
          {"adamw_beta2", options_.adamw.beta2}};
}

MuonSplit muon_split(Module& model, double muon_weight_decay, double adamw_weight_decay,
                     const std::vector<std::string>& keep_on_adamw) {
  auto kept = [&](const std::string& module) {
    for (const std::string& k : keep_on_adamw)
      if (module == k || (module.size() > k.size() && module.compare(module.size() - k.size() - 1, k.size() + 1, "." + k) == 0))
        return true;
    return false;
  };
  std::unordered_set<const TensorImpl*> to_muon;
  for (auto& [name, m] : model.named_modules())
    if (auto* linear = dynamic_cast<Linear*>(m); linear && !kept(name) && linear->weight.dim() == 2)
      to_muon.insert(linear->weight.impl());
  MuonSplit split{{ParamGroup{.params = {}, .weight_decay = muon_weight_decay}}, {}};
  NamedTensors rest;
  for (auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad()) continue;
    if (to_muon.count(p.impl())) split.matrices[0].params.push_back(p);
    else rest.emplace_back(name, p);
  }
  split.others = weight_decay_groups(rest, adamw_weight_decay);
  return split;
}

}  // namespace mvgpt::nn
