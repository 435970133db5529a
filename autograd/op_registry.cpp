#include <mvgpt/autograd/op_registry.h>

namespace mvgpt::autograd {

void OpRegistry::add(const std::string& op, std::vector<GradcheckCase> cases) {
  for (RegisteredOp& r : ops_)
    if (r.name == op) {
      for (auto& c : cases) r.cases.push_back(std::move(c));
      return;
    }
  ops_.push_back({op, std::move(cases)});
}

const RegisteredOp* OpRegistry::find(const std::string& op) const {
  for (const RegisteredOp& r : ops_)
    if (r.name == op) return &r;
  return nullptr;
}

const OpRegistry& op_registry() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    register_view_gradchecks(r);
    register_elementwise_gradchecks(r);
    register_reduce_gradchecks(r);
    register_linalg_gradchecks(r);
    register_index_gradchecks(r);
    register_join_gradchecks(r);
    register_dropout_gradchecks(r);
    return r;
  }();
  return registry;
}

}  // namespace mvgpt::autograd
