// Every differentiable op passes its registered gradient checks, and every op declared in
// autograd/ops.h has them (NOTE [ The list of differentiable ops ] there).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <mvgpt/autograd/op_registry.h>
#include <mvgpt/autograd/ops.h>

namespace mvgpt {
namespace {

using autograd::op_registry;

std::vector<std::string> registered_names() {
  std::vector<std::string> names;
  for (const auto& op : op_registry().ops()) names.push_back(op.name);
  return names;
}

class OpGradcheck : public ::testing::TestWithParam<std::string> {};

TEST_P(OpGradcheck, MatchesFiniteDifferences) {
  const autograd::RegisteredOp* op = op_registry().find(GetParam());
  ASSERT_NE(op, nullptr);
  ASSERT_FALSE(op->cases.empty());
  for (const auto& c : op->cases) {
    autograd::GradcheckResult r = autograd::run_case(op->name, c);
    EXPECT_TRUE(r.ok) << r.message;
    EXPECT_GT(r.checked, 0) << op->name << " (" << c.name << ") compared nothing";
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, OpGradcheck, ::testing::ValuesIn(registered_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The declarations between the markers of autograd/ops.h: name -> number of overloads.
std::map<std::string, int> declared_ops() {
  std::ifstream in(std::string(MVGPT_SOURCE_DIR) + "/autograd/ops.h");
  EXPECT_TRUE(in.good()) << "cannot read autograd/ops.h";
  std::map<std::string, int> names;
  std::regex decl(R"(^\s*(?:Tensor|std::vector<Tensor>)\s+([a-z_0-9]+)\()");
  bool inside = false, saw_end = false;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("// differentiable ops: begin") != std::string::npos) inside = true;
    else if (line.find("// differentiable ops: end") != std::string::npos) {
      inside = false;
      saw_end = true;
    } else if (inside) {
      std::smatch m;
      if (std::regex_search(line, m, decl)) ++names[m[1]];
    }
  }
  EXPECT_TRUE(saw_end) << "autograd/ops.h lost its '// differentiable ops: end' marker";
  // The unary family is declared from its table (backends/unary_ops.h), one function per row called
  // with x alone; the rows with a scalar are declared by hand above (pow, add, mul, rsub, rdiv).
  for (const UnaryOpInfo& info : kUnaryOps)
    if (info.call == UnaryCall::x) ++names[info.name];
  return names;
}

TEST(Registry, EveryDeclaredOpHasGradientChecksAndNoOthers) {
  std::map<std::string, int> declared = declared_ops();
  ASSERT_GT(declared.size(), 40u);  // the parse found the list
  std::set<std::string> registered;
  for (const auto& op : op_registry().ops()) {
    EXPECT_TRUE(registered.insert(op.name).second) << op.name << " is registered twice";
    EXPECT_TRUE(declared.count(op.name)) << op.name << " has gradient checks but is not declared in autograd/ops.h";
  }
  for (const auto& [name, overloads] : declared) {
    const autograd::RegisteredOp* op = op_registry().find(name);
    if (!op) {
      ADD_FAILURE() << name << " is declared in autograd/ops.h but has no gradient check";
      continue;
    }
    EXPECT_GE(int(op->cases.size()), overloads)
        << name << " has " << overloads << " overloads but only " << op->cases.size() << " gradient check cases";
  }
}

}  // namespace
}  // namespace mvgpt
