// context: how well and how fast checkpoints predict past their context window (the seed's
// measurement). Streams of --length held-out tokens, one after another from the start of the token
// file; for each model the methods of apps/common/context_methods.h (window for every model, cache
// and full for RoPE models), the loss averaged over the tokens past the first window and the
// milliseconds per token. Writes the per-position losses (CSV) and, when gnuplot is installed, a PNG.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/common/app.h"
#include "apps/flags/context.h"
#include "apps/common/checkpoints.h"
#include "apps/common/context_methods.h"
#include "apps/common/evaluation.h"
#include "apps/common/plot.h"
#include "apps/common/resources.h"
#include "apps/common/run_folder.h"
#include <mvgpt/util/atomic_file.h>

namespace fs = std::filesystem;
using namespace mvgpt;
using namespace mvgpt::apps;

namespace {

struct Row {
  std::string model;
  ContextMethod method;
  double loss = 0, ms_per_token = 0;
  std::vector<double> position_loss;  // mean over streams, for positions block_size .. length - 1
  int64_t block_size = 0;
};

// Two panels. Top: each model and method's loss past the window, smoothed (the noise of single
// positions would hide the curves), a colour per curve and a dash per method, the window thick and
// underneath, so curves that lie on top of each other (cache on window) stay visible. Bottom: what the text claims, as differences
// from the same model's window method (cache - window, full - window), around a zero line.
std::string plot_script(const std::string& csv, const std::string& png, const std::vector<Row>& rows, int64_t length) {
  auto dash = [](ContextMethod m) { return m == ContextMethod::window ? "lw 5 dt 1" : m == ContextMethod::cache ? "lw 2 dt (8,6)" : "lw 2.5 dt (2,4)"; };
  auto colour = [](size_t row) { return std::to_string(row + 1); };
  const std::string data = gnuplot_quote(csv);
  std::string s;
  s += "set datafile separator ','\n";
  s += "set terminal pngcairo size 1100,900 font ',11'\n";
  s += "set output " + gnuplot_quote(png) + "\n";
  s += "set termoption noenhanced\nset grid\nset key top right\n";
  s += "set xrange [*:" + std::to_string(length) + "]\n";
  s += "set multiplot layout 2,1\n";
  s += "set title 'Loss past the context window, mean over the streams, smoothed'\n";
  s += "set ylabel 'loss (nats)'\nunset xlabel\n";
  std::string plot;
  for (size_t i = 0; i < rows.size(); ++i)
    plot += std::string(plot.empty() ? "plot " : ", \\\n     ") + data + " using 1:" + std::to_string(i + 2) +
            " smooth bezier with lines " + dash(rows[i].method) + " lc " + colour(i) + " title columnhead(" +
            std::to_string(i + 2) + ")";
  s += plot + "\n";
  s += "set title 'Difference from the same model re-running its window (smoothed): below zero is better'\n";
  s += "set ylabel 'loss - window loss (nats)'\nset xlabel 'position in the stream'\n";
  plot.clear();
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].method == ContextMethod::window) continue;
    for (size_t w = 0; w < rows.size(); ++w)
      if (rows[w].model == rows[i].model && rows[w].method == ContextMethod::window)
        plot += std::string(plot.empty() ? "plot 0 with lines lc 'black' lw 1 notitle" : "") + ", \\\n     " + data +
                " using 1:(column(" + std::to_string(i + 2) + ") - column(" + std::to_string(w + 2) +
                ")) smooth bezier with lines " + dash(rows[i].method) + " lc " + colour(i) + " title " +
                gnuplot_quote(rows[i].model + " " + to_string(rows[i].method) + " - window");
  }
  s += (plot.empty() ? "plot 0 with lines lc 'black' notitle" : plot) + "\n";
  s += "unset multiplot\n";
  return s;
}

// Window, cache and full side by side: the loss each reaches and what a token costs.
std::string summary_script(const std::string& csv, const std::string& png) {
  const std::string data = gnuplot_quote(csv);
  std::string s;
  s += "set datafile separator ','\n";
  s += "set terminal pngcairo size 1100,450 font ',11'\n";
  s += "set output " + gnuplot_quote(png) + "\n";
  s += "set termoption noenhanced\nset grid ytics\nset style fill solid 0.7 border -1\nset boxwidth 0.6\n";
  s += "set xtics rotate by -30 nomirror\nunset key\n";
  s += "set multiplot layout 1,2 title 'Past the context window: each model and method'\n";
  s += "set title 'loss (nats)'\nset yrange [*:*]\n";
  s += "plot " + data + " using 0:3:xtic(sprintf('%s %s', strcol(1), strcol(2))) with boxes lc 1, '' using 0:3:(sprintf('%.4f', $3)) with labels offset 0,0.7\n";
  s += "set title 'milliseconds per token (log scale)'\nset logscale y\n";
  s += "plot " + data + " using 0:4:xtic(sprintf('%s %s', strcol(1), strcol(2))) with boxes lc 2, '' using 0:4:(sprintf('%.3g', $4)) with labels offset 0,0.7\n";
  s += "unset multiplot\n";
  return s;
}

// What context writes into --out-dir (and their atomic writes' temporary names).
bool is_context_output(const std::string& name) {
  for (const char* own : {"context_losses.csv", "context_losses.png", "context_methods.csv", "context_methods.png"})
    if (name == own || util::is_temporary_name(name, own)) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  ContextArgs args;
  const auto app = context_cli(args);
  return run_app(*app, argc, argv, [&] {
    const Device device = resolve_device(args.device_flag);
    const PrecisionChoice precision = choose_precision(args.precision, device);
    const PrecisionGuard guard(precision.precision);
    check_output_folder("--out-dir", args.out_dir);  // now, not after all the measuring
    // A folder of context's own (NOTE [ Nothing lost in a run folder ] applied to its outputs): new,
    // empty, or holding only what context writes there.
    if (const std::string above = managed_folder_above(args.out_dir); !above.empty())
      throw UsageError("--out-dir " + args.out_dir + " is inside " + above +
                       ", which another app writes and replaces as a whole; choose a folder outside it, such as runs/context");
    if (const auto others = others_in_folder(args.out_dir, is_context_output); !others.empty())
      throw AppError("--out-dir " + args.out_dir + " holds files context did not write (" + list_names(others) +
                     "); context writes only into a folder of its own: choose another --out-dir, such as runs/context-2");
    const text::TokenFile tokens = open_held_out_tokens(args.tokens_path);
    if (int64_t(tokens.size()) < args.tokens_needed)
      throw AppError(args.tokens_path + " holds " + format_count(int64_t(tokens.size())) + " tokens, fewer than " +
                     std::to_string(args.streams) + " streams of " + std::to_string(args.length) + " (" + format_count(args.tokens_needed) +
                     "); lower --streams or --length");
    std::vector<std::vector<int32_t>> stream_tokens(static_cast<size_t>(args.streams));
    for (int64_t s = 0; s < args.streams; ++s)
      stream_tokens[size_t(s)].assign(tokens.data() + s * args.length, tokens.data() + (s + 1) * args.length);

    // Load and check every checkpoint before measuring anything.
    struct Model {
      std::string name, dir;
      std::shared_ptr<gpt::GPT> gpt;
      std::vector<ContextMethod> methods;
    };
    std::vector<Model> models;
    for (const auto& c : args.ckpts) {
      Model m{checkpoint_name(c), resolve_checkpoint(c), nullptr, {}};
      m.gpt = load_model(m.dir, device, args.adapter).model;
      m.gpt->eval();
      apply_position_flags(*m.gpt, args.rope_scaling, args.block_size, m.name);
      // "full" runs the whole stream at once; the others a window at a time.
      check_inference_fits(m.gpt->config(), 1, std::max(m.gpt->config().block_size, args.length), device, m.name,
                           "--length or --block-size");
      const auto& config = m.gpt->config();
      check_same_tokenizer(args.tokens_path, m.dir, m.name);
      // Only the streams are read: check their ids, not the whole file's.
      for (const auto& st : stream_tokens)
        for (int32_t id : st)
          if (id >= config.vocab_size)
            throw AppError(args.tokens_path + " holds token id " + std::to_string(id) + " but " + m.name +
                           " has a vocabulary of " + std::to_string(config.vocab_size) +
                           "; encode the text with the model's own tokenizer (prepare --tokenizer <checkpoint>/tokenizer.json)");
      if (args.length <= config.block_size)
        throw UsageError("--length " + std::to_string(args.length) + " leaves no token past the window of " + m.name +
                         " (" + std::to_string(config.block_size) + " tokens); pass a --length above " +
                         std::to_string(config.block_size));
      if (args.method_names.empty()) {
        m.methods.push_back(ContextMethod::window);
        // Learned positions stop at block_size: the cache cannot slide and the model cannot see further.
        if (config.rope) m.methods.insert(m.methods.end(), {ContextMethod::cache, ContextMethod::full});
      } else {
        for (const auto& n : args.method_names) {
          ContextMethod method = parse_context_method(n);
          if (!supports(config, method))
            throw AppError("the '" + n + "' method needs rotary positions, but " + m.name + " has a learned table of " +
                           std::to_string(config.block_size) +
                           " positions, which cannot slide or reach further; use --methods window for it");
          m.methods.push_back(method);
        }
      }
      models.push_back(std::move(m));
    }

    FILE* table = args.as_json ? stderr : stdout;
    std::fprintf(table, "precision: %s\n", precision.reason.c_str());
    std::fprintf(table, "%lld stream%s of %lld tokens from %s; scored: the tokens past each model's window\n",
                 (long long)args.streams, args.streams == 1 ? "" : "s", (long long)args.length, args.tokens_path.c_str());
    std::fprintf(table, "%-24s %-7s %8s %13s\n", "model", "method", "loss", "ms/token");
    std::fflush(table);

    std::vector<Row> rows;
    // Progress on stderr (the window method takes minutes): which model, method and stream, and
    // how long the rest of this method should take.
    ProgressLine progress;
    for (auto& m : models) {
      const int64_t W = m.gpt->config().block_size;
      // One untimed window first, so the first timed method does not pay for cold caches and allocations.
      (void)context_losses(*m.gpt, std::vector<int32_t>(stream_tokens[0].begin(), stream_tokens[0].begin() + W + 1),
                           ContextMethod::window, device);
      for (ContextMethod method : m.methods) {
        Row row{m.name, method, 0, 0, std::vector<double>(size_t(args.length - W), 0.0), W};
        double seconds = 0;
        size_t scored = 0;
        const auto t_method = Clock::now();
        for (int64_t s = 0; s < args.streams; ++s) {
          const double spent = seconds_since(t_method);
          progress.update(format("%s %s: stream %lld/%lld%s", m.name.c_str(), to_string(method).c_str(), (long long)s + 1,
                                 (long long)args.streams,
                                 s > 0 ? (", ETA " + format_duration(spent / double(s) * double(args.streams - s))).c_str() : ""),
                          true);
          ContextResult r = context_losses(*m.gpt, stream_tokens[size_t(s)], method, device);
          seconds += r.seconds;
          scored += r.losses.size();
          for (size_t j = 0; j < r.losses.size(); ++j) {
            row.loss += r.losses[j];
            row.position_loss[j] += r.losses[j] / double(args.streams);
          }
        }
        row.loss /= double(scored);
        row.ms_per_token = 1e3 * seconds / double(scored);
        require_finite(row.loss, m.name + ": the " + to_string(method) + " loss on " + args.tokens_path,
                       "its weights" + std::string(args.adapter.empty() ? "" : " with " + args.adapter) +
                           " overflow in the forward pass; use another checkpoint" + (args.adapter.empty() ? "" : " or adapter"));
        progress.clear();
        std::fprintf(table, "%-24s %-7s %8.4f %13.3f\n", m.name.c_str(), to_string(method).c_str(), row.loss,
                     row.ms_per_token);
        std::fflush(table);
        rows.push_back(std::move(row));
      }
    }

    // Per-position losses: one column per model and method (empty where a model's window is longer).
    fs::create_directories(args.out_dir);
    const std::string csv_path = (fs::path(args.out_dir) / "context_losses.csv").string();
    const std::string png_path = (fs::path(args.out_dir) / "context_losses.png").string();
    const std::string summary_csv = (fs::path(args.out_dir) / "context_methods.csv").string();
    const std::string summary_png = (fs::path(args.out_dir) / "context_methods.png").string();
    std::string csv = "position";
    for (const auto& r : rows) csv += "," + r.model + " " + to_string(r.method);
    csv += "\n";
    int64_t first = args.length;
    for (const auto& r : rows) first = std::min(first, r.block_size);
    for (int64_t p = first; p < args.length; ++p) {
      csv += std::to_string(p);
      for (const auto& r : rows)
        csv += "," + (p >= r.block_size ? format("%.6f", r.position_loss[size_t(p - r.block_size)]) : std::string());
      csv += "\n";
    }
    util::write_file_atomic(csv_path, csv);
    std::string summary = "model,method,loss,ms_per_token\n";
    for (const auto& r : rows) summary += r.model + "," + to_string(r.method) + format(",%.6f,%.6f\n", r.loss, r.ms_per_token);
    util::write_file_atomic(summary_csv, summary);
    std::string where = "per-position losses: " + csv_path;
    if (!args.no_plot) {
      std::string err = run_gnuplot(plot_script(csv_path, png_path, rows, args.length));
      if (err.empty()) err = run_gnuplot(summary_script(summary_csv, summary_png));
      where += err.empty() ? ", plots: " + png_path + ", " + summary_png : " (no plot: " + err.substr(0, err.find('\n')) + ")";
    }
    std::fprintf(table, "%s\n", where.c_str());

    if (args.as_json) {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (const auto& r : rows)
        out.push_back({{"model", r.model}, {"method", to_string(r.method)}, {"loss", r.loss}, {"ms_per_token", r.ms_per_token}});
      std::printf("%s\n", out.dump(2).c_str());
    }
    return 0;
  });
}
