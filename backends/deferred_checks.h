#pragma once
// NOTE [ Deferred range checks ]
// Every index op and cross-entropy checks that its indices (targets) are in range. On the CPU the
// check scans them at once. On a GPU that scan would copy them to the host, one synchronisation per
// call (about 55 a training step for the series' model). There, instead, the ops layer counts the
// out-of-range entries with device ops, clamps them into range for the kernel (so nothing reads out
// of bounds), and keeps the count; check_deferred_errors() reads every count kept since the last
// check at once and, when one is not zero, re-runs the host check of the recorded indices to throw
// the same message the CPU would have. It runs before every device-to-host copy (ops::to), so no
// result computed past a bad index reaches the host; the training step's loss read is its one
// check. Results computed from clamped indices are never read: the check throws first.
#include <cstdint>

#include <mvgpt/tensor/device.h>

namespace mvgpt::ops {

// Whether range checks of indices on `device` are deferred: every device but the CPU (and the CPU
// too under DeferRangeChecksOnCpu, for tests).
bool range_checks_deferred(Device device);

// Reads the deferred counts (one device read per device that has any) and throws
// std::invalid_argument for the first out-of-range index recorded, worded as the immediate check;
// forgets them either way. Nothing to do (no read) when none was recorded.
void check_deferred_errors();

// Tests: defers the checks on the CPU as well while alive, to exercise the path without a GPU.
class DeferRangeChecksOnCpu {
 public:
  DeferRangeChecksOnCpu();
  ~DeferRangeChecksOnCpu();
  DeferRangeChecksOnCpu(const DeferRangeChecksOnCpu&) = delete;
  DeferRangeChecksOnCpu& operator=(const DeferRangeChecksOnCpu&) = delete;
};

// How many times the host has waited for a device (a transfer or synchronize()): the cost that
// device-agnostic code must keep off its per-call paths. The CUDA backend counts them; 0 on the CPU.
uint64_t host_sync_count();
void count_host_sync();

}  // namespace mvgpt::ops
