#include <mvgpt/backends/deferred_checks.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <mvgpt/backends/ops_internal.h>

namespace mvgpt::ops {
namespace {

// One deferred check: the device count of bad entries, and how to word the error from the indices.
struct Record {
  const char* op;                                    // for the message
  Tensor bad;                                        // () int64 on the device
  Tensor indices;                                    // the indices as given, for the message
  std::function<void(const Tensor& host)> recheck;  // the immediate check, run on a host copy
};

struct Pending {
  std::mutex mutex;
  std::vector<Record> records;
  std::atomic<bool> any{false};  // records is not empty: lets ops::to skip the lock
};

Pending& pending() {
  static Pending p;
  return p;
}

std::atomic<int>& cpu_deferral() {
  static std::atomic<int> depth{0};
  return depth;
}

std::atomic<uint64_t>& sync_counter() {
  static std::atomic<uint64_t> n{0};
  return n;
}

}  // namespace

bool range_checks_deferred(Device device) { return !device.is_cpu() || cpu_deferral() > 0; }

DeferRangeChecksOnCpu::DeferRangeChecksOnCpu() { ++cpu_deferral(); }
DeferRangeChecksOnCpu::~DeferRangeChecksOnCpu() { --cpu_deferral(); }

uint64_t host_sync_count() { return sync_counter(); }
void count_host_sync() { ++sync_counter(); }

void check_deferred_errors() {
  Pending& p = pending();
  if (!p.any) return;
  std::vector<Record> records;
  {
    std::lock_guard lock(p.mutex);
    records.swap(p.records);
    p.any = false;
  }
  // One read per device: the sum of its counts (the records are gone, so this read does not recurse).
  std::vector<std::pair<Device, std::vector<Tensor>>> counts;
  for (const Record& r : records) {
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == r.bad.device(); });
    if (it == counts.end()) it = counts.insert(counts.end(), {r.bad.device(), {}});
    it->second.push_back(r.bad);
  }
  bool failed = false;
  for (const auto& [device, list] : counts)
    if (to(sum(stack(list, 0)), Device::cpu()).item<int64_t>() != 0) failed = true;
  if (!failed) return;
  // The failure path (reads are cheap now): the first record that counted a bad entry words the
  // error from its indices, as the immediate check would have.
  for (const Record& r : records) {
    const int64_t bad = to(r.bad, Device::cpu()).item<int64_t>();
    if (bad == 0) continue;
    r.recheck(to(r.indices, Device::cpu()));
    throw std::invalid_argument(std::string(r.op) + ": " + std::to_string(bad) +
                                " indices were out of range (the index tensor was changed in place before the "
                                "deferred check could name one)");
  }
}

namespace detail {

void defer_check(const char* op, const Tensor& bad, const Tensor& indices,
                 std::function<void(const Tensor&)> recheck) {
  // A program that never reads from the device would keep records forever: check every so often
  // (one read per this many index ops, far from one per call).
  constexpr size_t kMaxPending = 1024;
  Pending& p = pending();
  bool full = false;
  {
    std::lock_guard lock(p.mutex);
    p.records.push_back({op, bad, indices, std::move(recheck)});
    p.any = true;
    full = p.records.size() >= kMaxPending;
  }
  if (full) check_deferred_errors();
}

Tensor kernel_indices(const Tensor& index, int64_t size, const char* op, int axis) {
  if (!range_checks_deferred(index.device()) || index.numel() == 0 || size == 0) {
    check_indices(index, size, op, axis);  // on the host (and any index of an empty axis is out of range)
    return index;
  }
  check_indices(Tensor::empty({0}, index.dtype()), size, op, axis);  // the dtype check only
  const Device d = index.device();
  Tensor clamped = minimum(maximum(index, full({}, 0, index.dtype(), d)), full({}, double(size - 1), index.dtype(), d));
  defer_check(op, sum(to(ne(clamped, index), DType::i64)), index,
              [size, op, axis](const Tensor& host) { check_indices(host, size, op, axis); });
  return clamped;
}

}  // namespace detail
}  // namespace mvgpt::ops
