// context: how well and how fast checkpoints predict past their context window (the seed's
// measurement). Streams of --length held-out tokens, one after another from the start of the token
// file; for each model the methods of apps/common/context_methods.h (window for every model, cache
// and full for RoPE models), the loss averaged over the tokens past the first window and the
// milliseconds per token. Writes the per-position losses (CSV) and, when gnuplot is installed, a PNG.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/common/app.h"
#include "apps/common/cli.h"
#include "apps/common/checkpoints.h"
#include "apps/common/context_methods.h"
#include "apps/common/evaluation.h"
#include "apps/common/plot.h"
#include "util/atomic_file.h"

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

std::string plot_script(const std::string& csv, const std::string& png, size_t columns, int64_t length) {
  std::string s;
  s += "set datafile separator ','\n";
  s += "set terminal pngcairo size 1100,650 font ',11'\n";
  s += "set output " + gnuplot_quote(png) + "\n";
  s += "set termoption noenhanced\n";
  s += "set title 'Loss past the context window, mean over the streams (thin: each position; thick: smoothed)'\n";
  s += "set xlabel 'position in the stream'\nset ylabel 'loss (nats)'\nset grid\nset key top right\n";
  s += "set xrange [*:" + std::to_string(length) + "]\n";
  s += "plot for [i=2:" + std::to_string(columns + 1) + "] " + gnuplot_quote(csv) +
       " using 1:i with lines lw 0.5 lc i-1 notitle, \\\n";
  s += "     for [i=2:" + std::to_string(columns + 1) + "] " + gnuplot_quote(csv) +
       " using 1:i smooth bezier with lines lw 2.5 lc i-1 title columnhead(i)\n";
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  ContextArgs args;
  const auto app = context_cli(args);
  return run_app(*app, argc, argv, [&] {
    const Device device = resolve_device(args.device_flag);
    check_output_folder("--out-dir", args.out_dir);  // now, not after all the measuring
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
      m.gpt = load_model(m.dir, device).model;
      m.gpt->eval();
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
    std::fprintf(table, "%lld stream%s of %lld tokens from %s; scored: the tokens past each model's window\n",
                 (long long)args.streams, args.streams == 1 ? "" : "s", (long long)args.length, args.tokens_path.c_str());
    std::fprintf(table, "%-24s %-7s %8s %13s\n", "model", "method", "loss", "ms/token");
    std::fflush(table);

    std::vector<Row> rows;
    for (auto& m : models) {
      const int64_t W = m.gpt->config().block_size;
      // One untimed window first, so the first timed method does not pay for cold caches and allocations.
      (void)context_losses(*m.gpt, std::vector<int32_t>(stream_tokens[0].begin(), stream_tokens[0].begin() + W + 1),
                           ContextMethod::window, device);
      for (ContextMethod method : m.methods) {
        Row row{m.name, method, 0, 0, std::vector<double>(size_t(args.length - W), 0.0), W};
        double seconds = 0;
        size_t scored = 0;
        for (int64_t s = 0; s < args.streams; ++s) {
          if (args.as_json)
            std::fprintf(stderr, "%s %s: stream %lld/%lld\r", m.name.c_str(), to_string(method).c_str(),
                         (long long)s + 1, (long long)args.streams);
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
    std::string where = "per-position losses: " + csv_path;
    if (!args.no_plot) {
      std::string err = run_gnuplot(plot_script(csv_path, png_path, rows.size(), args.length));
      where += err.empty() ? ", plot: " + png_path : " (no plot: " + err.substr(0, err.find('\n')) + ")";
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
