#include <mvgpt/nn/optim.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_set>

#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/autograd/precision.h>  // the weights' bf16 copies AdamW writes
#include <mvgpt/autograd/ops.h>
#include <mvgpt/fused/adamw.h>
#include <mvgpt/fused/multi_tensor.h>
#include <mvgpt/nn/safetensors.h>

namespace mvgpt::nn {

std::vector<ParamGroup> weight_decay_groups(const NamedTensors& named, double weight_decay,
                                            const std::function<bool(const std::string&, const Tensor&)>& decay) {
  ParamGroup decayed{.params = {}, .weight_decay = weight_decay}, plain{.params = {}, .weight_decay = 0.0};
  for (const auto& [n, t] : named) {
    bool d = decay ? decay(n, t) : t.dim() >= 2;
    (d ? decayed : plain).params.push_back(t);
  }
  return {decayed, plain};
}

std::vector<ParamGroup> with_lr_scale(std::vector<ParamGroup> groups,
                                      const std::unordered_set<const TensorImpl*>& chosen, double lr_scale) {
  std::vector<ParamGroup> kept, scaled;
  for (ParamGroup& g : groups) {
    ParamGroup rest{.params = {}, .weight_decay = g.weight_decay, .lr_scale = g.lr_scale};
    ParamGroup own{.params = {}, .weight_decay = g.weight_decay, .lr_scale = g.lr_scale * lr_scale};
    for (Tensor& p : g.params) (chosen.count(p.impl()) ? own : rest).params.push_back(std::move(p));
    if (!rest.params.empty()) kept.push_back(std::move(rest));
    if (!own.params.empty()) scaled.push_back(std::move(own));
  }
  for (ParamGroup& g : scaled) kept.push_back(std::move(g));
  return kept;
}

// --- Optimizer ---

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr, double default_weight_decay,
                     std::vector<std::string> slot_names)
    : groups_(std::move(groups)), lr_(lr), slot_names_(std::move(slot_names)) {
  set_lr(lr);
  std::unordered_set<const TensorImpl*> seen;
  std::map<std::string, int> name_count;
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (!groups_[g].weight_decay) groups_[g].weight_decay = default_weight_decay;
    if (!(groups_[g].lr_scale >= 0) || !std::isfinite(groups_[g].lr_scale))
      throw std::invalid_argument("Optimizer: group " + std::to_string(g) + "'s lr_scale must be finite and >= 0, found " +
                                  std::to_string(groups_[g].lr_scale));
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      const std::string where = "group " + std::to_string(g) + " parameter " + std::to_string(i);
      if (!p.defined()) throw std::invalid_argument(std::string("Optimizer: ") + where + " is undefined");
      if (!is_floating(p.dtype()) || !p.is_leaf() || !p.requires_grad())
        throw std::invalid_argument(std::string("Optimizer: ") + where + " ('" + p.name() + "', " + p.describe() +
                                    ") must be a floating-point leaf that requires grad");
      if (!seen.insert(p.impl()).second)
        throw std::invalid_argument(std::string("Optimizer: ") + where + " ('" + p.name() +
                                    "') was given more than once");
      ++name_count[p.name()];
    }
  }
  names_.resize(groups_.size());
  state_.resize(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    state_[g].resize(groups_[g].params.size());
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const std::string& n = groups_[g].params[i].name();
      names_[g].push_back(!n.empty() && name_count[n] == 1 ? n : "group" + std::to_string(g) + "." + std::to_string(i));
    }
  }
}

void Optimizer::set_lr(double lr) {
  if (!(lr >= 0) || !std::isfinite(lr))
    throw std::invalid_argument("Optimizer::set_lr: the learning rate must be finite and >= 0, found " +
                                std::to_string(lr));
  lr_ = lr;
}

void Optimizer::zero_grad() {
  for (const ParamGroup& g : groups_)
    for (const Tensor& p : g.params) p.set_grad(Tensor());
}

std::vector<Tensor>& Optimizer::state_for(size_t group, size_t index) {
  const Tensor& p = groups_[group].params[index];
  std::vector<Tensor>& slots = state_[group][index];
  if (slots.empty()) {
    for (size_t s = 0; s < slots_of(group).size(); ++s) slots.push_back(mvgpt::zeros(p.shape(), p.dtype(), p.device()));
  } else if (slots[0].device() != p.device() || slots[0].dtype() != p.dtype()) {
    // The parameter was moved by Module::to after the state was made.
    for (Tensor& s : slots) s = mvgpt::to(mvgpt::to(s, p.device()), p.dtype());
  }
  return slots;
}

NamedTensors Optimizer::state_tensors() const {
  NamedTensors out;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i)
      for (size_t s = 0; s < state_[g][i].size(); ++s)
        out.emplace_back(names_[g][i] + "." + slots_of(g)[s], state_[g][i][s]);
  return out;
}

namespace {
std::string exact(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
  return std::string(buf, end);
}
}  // namespace

void Optimizer::save(const std::string& path) const {
  safetensors::Metadata meta{{"optimizer", type_name()}, {"step", std::to_string(step_)}, {"lr", exact(lr_)}};
  // Which parameters have no state yet (never had a gradient), so load() can tell them from a file
  // that lost some: comma-separated names, usually none.
  std::string without;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i)
      if (state_[g][i].empty()) without += (without.empty() ? "" : ",") + names_[g][i];
  meta["without_state"] = without;
  for (const auto& [k, v] : hyper_parameters()) meta[k] = exact(v);
  safetensors::save(path, state_tensors(), meta);
}

void Optimizer::load(const std::string& path) {
  safetensors::File file = safetensors::load(path, {.mmap = false});
  const std::string what = "Optimizer::load: " + path + ": ";
  auto meta = [&](const char* key) -> const std::string& {
    auto it = file.metadata.find(key);
    if (it == file.metadata.end()) throw std::invalid_argument(what + "metadata has no '" + key + "'");
    return it->second;
  };
  if (meta("optimizer") != type_name())
    throw std::invalid_argument(what + "holds " + meta("optimizer") + " state, this optimizer is " + type_name());
  int64_t step = 0;
  const std::string& step_text = meta("step");
  auto [p, ec] = std::from_chars(step_text.data(), step_text.data() + step_text.size(), step);
  if (ec != std::errc() || p != step_text.data() + step_text.size() || step < 0)
    throw std::invalid_argument(what + "bad step '" + step_text + "'");
  const std::string& lr_text = meta("lr");
  double lr = 0;
  auto [lp, lec] = std::from_chars(lr_text.data(), lr_text.data() + lr_text.size(), lr);
  if (lec != std::errc() || lp != lr_text.data() + lr_text.size() || !(lr >= 0))
    throw std::invalid_argument(what + "bad lr '" + lr_text + "'");

  // Parameters saved without state (no gradient yet). Files from before this key: all or none.
  std::set<std::string> without_state;
  const auto without_it = file.metadata.find("without_state");
  const bool knows_without = without_it != file.metadata.end();
  if (knows_without) {
    std::string_view list = without_it->second;
    while (!list.empty()) {
      const size_t comma = list.find(',');
      without_state.emplace(list.substr(0, comma));
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    }
  }

  // Check every name, shape, dtype and value first.
  std::map<std::string, const Tensor*> given;
  for (const auto& [n, t] : file.tensors) given.emplace(n, &t);
  std::vector<std::string> errors, missing;
  std::set<std::string> used;
  size_t with_state = 0;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& param = groups_[g].params[i];
      size_t found = 0;
      const std::vector<std::string>& slot_names = slots_of(g);
      for (const std::string& slot : slot_names) {
        auto it = given.find(names_[g][i] + "." + slot);
        if (it == given.end()) continue;
        ++found;
        used.insert(it->first);
        const Tensor& t = *it->second;
        if (!(t.shape() == param.shape()))
          errors.push_back(it->first + ": expected shape " + mvgpt::to_string(param.shape()) + ", found " +
                           mvgpt::to_string(t.shape()));
        else if (!is_floating(t.dtype()))
          errors.push_back(it->first + ": expected a float dtype, found " + std::string(dtype_name(t.dtype())));
        else if (const int64_t bad = safetensors::first_non_finite(t); bad >= 0)
          errors.push_back(it->first + ": element " + std::to_string(bad) + " is not finite (NaN or infinity)");
      }
      if (found != 0 && found != slot_names.size())
        errors.push_back(names_[g][i] + ": only " + std::to_string(found) + " of " +
                         std::to_string(slot_names.size()) + " state tensors");
      if (found != 0) ++with_state;
      else if (!without_state.count(names_[g][i])) missing.push_back(names_[g][i]);
    }
  // Without the key, a file with no state at all (saved before the first step) is whole.
  if (!missing.empty() && (knows_without || with_state > 0)) {
    std::string list;
    for (const auto& n : missing) list += (list.empty() ? "" : ", ") + n;
    errors.push_back("no state for " + std::to_string(missing.size()) + " parameter(s): " + list +
                     " (the file lacks it; resuming would restart it at zero)");
  }
  for (const auto& [n, t] : given)
    if (!used.count(n)) errors.push_back(n + ": no parameter of that name");
  if (!errors.empty()) {
    std::string msg = what + "state does not match the parameters:";
    for (const auto& e : errors) msg += "\n  " + e;
    throw std::invalid_argument(msg);
  }

  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& param = groups_[g].params[i];
      std::vector<Tensor>& slots = state_[g][i];
      slots.clear();
      if (!given.count(names_[g][i] + "." + slots_of(g)[0])) continue;  // no state saved: starts fresh
      for (const std::string& slot : slots_of(g)) {
        Tensor s = mvgpt::empty(param.shape(), param.dtype(), param.device());
        mvgpt::copy_(s, *given.at(names_[g][i] + "." + slot));
        slots.push_back(s);
      }
    }
  step_ = step;
  lr_ = lr;
}

// --- AdamW ---

void check_adamw_options(const AdamWOptions& options, const std::string& who) {
  if (!(options.beta1 >= 0 && options.beta1 < 1) || !(options.beta2 >= 0 && options.beta2 < 1) || !(options.eps >= 0))
    throw std::invalid_argument(who + ": need 0 <= beta1, beta2 < 1 and eps >= 0, found beta1 " +
                                std::to_string(options.beta1) + ", beta2 " + std::to_string(options.beta2) +
                                ", eps " + std::to_string(options.eps));
}

void adamw_update(const Tensor& p, std::vector<Tensor>& state, const AdamWOptions& o, double lr, double weight_decay,
                  int64_t step) {
  const AdamWParams hp{.lr = lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weight_decay = weight_decay, .step = step};
  fused::adamw_step_(p, mvgpt::contiguous(p.grad()), state[0], state[1], hp);
}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options)
    : Optimizer(std::move(groups), options.lr, options.weight_decay, {"exp_avg", "exp_avg_sq"}), options_(options) {
  check_adamw_options(options, "AdamW");
}

AdamW::AdamW(const std::vector<Tensor>& params, const AdamWOptions& options)
    : AdamW(std::vector<ParamGroup>{{params, options.weight_decay}}, options) {}

void AdamW::step() {
  NoGradGuard no_grad;
  ++step_;
  // Every parameter in one multi-tensor step (one launch on a GPU), each exactly adamw_update's.
  std::vector<fused::AdamWSlot> slots;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const double lr = group_lr(g), wd = weight_decay(g);
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      if (!p.grad().defined()) continue;
      std::vector<Tensor>& state = state_for(g, i);
      const AdamWParams hp{.lr = lr, .beta1 = options_.beta1, .beta2 = options_.beta2, .eps = options_.eps,
                           .weight_decay = wd, .step = step_};
      // The weight's bfloat16 copy written in the same pass, where the precision policy holds one
      // (NOTE [ Weights rounded by the optimizer ] in autograd/fused/adamw_cpu.cpp).
      slots.push_back({p, mvgpt::contiguous(p.grad()), state[0], state[1], hp,
                       autograd::detail::refreshable_product_operand(p)});
    }
  }
  fused::adamw_step_many_(slots);
  for (const fused::AdamWSlot& s : slots)
    if (s.rounded.defined()) autograd::detail::adopt_product_operand(s.param, s.rounded);
}

std::vector<std::pair<std::string, double>> AdamW::hyper_parameters() const {
  return {{"beta1", options_.beta1}, {"beta2", options_.beta2}, {"eps", options_.eps},
          {"weight_decay", options_.weight_decay}};
}

// --- SGD ---

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& options)
    : Optimizer(std::move(groups), options.lr, options.weight_decay, {"momentum_buffer"}), options_(options) {
  if (options.momentum < 0 || (options.nesterov && (options.momentum <= 0 || options.dampening != 0)))
    throw std::invalid_argument("SGD: momentum must be >= 0, and nesterov needs momentum > 0 and dampening 0");
}

SGD::SGD(const std::vector<Tensor>& params, const SGDOptions& options)
    : SGD(std::vector<ParamGroup>{{params, options.weight_decay}}, options) {}

void SGD::step() {
  NoGradGuard no_grad;
  ++step_;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const double wd = weight_decay(g);
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      if (!p.grad().defined()) continue;
      Tensor d = p.grad();
      if (wd != 0) d = mvgpt::add(d, mvgpt::mul(p, wd));
      if (options_.momentum != 0) {
        const bool fresh = !has_state(g, i);
        Tensor& buf = state_for(g, i)[0];
        // The first step copies the gradient into the buffer (no dampening), as PyTorch.
        if (fresh) {
          mvgpt::copy_(buf, d);
        } else {
          mvgpt::copy_(buf, mvgpt::add(mvgpt::mul(buf, options_.momentum), mvgpt::mul(d, 1 - options_.dampening)));
        }
        d = options_.nesterov ? mvgpt::add(d, mvgpt::mul(buf, options_.momentum)) : buf;
      }
      mvgpt::copy_(p, mvgpt::sub(p, mvgpt::mul(d, group_lr(g))));
    }
  }
}

std::vector<std::pair<std::string, double>> SGD::hyper_parameters() const {
  return {{"momentum", options_.momentum}, {"dampening", options_.dampening},
          {"weight_decay", options_.weight_decay}, {"nesterov", options_.nesterov ? 1.0 : 0.0}};
}

// --- clipping ---

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  if (!(max_norm > 0))
    throw std::invalid_argument("clip_grad_norm_: max_norm must be positive, found " + std::to_string(max_norm));
  NoGradGuard no_grad;
  // All gradients at once (autograd/fused/multi_tensor.h): on a GPU a few launches and one read of
  // the sum, where a kernel per tensor took hundreds.
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  const double norm = std::sqrt(fused::sum_squares(grads));
  if (!std::isfinite(norm)) return norm;
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1) fused::scale_(grads, coef);
  return norm;
}

}  // namespace mvgpt::nn
