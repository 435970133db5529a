// prepare: trains the byte-level BPE tokenizer on the training stories and encodes the training and
// held-out stories into llm.c token files:
//   <out>/tokenizer.json, <out>/train.bin, <out>/valid.bin
// Everything is computed in memory first and the three files are written (atomically) only at the
// end, so a failure leaves the previous files as they were.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "apps/common/app.h"
#include "mvgpt/token_file.h"
#include "mvgpt/tokenizer.h"
#include "util/atomic_file.h"

namespace fs = std::filesystem;
using namespace mvgpt;
using namespace mvgpt::apps;

namespace {

// The first `max_bytes` of a stories file, cut after the last separator line that fits (so no story
// is cut in two); the whole text when max_bytes is 0 or larger than the file.
std::string stories_prefix(const std::string& path, size_t max_bytes) {
  std::string text = util::read_file(path);
  if (max_bytes == 0 || text.size() <= max_bytes) return text;
  const std::string sep = std::string("\n") + std::string(text::kEndOfText) + "\n";
  size_t cut = text.rfind(sep, max_bytes - sep.size());
  text.resize(cut == std::string::npos ? max_bytes : cut + sep.size());
  return text;
}

struct Encoded {
  std::vector<uint32_t> tokens;
  double seconds = 0;
  size_t bytes = 0;
};

Encoded encode_file(const text::Tokenizer& tok, const std::string& path, const std::string& label) {
  Encoded e;
  e.bytes = size_t(fs::file_size(path));
  ProgressLine progress;
  auto t0 = Clock::now();
  e.tokens = text::encode_stories_file(tok, path, [&](size_t done, size_t total) {
    double s = seconds_since(t0);
    progress.update(format("encoding %s: %5.1f%% (%.1f MB/s)", label.c_str(), total ? 100.0 * double(done) / double(total) : 100.0,
                           s > 0 ? double(done) / 1e6 / s : 0.0));
  });
  e.seconds = seconds_since(t0);
  progress.finish(format("encoding %s: %s bytes -> %s tokens in %.2f s (%.1f MB/s, %.2f bytes/token)", label.c_str(),
                         format_count(int64_t(e.bytes)).c_str(), format_count(int64_t(e.tokens.size())).c_str(),
                         e.seconds, double(e.bytes) / 1e6 / std::max(e.seconds, 1e-9),
                         e.tokens.empty() ? 0.0 : double(e.bytes) / double(e.tokens.size())));
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trains the byte-level BPE tokenizer on the training stories and encodes the training and\n"
               "held-out stories into llm.c token files (tokenizer.json, train.bin, valid.bin).",
               "prepare"};
  std::string data_dir, train_path, valid_path, out_dir = "data", tokenizer_path;
  size_t vocab_size = 10000;
  double tokenizer_mb = 0;
  app.add_option("--data-dir", data_dir,
                 "folder with train.txt and valid.txt (stories separated by <|endoftext|> lines); default "
                 "$MVGPT_DATA_DIR, else ../shared/data/tinystories from the repository root");
  app.add_option("--train", train_path, "training stories (default <data-dir>/train.txt)");
  app.add_option("--valid", valid_path, "held-out stories (default <data-dir>/valid.txt)");
  app.add_option("--out", out_dir, "output folder")->capture_default_str();
  app.add_option("--vocab-size", vocab_size, "tokens in the vocabulary: 256 bytes + merges + <|endoftext|>")
      ->capture_default_str()
      ->check(CLI::Range(size_t(257), size_t(65536)));
  app.add_option("--tokenizer", tokenizer_path, "use this tokenizer.json instead of training one");
  app.add_option("--tokenizer-mb", tokenizer_mb,
                 "train the tokenizer on the first N MB of the training stories (0: all of them)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);

  return run_app(app, argc, argv, [&] {
    if (train_path.empty() || valid_path.empty()) {
      const std::string dir = find_stories_dir(data_dir);
      if (train_path.empty()) train_path = (fs::path(dir) / "train.txt").string();
      if (valid_path.empty()) valid_path = (fs::path(dir) / "valid.txt").string();
    }
    const std::string hint = "pass --data-dir DIR, or --train FILE and --valid FILE";
    require_file(train_path, "training stories", hint);
    require_file(valid_path, "held-out stories", hint);
    if (fs::file_size(train_path) == 0) throw AppError("training stories " + train_path + ": the file is empty");
    if (fs::file_size(valid_path) == 0) throw AppError("held-out stories " + valid_path + ": the file is empty");

    text::Tokenizer tok;
    if (!tokenizer_path.empty()) {
      require_file(tokenizer_path, "tokenizer", "train one by leaving out --tokenizer");
      tok = text::Tokenizer::load(tokenizer_path);
      std::printf("tokenizer: %s (%zu tokens)\n", tokenizer_path.c_str(), tok.vocab_size());
    } else {
      std::string text = stories_prefix(train_path, size_t(tokenizer_mb * 1e6));
      std::printf("training the tokenizer on %s bytes of %s, vocabulary %zu\n", format_count(int64_t(text.size())).c_str(),
                  train_path.c_str(), vocab_size);
      std::fflush(stdout);
      ProgressLine progress;
      auto t0 = Clock::now();
      tok = text::Tokenizer::train(text, vocab_size, [&](size_t done, size_t total) {
        progress.update(format("merges: %zu / %zu (%s)", done, total, format_duration(seconds_since(t0)).c_str()));
      });
      progress.finish(format("merges: %zu in %.1f s", tok.merges().size(), seconds_since(t0)));
      if (tok.vocab_size() < vocab_size)
        std::printf("note: the text has no more pairs to merge; the vocabulary has %zu tokens, not %zu\n",
                    tok.vocab_size(), vocab_size);
    }

    Encoded train = encode_file(tok, train_path, "train");
    Encoded valid = encode_file(tok, valid_path, "valid");

    // All computed: now write the three files, each atomically.
    fs::create_directories(out_dir);
    const std::string tok_out = (fs::path(out_dir) / "tokenizer.json").string();
    const std::string train_out = (fs::path(out_dir) / "train.bin").string();
    const std::string valid_out = (fs::path(out_dir) / "valid.bin").string();
    text::write_token_file(train_out, train.tokens);
    text::write_token_file(valid_out, valid.tokens);
    if (tokenizer_path.empty() || fs::weakly_canonical(tokenizer_path) != fs::weakly_canonical(tok_out)) tok.save(tok_out);

    // Read back through the memory map: the header and the count must agree with what we wrote.
    for (const auto& [path, n] : {std::pair{train_out, train.tokens.size()}, std::pair{valid_out, valid.tokens.size()}}) {
      text::TokenFile f(path);
      if (f.size() != n) throw AppError(path + ": read back " + std::to_string(f.size()) + " tokens, wrote " + std::to_string(n));
    }
    std::printf("wrote %s (%zu tokens), %s (%s tokens), %s (%s tokens)\n", tok_out.c_str(), tok.vocab_size(),
                train_out.c_str(), format_count(int64_t(train.tokens.size())).c_str(), valid_out.c_str(),
                format_count(int64_t(valid.tokens.size())).c_str());
    return 0;
  });
}
