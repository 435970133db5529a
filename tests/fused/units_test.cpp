// Every fused unit (NOTE [ A fused op is one unit ] in autograd/fused/unit.h), from its registration
// alone: its gradient checks in float64, and its CPU-vs-device cases, which also cover every kernel
// it declares. A unit added to units.def is tested here without touching this file.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <mvgpt/backends/backend.h>
#include <mvgpt/fused/unit.h>
#include "cuda_required.h"
#include "backends/device_compare.h"

namespace mvgpt {
namespace {

using fused::units;

// ---- gradient checks

struct NamedOp {
  std::string unit, op;
};
void PrintTo(const NamedOp& o, std::ostream* os) { *os << o.unit << "." << o.op; }

std::vector<NamedOp> unit_ops() {
  std::vector<NamedOp> ops;
  for (const fused::Unit& u : units()) {
    if (!u.gradchecks) continue;  // nothing differentiable (AdamW)
    autograd::OpRegistry r;
    u.gradchecks(r);
    for (const auto& op : r.ops()) ops.push_back({u.name, op.name});
  }
  return ops;
}

class UnitGradcheck : public ::testing::TestWithParam<NamedOp> {};

TEST_P(UnitGradcheck, MatchesFiniteDifferences) {
  const NamedOp& p = GetParam();
  for (const fused::Unit& u : units()) {
    if (u.name != p.unit) continue;
    autograd::OpRegistry r;
    u.gradchecks(r);
    const autograd::RegisteredOp* op = r.find(p.op);
    ASSERT_NE(op, nullptr);
    ASSERT_FALSE(op->cases.empty());
    for (const auto& c : op->cases) {
      autograd::GradcheckResult res = autograd::run_case(op->name, c);
      EXPECT_TRUE(res.ok) << res.message;
      EXPECT_GT(res.checked, 0) << op->name << " (" << c.name << ") compared nothing";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Units, UnitGradcheck, ::testing::ValuesIn(unit_ops()),
                         [](const ::testing::TestParamInfo<NamedOp>& info) { return info.param.op; });

TEST(Units, EachDifferentiableOneHasGradientChecks) {
  ASSERT_FALSE(units().empty());
  std::set<std::string> names;
  for (const fused::Unit& u : units()) {
    EXPECT_TRUE(names.insert(u.name).second) << "unit '" << u.name << "' is listed twice in units.def";
    if (!u.gradchecks) continue;
    autograd::OpRegistry r;
    u.gradchecks(r);
    EXPECT_FALSE(r.ops().empty()) << "unit '" << u.name << "' registers no gradient check";
  }
}

// ---- CPU vs device

struct NamedCase {
  size_t unit, index;
  std::string name;
};
void PrintTo(const NamedCase& c, std::ostream* os) { *os << c.name; }

std::vector<NamedCase> device_cases() {
  std::vector<NamedCase> all;
  for (size_t u = 0; u < units().size(); ++u) {
    const std::vector<fused::DeviceCase> cases = units()[u].device_cases();
    for (size_t i = 0; i < cases.size(); ++i) all.push_back({u, i, cases[i].name});
  }
  return all;
}

class UnitOnDevice : public ::testing::TestWithParam<std::tuple<DeviceType, NamedCase>> {};

TEST_P(UnitOnDevice, MatchesCpuAndIsDeterministic) {
  const auto& [type, nc] = GetParam();
  const fused::DeviceCase c = units()[nc.unit].device_cases()[nc.index];
  const Device dev = type == DeviceType::cuda ? Device::cuda(0) : Device::cpu();
  if (dev.is_cuda()) {
    MVGPT_SKIP_WITHOUT_CUDA("case '" << c.name << "' runs against the CPU on a GPU machine (scripts/gpu-check.sh)");
  }
  const std::vector<Tensor> want = c.run(Device::cpu());
  const std::vector<Tensor> got = testing::on_host(c.run(dev));
  const std::vector<Tensor> again = testing::on_host(c.run(dev));
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(want.empty()) << c.name << " returns nothing to compare";
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_TRUE(got[k].device().is_cpu());
    testing::expect_matches(got[k], want[k], c.tol_f32, c.tol_f64,
                            c.name + " output " + std::to_string(k) + " (" + dev.str() + " vs cpu)");
    EXPECT_TRUE(testing::bitwise_equal(got[k], again[k]))
        << c.name << " output " << k << " differs between two runs on " << dev.str();
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, UnitOnDevice,
                         ::testing::Combine(::testing::Values(DeviceType::cpu, DeviceType::cuda),
                                            ::testing::ValuesIn(device_cases())),
                         [](const ::testing::TestParamInfo<UnitOnDevice::ParamType>& info) {
                           return std::string(std::get<0>(info.param) == DeviceType::cuda ? "cuda_" : "cpu_") +
                                  std::get<1>(info.param).name;
                         });

// NOTE [ Device coverage ] for units: every kernel a unit declares is exercised by one of its
// CPU-vs-device cases, and a case claims only kernels its unit declares.
TEST(Units, EveryKernelHasACpuVsDeviceCase) {
  for (const fused::Unit& u : units()) {
    ASSERT_FALSE(u.kernels.empty()) << "unit '" << u.name << "' declares no kernel";
    const std::set<std::string> declared(u.kernels.begin(), u.kernels.end());
    std::set<std::string> covered, case_names;
    for (const fused::DeviceCase& c : u.device_cases()) {
      EXPECT_TRUE(case_names.insert(c.name).second) << "unit '" << u.name << "' has two cases named " << c.name;
      EXPECT_FALSE(c.kernels.empty()) << "case '" << c.name << "' of unit '" << u.name << "' claims no kernel";
      for (const std::string& k : c.kernels) {
        EXPECT_TRUE(declared.count(k)) << "case '" << c.name << "' claims '" << k << "', which unit '" << u.name
                                       << "' does not declare";
        covered.insert(k);
      }
    }
    for (const std::string& k : declared)
      EXPECT_TRUE(covered.count(k)) << "kernel '" << k << "' of unit '" << u.name << "' has no CPU-vs-device case";
  }
}

}  // namespace
}  // namespace mvgpt
