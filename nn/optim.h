#pragma once
// Optimizers (AdamW, SGD with momentum), gradient clipping, and saving optimizer state.
//
// NOTE [ Optimizer state and resuming ]
// Per-parameter state (AdamW's exp_avg and exp_avg_sq, SGD's momentum_buffer) is created at the
// first step that parameter has a gradient, on the parameter's device and dtype, and follows it
// lazily if Module::to moves the parameter later. save() writes it as safetensors, one tensor per
// "<parameter name>.<slot>", with the step count and hyper-parameters in the metadata; load()
// restores it so that training resumes bit for bit. Parameters are identified by their dotted
// name (Module sets it); unnamed or duplicate names fall back to "group<g>.<i>".
// The step count is global (PyTorch counts per parameter; the two agree when every parameter gets
// a gradient at every step, as in GPT training).
#include <functional>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include <mvgpt/nn/module.h>
#include <mvgpt/tensor/tensor.h>

namespace mvgpt::nn {

struct ParamGroup {
  std::vector<Tensor> params;
  std::optional<double> weight_decay = std::nullopt;  // the optimizer's default when unset
  // The group's learning rate is the optimizer's (set_lr, the schedule's) times this: per-group
  // rates that follow one schedule.
  double lr_scale = 1.0;
};

// Splits named parameters into two groups: decayed (where `decay(name, tensor)` holds; by default
// tensors of 2 or more dims: weight matrices and embeddings) and not decayed (biases, norm gains).
std::vector<ParamGroup> weight_decay_groups(
    const NamedTensors& named, double weight_decay,
    const std::function<bool(const std::string&, const Tensor&)>& decay = {});

// Per-group rates: the parameters in `chosen` leave their groups for copies of those groups (same
// weight decay) whose lr_scale is multiplied by `lr_scale`, placed after the rest; groups left empty
// are dropped. For example the embeddings at their own rate:
//   with_lr_scale(weight_decay_groups(named, 0.1), {wte.weight.impl()}, 3.0)
std::vector<ParamGroup> with_lr_scale(std::vector<ParamGroup> groups,
                                      const std::unordered_set<const TensorImpl*>& chosen, double lr_scale);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual const char* type_name() const = 0;
  // One update of every parameter that has a gradient (parameters without one are skipped).
  virtual void step() = 0;
  // Drops the gradients of every parameter.
  void zero_grad();

  double lr() const { return lr_; }
  void set_lr(double lr);
  int64_t step_count() const { return step_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }

  // The state as named tensors ("<param>.<slot>"), only for parameters that have state.
  NamedTensors state_tensors() const;
  // Writes/reads the state (safetensors). load() checks the optimizer type, every name, shape and
  // dtype, that every value is finite and that every parameter which had state when saved has it
  // (save() records those without); it throws std::invalid_argument listing what is wrong before
  // changing anything.
  void save(const std::string& path) const;
  void load(const std::string& path);

 protected:
  Optimizer(std::vector<ParamGroup> groups, double lr, double default_weight_decay,
            std::vector<std::string> slot_names);
  double weight_decay(size_t group) const { return *groups_[group].weight_decay; }
  // The state slots of parameter (group, index), created as zeros like the parameter when absent
  // and moved to its device/dtype when it has moved.
  std::vector<Tensor>& state_for(size_t group, size_t index);
  bool has_state(size_t group, size_t index) const { return !state_[group][index].empty(); }
  // Hyper-parameters saved in the metadata and checked (loosely: only the type) on load.
  virtual std::vector<std::pair<std::string, double>> hyper_parameters() const = 0;
  // The state slots of a group's parameters: the constructor's slot_names unless an optimizer
  // updates its groups differently (Muon's matrices and its AdamW groups).
  virtual const std::vector<std::string>& slots_of(size_t group) const { return slot_names_; }
  // The rate of group g: lr() times its lr_scale.
  double group_lr(size_t group) const { return lr_ * groups_[group].lr_scale; }

  std::vector<ParamGroup> groups_;
  double lr_;
  int64_t step_ = 0;

 private:
  std::vector<std::string> slot_names_;
  std::vector<std::vector<std::string>> names_;               // [group][index]
  std::vector<std::vector<std::vector<Tensor>>> state_;      // [group][index][slot]
};

struct AdamWOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};
// std::invalid_argument "<who>: need 0 <= beta1, beta2 < 1 and eps >= 0, found ..." when they are not.
void check_adamw_options(const AdamWOptions& options, const std::string& who);
// One AdamW update of p from its gradient, with its state {exp_avg, exp_avg_sq}: `options`' betas and
// eps at the group's lr and weight decay (AdamW's step, and Muon's AdamW groups).
void adamw_update(const Tensor& p, std::vector<Tensor>& state, const AdamWOptions& options, double lr, double weight_decay,
                  int64_t step);

// Decoupled weight decay (Loshchilov & Hutter), the arithmetic of torch.optim.AdamW, through the
// fused::adamw_step_ kernel (autograd/fused/adamw.h).
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options = {});
  AdamW(const std::vector<Tensor>& params, const AdamWOptions& options = {});
  const char* type_name() const override { return "AdamW"; }
  void step() override;
  const AdamWOptions& options() const { return options_; }

 protected:
  std::vector<std::pair<std::string, double>> hyper_parameters() const override;

 private:
  AdamWOptions options_;
};

struct SGDOptions {
  double lr = 1e-2, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

// torch.optim.SGD: g += wd * p; buf = momentum * buf + (1 - dampening) * g (buf = g at first);
// g = nesterov ? g + momentum * buf : buf; p -= lr * g.
class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> groups, const SGDOptions& options = {});
  SGD(const std::vector<Tensor>& params, const SGDOptions& options = {});
  const char* type_name() const override { return "SGD"; }
  void step() override;
  const SGDOptions& options() const { return options_; }

 protected:
  std::vector<std::pair<std::string, double>> hyper_parameters() const override;

 private:
  SGDOptions options_;
};

// Scales the gradients in place so that their global L2 norm is at most max_norm (by
// max_norm / (norm + 1e-6), as PyTorch) and returns the norm before clipping. The norm is summed in
// double, parameter by parameter in order, so it does not depend on the thread count. Parameters
// without a gradient are skipped; a non-finite norm is returned and the gradients are left alone.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

}  // namespace mvgpt::nn
