#include <mvgpt/nn/lora.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <stdexcept>

#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/nn/safetensors.h>
#include <mvgpt/util/hash.h>

namespace mvgpt::nn {

namespace {

bool ends_with_target(const std::string& name, const std::string& target) {
  return name == target || (name.size() > target.size() && name.compare(name.size() - target.size(), target.size(), target) == 0 &&
                            name[name.size() - target.size() - 1] == '.');
}

// Every Linear under root (by dotted name) that carries an adapter.
std::vector<std::pair<std::string, Linear*>> adapted_layers(const Module& root) {
  std::vector<std::pair<std::string, Linear*>> out;
  for (auto& [name, m] : const_cast<Module&>(root).named_modules())  // only read
    if (auto* l = dynamic_cast<Linear*>(m); l && l->lora_A) out.emplace_back(name, l);
  return out;
}

// "8", "2.5", "1e+38": what a person reads in a message.
std::string format_number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

}  // namespace

bool is_lora_name(const std::string& name) {
  for (const char* part : {"lora_A.", "lora_B."})
    if (name.rfind(part, 0) == 0 || name.find(std::string(".") + part) != std::string::npos) return true;
  return false;
}

LoRAOptions lora_options(const Module& root) {
  LoRAOptions o;
  o.rank = 0;
  o.targets.clear();
  for (auto& [name, l] : adapted_layers(root)) {
    o.rank = l->lora_A->out_features;
    o.alpha = l->lora_scale * double(o.rank);
    o.dropout = l->lora_dropout;
    o.targets.push_back(name);
  }
  return o;
}

NamedTensors add_lora(Module& root, const LoRAOptions& options, const Init& init) {
  if (options.rank < 1) throw std::invalid_argument("add_lora: rank " + std::to_string(options.rank) + " must be at least 1");
  if (!std::isfinite(options.alpha) || options.alpha <= 0)
    throw std::invalid_argument("add_lora: alpha must be a positive number");
  // alpha / rank scales every update; trained adapters use 0.5..16. Past kMaxLoRAScale it can only be
  // a damaged or edited file, and its products overflow float32 (alpha 1e38 made merge write infinities).
  if (options.alpha / double(options.rank) > kMaxLoRAScale)
    throw std::invalid_argument("add_lora: alpha " + format_number(options.alpha) + " over rank " + std::to_string(options.rank) +
                                " scales the update by " + format_number(options.alpha / double(options.rank)) +
                                ", past the limit of " + format_number(kMaxLoRAScale));
  if (!(options.dropout >= 0 && options.dropout < 1))
    throw std::invalid_argument("add_lora: dropout " + format_number(options.dropout) + " must be in [0, 1)");
  std::vector<Linear*> targets;
  std::set<std::string> matched;
  for (auto& [name, m] : root.named_modules()) {
    auto* l = dynamic_cast<Linear*>(m);
    if (!l || is_lora_name(name + ".")) continue;
    for (const auto& t : options.targets)
      if (ends_with_target(name, t)) {
        if (l->lora_A) throw std::invalid_argument("add_lora: " + name + " already has an adapter");
        targets.push_back(l);
        matched.insert(t);
        break;
      }
  }
  // A target that names no layer is a typo or another model's name (SwiGLU's are w1, w2, w3).
  std::vector<std::string> unmatched;
  for (const auto& t : options.targets)
    if (!matched.count(t)) unmatched.push_back(t);
  if (!unmatched.empty())
    throw std::invalid_argument("add_lora: no Linear layer is named like " + join(unmatched) + " (targets are layer names such as c_attn)");
  for (Linear* l : targets) {
    Init a_init = init;
    a_init.dtype = l->weight.dtype();
    a_init.device = l->weight.device();
    // PEFT's A: Kaiming-uniform U(-1/sqrt(in), 1/sqrt(in)); a normal of the same variance.
    a_init.std = 1.0 / std::sqrt(3.0 * double(l->in_features));
    l->lora_A = l->register_module("lora_A", std::make_shared<Linear>(l->in_features, options.rank, false, a_init));
    l->lora_B = l->register_module("lora_B", std::make_shared<Linear>(options.rank, l->out_features, false, a_init));
    NoGradGuard no_grad;
    mvgpt::copy_(l->lora_B->weight, mvgpt::zeros_like(l->lora_B->weight));  // the model starts unchanged
    l->lora_scale = options.alpha / double(options.rank);
    l->lora_dropout = options.dropout;
    if (!root.is_training()) l->lora_A->eval(), l->lora_B->eval();
  }
  for (auto& [name, p] : root.named_parameters()) p.requires_grad_(is_lora_name(name));
  return lora_parameters(root);
}

NamedTensors lora_parameters(const Module& root) {
  NamedTensors out;
  for (auto& [name, p] : root.named_parameters())
    if (is_lora_name(name)) out.emplace_back(name, p);
  return out;
}

void merge_lora(Module& root) {
  NoGradGuard no_grad;
  for (auto& [name, l] : adapted_layers(root)) {
    // In float64, rounded once into the weight's dtype.
    const Tensor b = mvgpt::to(l->lora_B->weight, DType::f64), a = mvgpt::to(l->lora_A->weight, DType::f64);
    const Tensor merged = mvgpt::add(mvgpt::to(l->weight, DType::f64), mvgpt::mul(mvgpt::matmul(b, a), l->lora_scale));  // (out, in)
    mvgpt::copy_(l->weight, mvgpt::to(merged, l->weight.dtype()));
    l->remove_module("lora_A");
    l->remove_module("lora_B");
    l->lora_A.reset();
    l->lora_B.reset();
    l->lora_scale = 0;
  }
  for (auto& [name, p] : root.named_parameters()) p.requires_grad_(true);
}

void save_adapter(const std::string& path, const Module& root, const LoRAOptions& options) {
  const NamedTensors tensors = lora_parameters(root);
  if (tensors.empty()) throw std::invalid_argument("save_adapter: the model has no adapters");
  std::ostringstream alpha, drop;
  alpha.precision(17);
  drop.precision(17);
  alpha << options.alpha;
  drop << options.dropout;
  safetensors::save(path, tensors,
                    {{"format", "pt"}, {"lora_rank", std::to_string(options.rank)}, {"lora_alpha", alpha.str()},
                     {"lora_dropout", drop.str()}, {"lora_targets", join(options.targets)},
                     {"base_weights_xxh64", util::to_hex(base_weights_fingerprint(root))}});
}

uint64_t base_weights_fingerprint(const Module& root) {
  util::Xxh64 h;
  for (const auto& [name, p] : root.named_parameters()) {
    if (is_lora_name(name)) continue;
    h.update(name.data(), name.size() + 1);  // with its '\0': names and values never run together
    const Tensor host = mvgpt::contiguous(mvgpt::to(mvgpt::to(p.detach(), Device::cpu()), DType::f32));
    h.update(host.data<float>(), size_t(host.numel()) * sizeof(float));
  }
  return h.digest();
}

Adapter load_adapter(const std::string& path) {
  safetensors::File file = safetensors::load(path);
  Adapter a;
  auto meta = [&](const char* key) -> std::string {
    for (const auto& [k, v] : file.metadata)
      if (k == key) return v;
    throw std::runtime_error(path + ": not a LoRA adapter (no \"" + key + "\" in its metadata)");
  };
  try {
    a.options.rank = std::stoll(meta("lora_rank"));
    a.options.alpha = std::stod(meta("lora_alpha"));
    a.options.dropout = std::stod(meta("lora_dropout"));
  } catch (const std::logic_error&) {
    throw std::runtime_error(path + ": the adapter's rank, alpha or dropout is not a number");
  }
  // The numbers that scale the weights: checked here, naming the file (add_lora checks them again).
  if (a.options.rank < 1 || !std::isfinite(a.options.alpha) || a.options.alpha <= 0 ||
      a.options.alpha / double(a.options.rank) > kMaxLoRAScale || !(a.options.dropout >= 0 && a.options.dropout < 1))
    throw std::runtime_error(path + ": the adapter's metadata is out of range (lora_rank " + meta("lora_rank") + ", lora_alpha " +
                             meta("lora_alpha") + ", lora_dropout " + meta("lora_dropout") +
                             "; expected a rank of at least 1, 0 < alpha <= " + format_number(kMaxLoRAScale) +
                             " x rank and a dropout in [0, 1))");
  for (const auto& [k, v] : file.metadata)
    if (k == "base_weights_xxh64") a.base_fingerprint = v;
  a.options.targets.clear();
  std::istringstream targets(meta("lora_targets"));
  for (std::string t; std::getline(targets, t, ',');)
    if (!t.empty()) a.options.targets.push_back(t);
  for (auto& [name, t] : file.tensors) {
    if (!is_lora_name(name)) throw std::runtime_error(path + ": tensor " + name + " is not an adapter's (lora_A or lora_B)");
    // As the model's weights are (gpt/checkpoint.cpp): a NaN here gave a finite loss and garbage stories.
    safetensors::require_finite_float(path, name, t, "for an adapter's weight", "the adapter is unusable");
    a.tensors.emplace_back(name, t);
  }
  return a;
}

void apply_adapter(Module& root, const Adapter& adapter) {
  // The rank the metadata declares sizes every adapter add_lora allocates: it must be the file's
  // tensors' own before anything is allocated (an edited lora_rank of 1e9 would ask for terabytes).
  for (const auto& [name, t] : adapter.tensors) {
    const bool is_a = ("." + name).find(".lora_A.") != std::string::npos;
    const int64_t r = t.dim() != 2 ? -1 : is_a ? t.shape()[0] : t.shape()[1];
    if (r != adapter.options.rank)
      throw std::invalid_argument("apply_adapter: " + name + " is " + mvgpt::to_string(t.shape()) + ", not of the rank " +
                                  std::to_string(adapter.options.rank) + " that lora_rank says");
  }
  NamedTensors params = add_lora(root, adapter.options);
  std::set<std::string> given;
  for (const auto& [name, t] : adapter.tensors) given.insert(name);
  std::string problems;
  for (const auto& [name, p] : params)
    if (!given.count(name)) problems += " missing " + name + ";";
  std::set<std::string> known;
  for (const auto& [name, p] : params) known.insert(name);
  for (const auto& name : given)
    if (!known.count(name)) problems += " unexpected " + name + ";";
  if (!problems.empty()) throw std::invalid_argument("apply_adapter: the adapter does not fit the model:" + problems);
  NoGradGuard no_grad;
  for (const auto& [name, p] : params)
    for (const auto& [n, t] : adapter.tensors)
      if (n == name) {
        if (t.shape() != p.shape())
          throw std::invalid_argument("apply_adapter: " + name + " is " + mvgpt::to_string(t.shape()) + " in the adapter, " +
                                      mvgpt::to_string(p.shape()) + " in the model (another rank or model)");
        mvgpt::copy_(p, mvgpt::to(mvgpt::to(t, p.device()), p.dtype()));
      }
}

}  // namespace mvgpt::nn
