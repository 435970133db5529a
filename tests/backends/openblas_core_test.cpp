// The OpenBLAS core check: the pure decision on made-up CPUs, and end to end in a child process that
// starts with a forced bad core (OPENBLAS_CORETYPE=PRESCOTT) and must end on the right one.
#include <mvgpt/backends/cpu/openblas_core.h>

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" char** environ;

// cblas.h's include dir is private to the backends target; these two are all we need. CBLAS enums are
// int-sized in the C ABI and Debian's OpenBLAS uses 32-bit blasint.
extern "C" char* openblas_get_corename(void);
extern "C" void cblas_sgemm(int order, int transa, int transb, int m, int n, int k, float alpha, const float* a,
                            int lda, const float* b, int ldb, float beta, float* c, int ldc);

namespace mvgpt::cpu {
namespace {

constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

CpuFeatures no_features() { return CpuFeatures{}; }

CpuFeatures avx2_features() {
  CpuFeatures f;
  f.avx = f.avx2 = f.fma = f.os_avx = true;
  return f;
}

CpuFeatures avx512_features(bool bf16) {
  CpuFeatures f = avx2_features();
  f.avx512f = f.avx512bw = f.avx512dq = f.avx512vl = f.os_avx512 = true;
  f.avx512_bf16 = bf16;
  return f;
}

TEST(OpenBlasCoreDecision, XeonWithAvx512DetectedAsPrescottGoesToSkylakeX) {
  EXPECT_EQ(openblas_core_correction("Prescott", avx512_features(false)), "SKYLAKEX");
  EXPECT_EQ(openblas_core_correction("Prescott", avx512_features(true)), "COOPERLAKE");
  EXPECT_EQ(openblas_core_correction("Nehalem", avx512_features(false)), "SKYLAKEX");
  EXPECT_EQ(openblas_core_correction("Unknown", avx512_features(false)), "SKYLAKEX");
}

TEST(OpenBlasCoreDecision, PreAvx2CoresOnAvx2CpuGoToHaswell) {
  for (const char* core : {"Katmai", "Coppermine", "Northwood", "Prescott", "Banias", "Atom", "Core2", "Penryn",
                           "Dunnington", "Nehalem", "Sandybridge", "Barcelona", "Unknown", "PRESCOTT"}) {
    EXPECT_EQ(openblas_core_correction(core, avx2_features()), "HASWELL") << core;
  }
}

TEST(OpenBlasCoreDecision, CorrectDetectionsAreLeftAlone) {
  for (const char* core : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "Excavator", "zen"}) {
    EXPECT_EQ(openblas_core_correction(core, avx512_features(true)), "") << core;
    EXPECT_EQ(openblas_core_correction(core, avx2_features()), "") << core;
  }
}

TEST(OpenBlasCoreDecision, OldCpusAreNotMisDetected) {
  EXPECT_EQ(openblas_core_correction("Prescott", no_features()), "");
  CpuFeatures avx_only;
  avx_only.avx = avx_only.os_avx = true;
  EXPECT_EQ(openblas_core_correction("Sandybridge", avx_only), "");
  CpuFeatures avx2_no_fma = avx2_features();
  avx2_no_fma.fma = false;
  EXPECT_EQ(openblas_core_correction("Sandybridge", avx2_no_fma), "");
}

TEST(OpenBlasCoreDecision, FeaturesTheOsDisablesDoNotCount) {
  CpuFeatures f = avx512_features(false);
  f.os_avx512 = false;  // e.g. a kernel booted without AVX-512 state saving
  EXPECT_EQ(openblas_core_correction("Prescott", f), "HASWELL");
  f.os_avx = false;
  EXPECT_EQ(openblas_core_correction("Prescott", f), "");
  CpuFeatures partial = avx512_features(false);
  partial.avx512vl = false;  // SKYLAKEX kernels need F+BW+DQ+VL
  EXPECT_EQ(openblas_core_correction("Prescott", partial), "HASWELL");
}

TEST(OpenBlasCoreDecision, DisplayNamesMatchOpenBlasSpelling) {
  EXPECT_EQ(openblas_core_display_name("SKYLAKEX"), "SkylakeX");
  EXPECT_EQ(openblas_core_display_name("COOPERLAKE"), "Cooperlake");
  EXPECT_EQ(openblas_core_display_name("HASWELL"), "Haswell");
}

TEST(OpenBlasCoreReport, NamesCoreAndAction) {
  const std::string report = openblas_core_report();
  EXPECT_NE(report.find("OpenBLAS core: "), std::string::npos) << report;
  EXPECT_NE(report.find(openblas_get_corename()), std::string::npos) << report;
}

// ---- end to end, in a child process (the core is per process and switched at most once) ----

// Max |C - A B^T| over a row-major sgemm big enough to run the blocked, packed kernels.
double sgemm_max_error() {
  const int m = 133, n = 301, k = 257;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> a(size_t(m) * k), b(size_t(n) * k), c(size_t(m) * n, 0.f);  // A (m, k), B (n, k)
  for (float& x : a) x = dist(rng);
  for (float& x : b) x = dist(rng);
  cblas_sgemm(kRowMajor, kNoTrans, kTrans, m, n, k, 1.f, a.data(), k, b.data(), k, 0.f, c.data(), n);
  double worst = 0;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double ref = 0;
      for (int p = 0; p < k; ++p) ref += double(a[size_t(i) * k + p]) * double(b[size_t(j) * k + p]);
      worst = std::max(worst, std::abs(ref - double(c[size_t(i) * n + j])));
    }
  }
  return worst;
}

// Runs only as the child of the tests below: reports the core before and after the check.
TEST(OpenBlasCoreChild, Helper) {
  if (std::getenv("MVGPT_OPENBLAS_CORE_CHILD") == nullptr) GTEST_SKIP() << "runs only as a child process";
  if (std::getenv("MVGPT_OPENBLAS_CORE_CHILD_HANDLER") != nullptr) {
    set_openblas_notice_handler([](const OpenBlasNotice& n) {
      std::printf("MVGPT_HANDLER warning=%d %s\n", int(n.warning), n.message.c_str());
    });
  }
  // The core at load time comes from the check itself: something may have built a CpuBackend already.
  const OpenBlasCoreInfo info = openblas_core_info();
  const std::string core = openblas_get_corename();
  EXPECT_EQ(info.core, core);
  EXPECT_EQ(info.fixed, info.boot_core != core);
  std::printf("MVGPT_CHILD boot=%s core=%s err=%.3g\n", info.boot_core.c_str(), core.c_str(), sgemm_max_error());
  std::fflush(stdout);
}

struct ChildResult {
  std::string output;  // stdout and stderr together
  std::string boot, core;
  double err = -1;
};

ChildResult run_child(const std::vector<std::string>& extra_env) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (kv.rfind("OPENBLAS_CORETYPE=", 0) == 0 || kv.rfind("MVGPT_OPENBLAS_", 0) == 0) continue;
    env.push_back(kv);
  }
  env.push_back("MVGPT_OPENBLAS_CORE_CHILD=1");
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp;
  for (std::string& kv : env) envp.push_back(kv.data());
  envp.push_back(nullptr);

  std::string exe = "/proc/self/exe", filter = "--gtest_filter=OpenBlasCoreChild.Helper";
  char* argv[] = {exe.data(), filter.data(), nullptr};

  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  ChildResult r;
  if (rc != 0) {
    close(fds[0]);
    throw std::runtime_error(std::string("posix_spawn failed: ") + std::strerror(rc));
  }
  char buf[4096];
  for (ssize_t got; (got = read(fds[0], buf, sizeof buf)) > 0;) r.output.append(buf, size_t(got));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << r.output;

  const size_t at = r.output.find("MVGPT_CHILD ");
  if (at != std::string::npos) {
    char boot[64] = {0}, core[64] = {0};
    if (std::sscanf(r.output.c_str() + at, "MVGPT_CHILD boot=%63s core=%63s err=%lf", boot, core, &r.err) == 3) {
      r.boot = boot;
      r.core = core;
    }
  }
  return r;
}

// The core the fix should pick on this machine, or "" (with a reason) when the test cannot apply.
std::string expected_fixed_core(std::string* why) {
  const std::string wanted = openblas_core_correction("Prescott", detect_cpu_features());
  if (wanted.empty()) *why = "this CPU has no usable AVX2+FMA: Prescott is not a mis-detection here";
  return openblas_core_display_name(wanted);
}

TEST(OpenBlasCoreEndToEnd, ForcedPrescottIsSwitchedAndGemmIsRight) {
  std::string why;
  const std::string expected = expected_fixed_core(&why);
  if (!why.empty()) GTEST_SKIP() << why;
  const ChildResult r = run_child({"OPENBLAS_CORETYPE=PRESCOTT", "MVGPT_OPENBLAS_FORCE_CHECK=1"});
  ASSERT_FALSE(r.core.empty()) << r.output;
  if (r.boot != "Prescott") GTEST_SKIP() << "OpenBLAS ignored OPENBLAS_CORETYPE (not DYNAMIC_ARCH): " << r.boot;
  EXPECT_EQ(r.core, expected) << r.output;
  EXPECT_NE(r.output.find("switched it to " + expected), std::string::npos) << r.output;
  EXPECT_GE(r.err, 0.0);
  EXPECT_LT(r.err, 1e-3) << r.output;
}

TEST(OpenBlasCoreEndToEnd, AutofixOffOnlyWarns) {
  std::string why;
  const std::string expected = expected_fixed_core(&why);
  if (!why.empty()) GTEST_SKIP() << why;
  const ChildResult r = run_child(
      {"OPENBLAS_CORETYPE=PRESCOTT", "MVGPT_OPENBLAS_FORCE_CHECK=1", "MVGPT_OPENBLAS_AUTOFIX=0"});
  ASSERT_FALSE(r.core.empty()) << r.output;
  if (r.boot != "Prescott") GTEST_SKIP() << "OpenBLAS ignored OPENBLAS_CORETYPE (not DYNAMIC_ARCH): " << r.boot;
  EXPECT_EQ(r.core, "Prescott") << r.output;
  EXPECT_NE(r.output.find("export OPENBLAS_CORETYPE="), std::string::npos) << r.output;
  EXPECT_LT(r.err, 1e-3) << r.output;
}

// A program's handler gets the notice, and nothing reaches stderr.
TEST(OpenBlasCoreEndToEnd, AHandlerGetsTheNoticeInsteadOfStderr) {
  std::string why;
  const std::string expected = expected_fixed_core(&why);
  if (!why.empty()) GTEST_SKIP() << why;
  const ChildResult r =
      run_child({"OPENBLAS_CORETYPE=PRESCOTT", "MVGPT_OPENBLAS_FORCE_CHECK=1", "MVGPT_OPENBLAS_CORE_CHILD_HANDLER=1"});
  ASSERT_FALSE(r.core.empty()) << r.output;
  if (r.boot != "Prescott") GTEST_SKIP() << "OpenBLAS ignored OPENBLAS_CORETYPE (not DYNAMIC_ARCH): " << r.boot;
  EXPECT_NE(r.output.find("MVGPT_HANDLER warning=0 OpenBLAS detected this CPU as Prescott; switched it to " + expected),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("mvgpt:"), std::string::npos) << r.output;
}

TEST(OpenBlasCoreEndToEnd, UserChosenCoreIsRespected) {
  const ChildResult r = run_child({"OPENBLAS_CORETYPE=PRESCOTT"});
  ASSERT_FALSE(r.core.empty()) << r.output;
  EXPECT_EQ(r.core, r.boot) << r.output;
  EXPECT_EQ(r.output.find("mvgpt:"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace mvgpt::cpu
