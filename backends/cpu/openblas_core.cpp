#include <mvgpt/backends/cpu/openblas_core.h>

#include <cblas.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define MVGPT_X86 1
#endif

// Exported by DYNAMIC_ARCH builds of OpenBLAS only; weak so that any other OpenBLAS still links
// (the addresses are then null and we fall back to telling the user what to export).
extern "C" {
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
int blas_thread_shutdown_(void) __attribute__((weak));
}

// NOTE [ Switching OpenBLAS's kernel set in-process ]
// gotoblas_dynamic_quit() sets OpenBLAS's kernel-table pointer (`gotoblas`) to null and
// gotoblas_dynamic_init() picks a table again, honouring OPENBLAS_CORETYPE, and runs that table's
// init(), which sets its GEMM P/Q/R blocking. We checked OpenBLAS's sources (driver/others/dynamic.c,
// memory.c, driver/others/parameter.c / setparam-ref.c) that this is safe in 0.3.21:
//  - the GEMM work buffers come from blas_memory_alloc() and are BUFFER_SIZE bytes, a compile-time
//    constant of memory.c, which a DYNAMIC_ARCH build compiles once for all cores;
//  - each table's init() derives GEMM_R from that same BUFFER_SIZE and its own P/Q, so any core's
//    blocking fits the buffers already allocated; no buffer is sized from the boot-time core;
//  - the pthread server's workers read `gotoblas` at each call, they cache nothing of the old core.
// The one hazard is OpenBLAS code running on another thread during the swap (it would see a null
// table), so we switch once, under std::call_once, from CpuBackend's constructor, before our first
// GEMM, and first stop OpenBLAS's own worker threads (blas_thread_shutdown_ joins them; we hold
// OpenBLAS to one thread, so they are never needed again, and a threaded call would restart them).
// Before that, a worker still starting up while we swapped crashed the process now and then under
// load: three SIGSEGVs in one suite run on a loaded 2-core Xeon, all at gotoblas_dynamic_init+0x248,
// the call of gotoblas->init with the table pointer null. Hence no re-exec of the process either: it
// would lose state and surprise debuggers and tests.

namespace mvgpt::cpu {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// Kernel sets that already use AVX2+FMA (or better). Excavator is picked only for real AMD family-15h
// Excavator CPUs, so it is a correct detection, not a fallback.
constexpr std::array<std::string_view, 5> kModernCores = {"Haswell", "Zen", "SkylakeX", "Cooperlake",
                                                          "Excavator"};

bool env_is(const char* name, std::string_view value) {
  const char* v = std::getenv(name);
  return v != nullptr && value == v;
}

std::string current_corename() {
  const char* name = openblas_get_corename();
  return name != nullptr ? std::string(name) : std::string("Unknown");
}

std::string features_string(const CpuFeatures& f) {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx, "avx");
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512dq, "avx512dq");
  add(f.avx512vl, "avx512vl");
  add(f.avx512_bf16, "avx512_bf16");
  if (f.avx && !f.os_avx) s += " (OS disables AVX)";
  if (f.avx512f && !f.os_avx512) s += " (OS disables AVX-512)";
  return s.empty() ? std::string("none of avx/avx2/avx512") : s;
}

OpenBlasCoreInfo& state() {
  static OpenBlasCoreInfo s;
  return s;
}

std::once_flag& once() {
  static std::once_flag flag;
  return flag;
}

std::mutex& handler_mutex() {
  static std::mutex m;
  return m;
}

OpenBlasNoticeHandler& handler() {
  static OpenBlasNoticeHandler h = [](const OpenBlasNotice& n) {
    std::fprintf(stderr, "mvgpt: %s%s\n", n.warning ? "warning: " : "", n.message.c_str());
  };
  return h;
}

std::atomic<bool>& checked() {
  static std::atomic<bool> done{false};
  return done;
}

// Keeps the notice and hands it to the handler (the check runs once, so each notice goes out once).
void notify(OpenBlasCoreInfo& s, bool warning, std::string message) {
  s.notice = {warning, std::move(message)};
  OpenBlasNoticeHandler h;
  {
    std::lock_guard<std::mutex> lock(handler_mutex());
    h = handler();
  }
  if (h) h(s.notice);
}

void check_and_fix() {
  OpenBlasCoreInfo& s = state();
  s.features = detect_cpu_features();
  s.boot_core = s.core = current_corename();
  s.wanted = openblas_core_correction(s.boot_core, s.features);

  const char* user_core = std::getenv("OPENBLAS_CORETYPE");
  if (user_core != nullptr && !env_is("MVGPT_OPENBLAS_FORCE_CHECK", "1")) {
    s.action = std::string("left alone: OPENBLAS_CORETYPE=") + user_core + " set by the user";
    return;
  }
  if (s.wanted.empty()) {
    s.action = "ok";
    return;
  }
  const std::string wanted_name = openblas_core_display_name(s.wanted);
  if (env_is("MVGPT_OPENBLAS_AUTOFIX", "0")) {
    notify(s, true,
           "OpenBLAS detected this CPU as " + s.boot_core + " (slow kernels); export OPENBLAS_CORETYPE=" + s.wanted +
               " for fast GEMM (MVGPT_OPENBLAS_AUTOFIX=0 turned the automatic fix off)");
    s.action = "not fixed (MVGPT_OPENBLAS_AUTOFIX=0)";
    return;
  }
  if (gotoblas_dynamic_init == nullptr || gotoblas_dynamic_quit == nullptr) {
    notify(s, true,
           "OpenBLAS detected this CPU as " + s.boot_core +
               " (slow kernels) and this OpenBLAS cannot switch cores at run time; export OPENBLAS_CORETYPE=" +
               s.wanted + " before starting the program");
    s.action = "not fixed (OpenBLAS is not a DYNAMIC_ARCH build)";
    return;
  }

  // See NOTE [ Switching OpenBLAS's kernel set in-process ].
  setenv("OPENBLAS_CORETYPE", s.wanted.c_str(), /*overwrite=*/1);
  if (blas_thread_shutdown_ != nullptr) blas_thread_shutdown_();  // no OpenBLAS thread but ours during the swap
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  s.core = current_corename();
  if (iequals(s.core, wanted_name)) {
    s.action = "switched from " + s.boot_core + " to " + s.core;
    s.fixed = true;
    notify(s, false,
           "OpenBLAS detected this CPU as " + s.boot_core + "; switched it to " + s.core +
               " (set OPENBLAS_CORETYPE to choose yourself)");
  } else {
    s.action = "switch to " + wanted_name + " failed";
    notify(s, true,
           "OpenBLAS detected this CPU as " + s.boot_core + " and switching it to " + wanted_name + " failed (it reports " +
               s.core + "); export OPENBLAS_CORETYPE=" + s.wanted + " before starting the program");
  }
}

}  // namespace

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
#ifdef MVGPT_X86
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  f.fma = (ecx >> 12) & 1;
  const bool osxsave = (ecx >> 27) & 1;
  f.avx = (ecx >> 28) & 1;
  if (osxsave) {
    // XCR0: bit 1 SSE, bit 2 AVX (YMM upper halves), bits 5-7 opmask / ZMM upper halves / ZMM16-31.
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    f.os_avx = (lo & 0x6) == 0x6;
    f.os_avx512 = (lo & 0xe6) == 0xe6;
  }
  if (__get_cpuid_max(0, nullptr) >= 7) {
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    const unsigned max_subleaf = eax;
    f.avx2 = (ebx >> 5) & 1;
    f.avx512f = (ebx >> 16) & 1;
    f.avx512dq = (ebx >> 17) & 1;
    f.avx512bw = (ebx >> 30) & 1;
    f.avx512vl = (ebx >> 31) & 1;
    if (max_subleaf >= 1) {
      __cpuid_count(7, 1, eax, ebx, ecx, edx);
      f.avx512_bf16 = (eax >> 5) & 1;
    }
  }
#endif
  return f;
}

std::string openblas_core_correction(std::string_view corename, const CpuFeatures& features) {
  for (std::string_view modern : kModernCores) {
    if (iequals(corename, modern)) return "";
  }
  // Any other core (Prescott, Core2, Nehalem, Sandybridge, Atom, "Unknown", ...) lacks AVX2 kernels.
  if (features.usable_avx512()) return features.avx512_bf16 ? "COOPERLAKE" : "SKYLAKEX";
  if (features.usable_avx2()) return "HASWELL";
  return "";
}

std::string openblas_core_display_name(std::string_view coretype) {
  if (iequals(coretype, "SKYLAKEX")) return "SkylakeX";
  if (iequals(coretype, "COOPERLAKE")) return "Cooperlake";
  if (iequals(coretype, "HASWELL")) return "Haswell";
  return std::string(coretype);
}

void set_openblas_notice_handler(OpenBlasNoticeHandler h) {
  std::lock_guard<std::mutex> lock(handler_mutex());
  handler() = std::move(h);
}

void ensure_openblas_core() {
  std::call_once(once(), [] {
    check_and_fix();
    checked() = true;
  });
}

bool openblas_core_checked() { return checked(); }

OpenBlasCoreInfo openblas_core_info() {
  ensure_openblas_core();
  OpenBlasCoreInfo info = state();
  info.core = current_corename();
  return info;
}

std::string openblas_core_report() {
  const OpenBlasCoreInfo s = openblas_core_info();
  std::string report = "OpenBLAS core: " + s.core + " (at load: " + s.boot_core +
                       "); CPU: " + features_string(s.features) + "; " + s.action;
  if (s.notice.warning) report += "; warning: " + s.notice.message;
  return report;
}

}  // namespace mvgpt::cpu
