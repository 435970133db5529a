// Where OpenBLAS mis-detects the CPU (0.3.21 on recent Xeons says "Prescott") the check switches the
// core; the apps fold that into pretrain's header and never print it before an error's one line.
// Simulated on any machine by forcing Prescott (OPENBLAS_CORETYPE + MVGPT_OPENBLAS_FORCE_CHECK).
#include "app_runner.h"

#include <algorithm>

#include <mvgpt/backends/cpu/openblas_core.h>
#include <mvgpt/text/token_file.h>

namespace mvgpt::apps::testing {
namespace {

class MisdetectedCpu : public AppsTest {};

const char* kForcePrescott = "OPENBLAS_CORETYPE=PRESCOTT MVGPT_OPENBLAS_FORCE_CHECK=1 ";

RunResult run_on_prescott(const std::string& app, const std::string& args, const fs::path& cwd) {
  return run_command(std::string(kForcePrescott).append("'").append(app_path(app)).append("' ").append(args), cwd);
}

TEST_F(MisdetectedCpu, TheSwitchGoesInPretrainsHeaderNotOnStderr) {
  const fs::path cwd = prepared();
  write_text(cwd / "prescott.json", tiny_config(false));
  RunResult r = run_on_prescott("pretrain", "--config prescott.json --steps 2 --batch-size 4 --eval-interval 2 "
                                "--eval-windows 2 --device cpu --out checkpoints/prescott", cwd);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.err.find("mvgpt:"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("OpenBLAS core: "), std::string::npos) << r.out;
  const std::string wanted = cpu::openblas_core_correction("Prescott", cpu::detect_cpu_features());
  // Where OpenBLAS honours OPENBLAS_CORETYPE (DYNAMIC_ARCH) and the CPU has AVX2: the switch is reported.
  if (!wanted.empty() && r.out.find("at load: Prescott") != std::string::npos) {
    EXPECT_NE(r.out.find("switched from Prescott to " + cpu::openblas_core_display_name(wanted)), std::string::npos)
        << r.out;
  }
}

// Errors raised after the first tensor op (when the check runs): before the fix the notice came first.
TEST_F(MisdetectedCpu, BadInputsStillFailWithOneLine) {
  trained(false);
  const fs::path cwd = prepared();
  write_text(cwd / "prescott-small-vocab.json", tiny_config(false, 100));
  expect_one_line_error(run_on_prescott("pretrain", "--config prescott-small-vocab.json --steps 2 --out "
                                        "checkpoints/prescott-small --device cpu", cwd),
                        "pretrain", "vocabulary of 100");
  text::write_token_file((cwd / "prescott-big-ids.bin").string(), std::vector<uint32_t>(200, 4000));
  expect_one_line_error(run_on_prescott("evaluate", "--ckpt checkpoints/tiny --tokens prescott-big-ids.bin --device cpu", cwd),
                        "evaluate", "token id 4000");
  expect_one_line_error(run_on_prescott("context", "--ckpt checkpoints/tiny --tokens prescott-big-ids.bin --length 40 "
                                        "--streams 2 --device cpu", cwd),
                        "context", "token id 4000");
}

// A warning (the kernels stay slow) is said once the run has succeeded, never before an error.
TEST_F(MisdetectedCpu, AWarningComesAfterSuccessOnly) {
  trained(false);
  const fs::path cwd = prepared();
  const std::string off = "MVGPT_OPENBLAS_AUTOFIX=0 ";
  text::write_token_file((cwd / "prescott-big-ids.bin").string(), std::vector<uint32_t>(200, 4000));
  expect_one_line_error(run_command(off + kForcePrescott + "'" + app_path("evaluate") +
                                        "' --ckpt checkpoints/tiny --tokens prescott-big-ids.bin --device cpu", cwd),
                        "evaluate", "token id 4000");
  RunResult ok = run_command(off + kForcePrescott + "'" + app_path("evaluate") + "' --ckpt checkpoints/tiny --device cpu", cwd);
  ASSERT_EQ(ok.code, 0) << ok.err;
  const std::string wanted = cpu::openblas_core_correction("Prescott", cpu::detect_cpu_features());
  if (wanted.empty()) GTEST_SKIP() << "this CPU has no usable AVX2+FMA: Prescott is not a mis-detection here";
  EXPECT_EQ(ok.err.rfind("evaluate: warning: OpenBLAS detected this CPU as Prescott", 0), 0u) << ok.err;
  EXPECT_EQ(std::count(ok.err.begin(), ok.err.end(), '\n'), 1) << ok.err;
}

}  // namespace
}  // namespace mvgpt::apps::testing
