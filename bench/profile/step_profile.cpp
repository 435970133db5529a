// Where one training step of the series' model spends its time, kernel by kernel (NOTE [ The op
// profile ] in tensor/util/profile.h): the forward, the backward and the optimizer, each kernel's
// calls, own time and share of the step, the products' GFLOP/s (under bf16 products with the kernel
// that ran each: oneDNN's implementation, the GEMV or the float32 fallback), and a summary of
// products, fused units, other kernels, conversions, copies and the framework's overhead (what no
// kernel did). With --decode, one token of sliding-cache decoding instead (BM_DecodeCache's case: a
// full 256-token window cached, the oldest dropped for each new token). A profile, not a benchmark:
// the spans add a few microseconds per kernel, so its figures sit a little under mvgpt_bench's.
//
//   build/bench/mvgpt_step_profile [--precision fp32|bf16] [--batch 16] [--optimizer adamw|muon]
//                                  [--learned] [--steps 5] [--warmup 2] [--top 40] [--decode]
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include <mvgpt/autograd/ops.h>
#include <mvgpt/autograd/precision.h>
#include <mvgpt/gpt/kv_cache.h>
#include <mvgpt/gpt/model.h>
#include <mvgpt/nn/muon.h>
#include <mvgpt/nn/optim.h>
#include <mvgpt/util/profile.h>

#include "../token_ids.h"

namespace {

using namespace mvgpt;

struct Options {
  std::string precision = "fp32";
  int64_t batch = 16;
  std::string optimizer = "adamw";
  bool learned = false;
  int steps = 5;
  int warmup = 2;
  int top = 40;
  bool decode = false;
};

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

using bench::token_ids;

// The kind a kernel counts as in the summary.
std::string kind_of(const std::string& op) {
  if (op == "matmul" || op == "linear") return "products";
  for (const char* fused : {"attention", "layer_norm", "rms_norm", "cross_entropy", "rope", "adamw", "bias_gelu",
                            "gelu_rounded", "gelu_backward_rounded"})
    if (op.starts_with(fused)) return "fused units";
  if (op == "convert") return "conversions";
  if (op.starts_with("copy") || op == "concat" || op == "fill") return "copies";
  return "other kernels";
}

// `steps` units of `tokens_per_step` tokens each ("step": a training step, "token": one decoded).
void print_report(const profile::Report& report, int steps, double tokens_per_step, int top, const char* unit) {
  double step_seconds = 0;
  for (const auto& p : report.phases) step_seconds += p.seconds;
  const double per_step = 1e3 / steps, step_ms = step_seconds * per_step;
  const std::string per = std::string("ms/") + unit;
  std::printf("\n%-10s %10s %7s\n", "phase", per.c_str(), "share");
  for (const auto& p : report.phases)
    std::printf("%-10s %10.2f %6.1f%%\n", p.name.c_str(), p.seconds * per_step, 100 * p.seconds / step_seconds);
  std::printf("%-10s %10.2f %6s   %.0f tokens/s\n", unit, step_ms, "", tokens_per_step * 1e3 / step_ms);

  std::printf("\n%-10s %-24s %-52s %8s %9s %6s %8s\n", "phase", "kernel", "detail", "calls", per.c_str(), "share",
              "GFLOP/s");
  std::vector<profile::Row> rows = report.rows;
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  int n = 0;
  for (const auto& r : rows) {
    if (n++ == top) break;
    char gflops[32] = "";
    if (r.flops > 0 && r.seconds > 0) std::snprintf(gflops, sizeof gflops, "%8.1f", r.flops / r.seconds * 1e-9);
    std::printf("%-10s %-24s %-52s %8.1f %9.2f %5.1f%% %8s\n", r.phase.c_str(), r.op.c_str(), r.detail.c_str(),
                double(r.calls) / steps, r.seconds * per_step, 100 * r.seconds / step_seconds, gflops);
  }
  if (rows.size() > size_t(top)) {
    double rest = 0;
    for (size_t i = size_t(top); i < rows.size(); ++i) rest += rows[i].seconds;
    std::printf("(%zu more rows: %.2f %s; --top N shows more)\n", rows.size() - size_t(top), rest * per_step, per.c_str());
  }

  // By kind: phase x {products, fused units, other kernels, conversions, copies, overhead}.
  const std::vector<std::string> kinds = {"products", "fused units", "other kernels", "conversions", "copies"};
  std::map<std::string, std::map<std::string, double>> by;  // phase -> kind -> seconds
  double product_flops = 0, product_seconds = 0;
  for (const auto& r : report.rows) {
    const std::string kind = kind_of(r.op);
    by[r.phase][kind] += r.seconds;
    if (kind == "products") product_flops += r.flops, product_seconds += r.seconds;
  }
  std::printf("\n%-10s", per.c_str());
  for (const auto& k : kinds) std::printf(" %14s", k.c_str());
  std::printf(" %14s\n", "overhead");
  std::map<std::string, double> total;
  // The overhead: what no kernel did, the profiler's own bookkeeping left out.
  auto row = [&](const std::string& name, const std::map<std::string, double>& seconds, double phase_seconds,
                 double profiler_seconds) {
    std::printf("%-10s", name.c_str());
    double spans = 0;
    for (const auto& k : kinds) {
      const double s = seconds.contains(k) ? seconds.at(k) : 0.0;
      spans += s;
      std::printf(" %14.2f", s * per_step);
    }
    std::printf(" %14.2f\n", (phase_seconds - spans - profiler_seconds) * per_step);
  };
  double profiler_seconds = 0;
  for (const auto& p : report.phases) {
    row(p.name, by[p.name], p.seconds, p.profiler_seconds);
    for (const auto& [k, s] : by[p.name]) total[k] += s;
    profiler_seconds += p.profiler_seconds;
  }
  row(unit, total, step_seconds, profiler_seconds);
  std::printf("%-10s", "share");
  double spans = 0;
  for (const auto& k : kinds) {
    spans += total[k];
    std::printf(" %13.1f%%", 100 * total[k] / step_seconds);
  }
  std::printf(" %13.1f%%\n", 100 * (step_seconds - spans - profiler_seconds) / step_seconds);
  std::printf("(the profiler's own bookkeeping, in no column: %.2f %s, %.1f%%)\n", profiler_seconds * per_step,
              per.c_str(), 100 * profiler_seconds / step_seconds);
  if (product_seconds > 0)
    std::printf("\nproducts: %.3g GFLOP/%s at %.1f GFLOP/s while they run; %.1f GFLOP/s over the whole %s\n",
                product_flops / steps * 1e-9, unit, product_flops / product_seconds * 1e-9,
                product_flops / step_seconds * 1e-9, unit);
}

// One token at a time with a full window cached, as BM_DecodeCache (bf16: the weights cast once).
int run_decode(const Options& o, const gpt::GPT& model) {
  const int64_t T = model.config().block_size, V = model.config().vocab_size;
  NoGradGuard no_grad;
  gpt::KVCache cache(model.config(), 1, 0, gpt::cache_dtype(DType::f32, Device::cpu()));  // bf16: a bf16 cache
  model.forward(token_ids(1, T, V, 1), &cache, true);
  const Tensor one = token_ids(1, 1, V, 2);
  auto token = [&] {
    const profile::Phase phase("decode");
    cache.slide(T - 1);
    (void)model.forward(one, &cache, true);
  };
  std::printf("decode profile: the series' %s model, one token with %lld cached (sliding), %s products; %s, %u threads\n",
              o.learned ? "learned-positions" : "RoPE", (long long)(T - 1), o.precision.c_str(), cpu_model().c_str(),
              std::thread::hardware_concurrency());
  std::printf("(%d warm-up tokens, then %d profiled; per token below)\n", o.warmup, o.steps);
  for (int i = 0; i < o.warmup; ++i) token();
  profile::Recording recording;
  for (int i = 0; i < o.steps; ++i) token();
  print_report(recording.stop(), o.steps, 1.0, o.top, "token");
  return 0;
}

int run(const Options& o) {
  const Precision precision = o.precision == "bf16" ? Precision::bf16 : Precision::fp32;
  const PrecisionGuard guard(precision);
  Generator g(1337);
  gpt::GPT model(gpt::GPTConfig::preset(o.learned ? "series" : "series-rope"), &g);
  if (o.decode) return run_decode(o, model);
  const int64_t T = model.config().block_size, V = model.config().vocab_size;
  const nn::AdamWOptions adamw{.lr = 6e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  std::unique_ptr<nn::Optimizer> opt;
  if (o.optimizer == "muon") {
    nn::MuonSplit split = nn::muon_split(model, 0.0, 0.1);
    opt = std::make_unique<nn::Muon>(split.matrices, split.others,
                                     nn::MuonOptions{.ns_steps = 3,
                                                     .coefficients = nn::MuonOptions::Coefficients::polar_express,
                                                     .adamw = adamw});
  } else {
    opt = std::make_unique<nn::AdamW>(nn::weight_decay_groups(model.named_parameters(), 0.1), adamw);
  }
  std::vector<Tensor> params;
  for (auto& [name, p] : model.named_parameters()) params.push_back(p);
  const Tensor x = token_ids(o.batch, T, V, 1), y = token_ids(o.batch, T, V, 2);

  auto step = [&] {
    Tensor loss;
    {
      const profile::Phase phase("forward");
      loss = model.loss(x, y);
    }
    {
      const profile::Phase phase("backward");  // freeing the graph included
      backward(loss);
      loss = Tensor();
    }
    const profile::Phase phase("optimizer");
    nn::clip_grad_norm_(params, 1.0);
    opt->step();
    opt->zero_grad();  // frees the gradients here, not in the next forward
  };
  std::printf("step profile: the series' %s model (%lld x %lld tokens a step), %s products, %s%s; %s, %u threads\n",
              o.learned ? "learned-positions" : "RoPE", (long long)o.batch, (long long)T, o.precision.c_str(),
              o.optimizer == "muon" ? "Muon (3 Polar Express steps) on the matrices, AdamW on the rest" : "AdamW",
              ", gradients clipped to norm 1", cpu_model().c_str(), std::thread::hardware_concurrency());
  std::printf("(%d warm-up steps, then %d profiled; per step below)\n", o.warmup, o.steps);
  for (int i = 0; i < o.warmup; ++i) step();
  profile::Recording recording;
  for (int i = 0; i < o.steps; ++i) step();
  print_report(recording.stop(), o.steps, double(o.batch * T), o.top, "step");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"One training step of the series' model, kernel by kernel (NOTE [ The op profile ])"};
  app.add_option("--precision", o.precision, "the products' precision")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_option("--batch", o.batch, "sequences of 256 tokens a step")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--optimizer", o.optimizer, "adamw, or muon as --recipe speedrun runs it")
      ->check(CLI::IsMember({"adamw", "muon"}))
      ->capture_default_str();
  CLI::Option* learned = app.add_flag("--learned", o.learned, "learned positions instead of RoPE");
  app.add_option("--steps", o.steps, "profiled steps")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--warmup", o.warmup, "steps before the profile")->check(CLI::Range(0, 1000))->capture_default_str();
  app.add_flag("--decode", o.decode,
               "profile sliding-cache decoding, a token per step (RoPE only: a learned table cannot slide; --batch and "
               "--optimizer unused)")
      ->excludes(learned);
  app.add_option("--top", o.top, "kernel rows shown, longest first")->check(CLI::Range(1, 100000))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mvgpt_step_profile: %s\n", e.what());
    return 1;
  }
}
