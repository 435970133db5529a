#pragma once
// The registry of differentiable ops and their gradient checks.
//
// NOTE [ Registering gradient checks ]
// Each file of autograd/ that defines differentiable ops ends with a register_*_gradchecks function
// that adds, for every op it defines, one or more GradcheckCases (tiny shapes; broadcast and
// non-contiguous inputs; inputs kept off kinks). op_registry() calls these functions explicitly
// (not through static initialisers, which a static library may drop). tests/autograd/registry_test.cpp
// runs every case, and checks that the registered names equal the ops declared in autograd/ops.h
// between its "differentiable ops" markers: that list is the single source of truth.
#include <string>
#include <vector>

#include <mvgpt/autograd/gradcheck.h>

namespace mvgpt::autograd {

struct RegisteredOp {
  std::string name;
  std::vector<GradcheckCase> cases;
};

class OpRegistry {
 public:
  // Adds cases for op (several calls for the same op append).
  void add(const std::string& op, std::vector<GradcheckCase> cases);
  const std::vector<RegisteredOp>& ops() const { return ops_; }
  const RegisteredOp* find(const std::string& op) const;

 private:
  std::vector<RegisteredOp> ops_;
};

// Every differentiable op with its cases (built on first use).
const OpRegistry& op_registry();

// One per file of ops (views.cpp, elementwise.cpp, reduce.cpp, linalg.cpp, index.cpp, join.cpp, dropout.cpp); the fused ops
// register theirs with their units (autograd/fused/unit.h).
void register_view_gradchecks(OpRegistry& r);
void register_elementwise_gradchecks(OpRegistry& r);
void register_reduce_gradchecks(OpRegistry& r);
void register_linalg_gradchecks(OpRegistry& r);
void register_index_gradchecks(OpRegistry& r);
void register_join_gradchecks(OpRegistry& r);
void register_dropout_gradchecks(OpRegistry& r);

}  // namespace mvgpt::autograd
