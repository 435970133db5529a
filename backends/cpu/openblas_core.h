#pragma once
// OpenBLAS kernel-set check. A DYNAMIC_ARCH OpenBLAS picks its kernels from the CPU's family/model;
// 0.3.21 does not know recent Xeons and falls back to "Prescott" (SSE3), making sgemm ~6x slower.
// We read the CPU's own feature bits, decide which kernel set fits, and switch before the first GEMM.
#include <functional>
#include <string>
#include <string_view>

namespace mvgpt::cpu {

// What the CPU and the OS support (a feature counts only when the OS saves its register state).
struct CpuFeatures {
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512vl = false;
  bool avx512_bf16 = false;
  bool os_avx = false;     // XCR0 has SSE + AVX state (OSXSAVE set)
  bool os_avx512 = false;  // XCR0 also has opmask + ZMM state

  bool usable_avx2() const { return avx2 && fma && os_avx; }
  bool usable_avx512() const { return avx512f && avx512bw && avx512dq && avx512vl && os_avx && os_avx512; }
};

// Reads the running CPU's features with cpuid and xgetbv (all false on non-x86 builds).
CpuFeatures detect_cpu_features();

// Pure decision: the OPENBLAS_CORETYPE value ("SKYLAKEX", "COOPERLAKE", "HASWELL") OpenBLAS should use
// when `corename` (as openblas_get_corename() spells it) is a pre-AVX2 kernel set on a CPU that
// supports AVX2/AVX-512; "" when the detection is fine (e.g. "Zen", "Haswell", "SkylakeX").
std::string openblas_core_correction(std::string_view corename, const CpuFeatures& features);

// How openblas_get_corename() spells a core type ("SKYLAKEX" -> "SkylakeX"); the input when unknown.
std::string openblas_core_display_name(std::string_view coretype);

// Checks OpenBLAS's core once per process (std::call_once) and switches it when mis-detected.
// Environment: OPENBLAS_CORETYPE set by the user -> nothing is done; MVGPT_OPENBLAS_AUTOFIX=0 -> only
// a warning; MVGPT_OPENBLAS_FORCE_CHECK=1 (tests) -> check even when OPENBLAS_CORETYPE is set.
// Must run before any BLAS call is in flight on another thread: CpuBackend's constructor calls it.
void ensure_openblas_core();

// What the check has to tell: that it switched the core, or (warning) that the kernels stay slow.
struct OpenBlasNotice {
  bool warning = false;  // the core stays mis-detected: GEMM runs on slow kernels
  std::string message;   // one line without a prefix or newline
};
// Where notices go. The default prints "mvgpt: <message>" ("mvgpt: warning: ...") on stderr, once per
// process. A program that reports them itself installs its own handler before its first tensor op
// (the apps put them in their header and never before an error line); an empty function silences them.
// The last notice is also kept in OpenBlasCoreInfo::notice. The handler runs inside the check (under
// std::call_once, before the first GEMM): it must not use tensors.
using OpenBlasNoticeHandler = std::function<void(const OpenBlasNotice&)>;
void set_openblas_notice_handler(OpenBlasNoticeHandler handler);

// What the check found and did (runs the check first if it has not run yet).
struct OpenBlasCoreInfo {
  std::string boot_core;  // openblas_get_corename() before the check
  std::string core;       // openblas_get_corename() now
  std::string wanted;     // the OPENBLAS_CORETYPE the decision asked for, "" when the core was fine
  std::string action;     // "ok", "switched from Prescott to SkylakeX", "left alone: ...", ...
  bool fixed = false;     // the core was switched
  CpuFeatures features;
  OpenBlasNotice notice;  // what the check reported (message "" when there was nothing to say)
};
OpenBlasCoreInfo openblas_core_info();
// Whether the check has run in this process (openblas_core_info() would run it).
bool openblas_core_checked();

// One line for apps to print: OpenBLAS's core, the CPU features, and what was done about it.
std::string openblas_core_report();

}  // namespace mvgpt::cpu
