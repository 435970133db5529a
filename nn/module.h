#pragma once
// Module: the base of every layer. A module registers its parameters, buffers and submodules by
// name, in order; the dotted names ("h.0.attn.c_attn.weight") are the checkpoint's names.
//
// NOTE [ Parameters are stable handles ]
// A parameter is a Tensor handle shared by the layer's member (e.g. Linear::weight), the module's
// registry and whoever else holds it (an optimizer, a gradient hook). to(Device) and to(DType)
// replace the data *inside* the TensorImpl (storage, layout, dtype; the gradient is converted too),
// so every holder sees the moved parameter and an optimizer made before to() stays valid. Its
// per-parameter state (AdamW's m and v) must still follow: optimizers check and convert lazily.
//
// Tied parameters (the same Tensor registered under two names, e.g. GPT-2's wte and lm_head)
// appear once in parameters()/named_parameters() (first name wins) and under every name in
// state_dict(), as in PyTorch.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <mvgpt/tensor/tensor.h>

namespace mvgpt::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // A short type name for messages and printing ("Linear").
  virtual std::string type_name() const { return "Module"; }

  // --- computing ---
  // The module as a function of one tensor, so modules compose (Sequential, a list of layers called
  // in turn) without knowing each other's types. Layers with more inputs (attention's positions and
  // cache) add their own forward beside it. The base throws std::logic_error naming the type.
  virtual Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  // forward(x) where one product is all that reads the result (a pre-norm block's norm before a
  // branch whose input_feeds_one_product()): a module may hand it as the product multiplies it
  // (LayerNorm: bfloat16 under the bf16 policy, NOTE [ Norms made for products ] in
  // autograd/fused/norms.h). The base calls forward.
  virtual Tensor forward_for_product(const Tensor& x) const { return forward(x); }
  // Whether forward reads its input only as the operand of one product (no adapter or second
  // product beside it), so that its gradient comes from that product alone. The base: false.
  virtual bool input_feeds_one_product() const { return false; }

  // --- structure ---
  // Parameters: floating-point leaves that require grad. Returns the registered handle.
  Tensor register_parameter(const std::string& name, Tensor t);
  // Buffers: state that is not trained (running statistics, masks). Non-persistent buffers are left
  // out of state_dict (caches that can be recomputed).
  Tensor register_buffer(const std::string& name, Tensor t, bool persistent = true);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  // Removes the child `name` (a module added for a while, such as a LoRA adapter being merged);
  // std::invalid_argument when there is none.
  void remove_module(const std::string& name);

  // Recursive, in registration order, each tensor once.
  std::vector<Tensor> parameters() const;
  NamedTensors named_parameters() const;
  std::vector<Tensor> buffers() const;
  NamedTensors named_buffers() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  // This module ("") and every descendant, depth first, with dotted names.
  std::vector<std::pair<std::string, Module*>> named_modules();
  // The total number of parameter elements.
  int64_t num_parameters() const;

  // --- mode ---
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // --- data ---
  // Moves parameters and buffers (in place, see the note above).
  void to(Device device);
  // Converts floating-point parameters and buffers; integer buffers keep their dtype.
  void to(DType dtype);
  // Drops every parameter's gradient (set to undefined, so the next backward allocates fresh).
  void zero_grad();

  // Parameters and persistent buffers by dotted name, in registration order.
  NamedTensors state_dict() const;
  // Copies each tensor of `state` into the parameter or buffer of the same name (converting between
  // float dtypes, and device). Throws std::invalid_argument listing every missing, unexpected (strict
  // only), mis-shaped tensor and integer/bool tensor given for a float one (or the reverse), with
  // expected vs found, before copying anything.
  void load_state_dict(const NamedTensors& state, bool strict = true);

  // One line per module with its parameters' shapes.
  std::string to_string() const;

 private:
  struct Slot {
    std::string name;
    Tensor tensor;
    bool persistent = true;
  };
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name, const char* what) const;
  // Visits (dotted name, tensor) of every parameter (and buffer) slot, tied ones included.
  template <class F>
  void visit(const std::string& prefix, bool params, bool buffers, bool persistent_only, F&& f) const;
  void rename(const std::string& prefix);
  void to_impl(bool device_change, Device device, DType dtype);

  std::vector<Slot> params_;
  std::vector<Slot> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// An ordered list of submodules of type M (any module by default) named "0", "1", ... (GPT's
// "h.0", "h.1"); list[i] is an M, so a model iterates its blocks without casts.
template <class M = Module>
class ModuleListOf : public Module {
 public:
  std::string type_name() const override { return "ModuleList"; }
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    modules_.push_back(module);
    return register_module(std::to_string(modules_.size() - 1), std::move(module));
  }
  size_t size() const { return modules_.size(); }
  M& operator[](size_t i) const { return *modules_.at(i); }
  const std::shared_ptr<M>& ptr(size_t i) const { return modules_.at(i); }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }
  // The i-th module as a more derived type (std::invalid_argument when it is not one).
  template <class D>
  D& at(size_t i) const {
    auto* m = dynamic_cast<D*>(modules_.at(i).get());
    if (!m) throw std::invalid_argument("ModuleList::at: module " + std::to_string(i) + " is a " + modules_.at(i)->type_name());
    return *m;
  }

 private:
  std::vector<std::shared_ptr<M>> modules_;
};
using ModuleList = ModuleListOf<Module>;

// Modules applied in turn, each to the previous one's output (children "0", "1", ...).
class Sequential : public ModuleListOf<Module> {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules) {
    for (auto& m : modules) push_back(std::move(m));
  }
  std::string type_name() const override { return "Sequential"; }
  Tensor forward(const Tensor& x) const override;
};

// A function of one tensor as a module (relu, gelu, ...), for Sequential; no parameters.
class Functional : public Module {
 public:
  Functional(Tensor (*fn)(const Tensor&), std::string name) : fn_(fn), name_(std::move(name)) {}
  std::string type_name() const override { return name_; }
  Tensor forward(const Tensor& x) const override { return fn_(x); }

 private:
  Tensor (*fn_)(const Tensor&);
  std::string name_;
};

}  // namespace mvgpt::nn
