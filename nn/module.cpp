#include <mvgpt/nn/module.h>

#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_set>

#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/autograd/ops.h>

namespace mvgpt::nn {

void Module::check_new_name(const std::string& name, const char* what) const {
  if (name.empty() || name.find('.') != std::string::npos)
    throw std::invalid_argument(std::string("Module::") + what + ": name '" + name +
                                "' must be non-empty and contain no '.'");
  bool taken = false;
  for (const Slot& s : params_) taken |= s.name == name;
  for (const Slot& s : buffers_) taken |= s.name == name;
  for (const auto& [n, c] : children_) taken |= n == name;
  if (taken)
    throw std::invalid_argument(std::string("Module::") + what + ": " + type_name() + " already has a member named '" +
                                name + "'");
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  check_new_name(name, "register_parameter");
  if (!t.defined()) throw std::invalid_argument("Module::register_parameter: parameter '" + name + "' is undefined");
  if (!is_floating(t.dtype()))
    throw std::invalid_argument("Module::register_parameter: parameter '" + name + "' must be floating point, found " +
                                std::string(dtype_name(t.dtype())));
  if (!t.is_leaf())
    throw std::invalid_argument("Module::register_parameter: parameter '" + name +
                                "' is the result of a recorded op; pass a leaf (detach() it)");
  t.requires_grad_(true);
  t.set_name(name);
  params_.push_back({name, t, true});
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t, bool persistent) {
  check_new_name(name, "register_buffer");
  if (!t.defined()) throw std::invalid_argument("Module::register_buffer: buffer '" + name + "' is undefined");
  t.set_name(name);
  buffers_.push_back({name, t, persistent});
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name, "register_module");
  if (!module) throw std::invalid_argument("Module::register_module: module '" + name + "' is null");
  module->rename(name + ".");
  children_.emplace_back(name, std::move(module));
}

void Module::rename(const std::string& prefix) {
  for (Slot& s : params_) s.tensor.set_name(prefix + s.name);
  for (Slot& s : buffers_) s.tensor.set_name(prefix + s.name);
  for (auto& [n, c] : children_) c->rename(prefix + n + ".");
}

template <class F>
void Module::visit(const std::string& prefix, bool params, bool buffers, bool persistent_only, F&& f) const {
  if (params)
    for (const Slot& s : params_) f(prefix + s.name, s.tensor);
  if (buffers)
    for (const Slot& s : buffers_)
      if (s.persistent || !persistent_only) f(prefix + s.name, s.tensor);
  for (const auto& [n, c] : children_) c->visit(prefix + n + ".", params, buffers, persistent_only, f);
}

namespace {
// Keeps the first occurrence of each tensor handle.
NamedTensors unique(NamedTensors all) {
  std::unordered_set<const TensorImpl*> seen;
  NamedTensors out;
  for (auto& [n, t] : all)
    if (seen.insert(t.impl()).second) out.emplace_back(std::move(n), std::move(t));
  return out;
}
std::vector<Tensor> handles(const NamedTensors& named) {
  std::vector<Tensor> out;
  out.reserve(named.size());
  for (const auto& [n, t] : named) out.push_back(t);
  return out;
}
}  // namespace

NamedTensors Module::named_parameters() const {
  NamedTensors all;
  visit("", true, false, false, [&](std::string n, const Tensor& t) { all.emplace_back(std::move(n), t); });
  return unique(std::move(all));
}

std::vector<Tensor> Module::parameters() const { return handles(named_parameters()); }

NamedTensors Module::named_buffers() const {
  NamedTensors all;
  visit("", false, true, false, [&](std::string n, const Tensor& t) { all.emplace_back(std::move(n), t); });
  return unique(std::move(all));
}

std::vector<Tensor> Module::buffers() const { return handles(named_buffers()); }

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (auto& [n, c] : children_)
    for (auto& [cn, m] : c->named_modules()) out.emplace_back(cn.empty() ? n : n + "." + cn, m);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::to_impl(bool device_change, Device device, DType dtype) {
  NoGradGuard no_grad;
  auto convert = [&](const Tensor& t) -> Tensor {
    if (device_change) return t.device() == device ? t : mvgpt::to(t, device);
    return (!is_floating(t.dtype()) || t.dtype() == dtype) ? t : mvgpt::to(t, dtype);
  };
  NamedTensors all;
  visit("", true, true, false, [&](std::string n, const Tensor& t) { all.emplace_back(std::move(n), t); });
  for (auto& [name, t] : unique(std::move(all))) {
    Tensor moved = convert(t);
    if (moved.same(t)) continue;
    // Swap the data inside the existing impl so every holder of the handle sees it (see module.h).
    TensorImpl* impl = t.impl();
    impl->storage = moved.storage();
    impl->strides = moved.strides();
    impl->offset = moved.offset();
    impl->dtype = moved.dtype();
    if (impl->grad.defined()) impl->grad = convert(impl->grad);
    t.bump_version();
  }
}

void Module::to(Device device) { to_impl(true, device, DType::f32); }
void Module::to(DType dtype) {
  if (!is_floating(dtype))
    throw std::invalid_argument("Module::to: parameters can only be converted to a floating-point dtype, not " +
                                std::string(dtype_name(dtype)));
  to_impl(false, Device::cpu(), dtype);
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.set_grad(Tensor());
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  visit("", true, true, true, [&](std::string n, const Tensor& t) { out.emplace_back(std::move(n), t); });
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  std::map<std::string_view, const Tensor*> given;
  std::vector<std::string> duplicated;
  for (const auto& [n, t] : state)
    if (!given.emplace(n, &t).second) duplicated.push_back(n);

  NamedTensors own = state_dict();
  std::vector<std::string> missing, mis_shaped, wrong_dtype;
  std::set<std::string_view> used;
  for (const auto& [n, t] : own) {
    auto it = given.find(n);
    if (it == given.end()) {
      missing.push_back(n);
      continue;
    }
    used.insert(it->first);
    const Tensor& src = *it->second;
    if (!src.defined()) {
      mis_shaped.push_back(n + " (undefined tensor)");
    } else if (!(src.shape() == t.shape())) {
      mis_shaped.push_back(n + " (expected " + mvgpt::to_string(t.shape()) + ", found " +
                           mvgpt::to_string(src.shape()) + ")");
    } else if (is_floating(t.dtype()) != is_floating(src.dtype())) {
      // Converting between floats is a choice of precision; an int or bool tensor is not a weight.
      wrong_dtype.push_back(n + " (expected " + std::string(dtype_name(t.dtype())) + ", found " +
                            std::string(dtype_name(src.dtype())) + ")");
    }
  }
  std::vector<std::string> unexpected;
  for (const auto& [n, t] : state)
    if (!used.count(n)) unexpected.push_back(n);

  auto list = [](const std::vector<std::string>& names) {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
    return s;
  };
  std::string errors;
  if (!duplicated.empty()) errors += "\n  given twice: " + list(duplicated);
  if (strict && !missing.empty()) errors += "\n  missing: " + list(missing);
  if (strict && !unexpected.empty()) errors += "\n  unexpected: " + list(unexpected);
  if (!mis_shaped.empty()) errors += "\n  shape mismatch: " + list(mis_shaped);
  if (!wrong_dtype.empty()) errors += "\n  dtype mismatch: " + list(wrong_dtype);
  if (!errors.empty())
    throw std::invalid_argument("Module::load_state_dict: " + type_name() + " cannot load the state:" + errors);

  NoGradGuard no_grad;
  for (const auto& [n, t] : own) {
    auto it = given.find(n);
    if (it != given.end() && !it->second->same(t)) mvgpt::copy_(t, *it->second);
  }
}

std::string Module::to_string() const {
  std::ostringstream os;
  auto rec = [&](auto&& self, const Module& m, const std::string& name, int depth) -> void {
    os << std::string(size_t(depth) * 2, ' ') << (name.empty() ? "" : name + ": ") << m.type_name();
    for (const Slot& s : m.params_) os << " " << s.name << mvgpt::to_string(s.tensor.shape());
    os << "\n";
    for (const auto& [n, c] : m.children_) self(self, *c, n, depth + 1);
  };
  rec(rec, *this, "", 0);
  return os.str();
}

void Module::remove_module(const std::string& name) {
  for (auto it = children_.begin(); it != children_.end(); ++it)
    if (it->first == name) {
      children_.erase(it);
      return;
    }
  throw std::invalid_argument("Module::remove_module: " + type_name() + " has no child '" + name + "'");
}

Tensor Module::forward(const Tensor&) const {
  throw std::logic_error(type_name() + " has no forward of one tensor; call its own forward with the inputs it takes");
}

Tensor Sequential::forward(const Tensor& x) const {
  Tensor y = x;
  for (const auto& m : *this) y = m->forward(y);
  return y;
}

}  // namespace mvgpt::nn
