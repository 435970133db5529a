// prepare: trains the byte-level BPE tokenizer on the training stories and encodes the training and
// held-out stories into llm.c token files:
//   <out>/tokenizer.json, <out>/train.bin, <out>/valid.bin
// Everything is computed in memory first; the three files are then written as one
// (apps/common/data_folder.h), so a failure leaves the previous files as they were, all three.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "apps/common/app.h"
#include "apps/flags/prepare.h"
#include "apps/common/data_folder.h"
#include <mvgpt/text/token_file.h>
#include <mvgpt/text/tokenizer.h>
#include <mvgpt/util/atomic_file.h>
#include <mvgpt/util/hash.h>

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

// Held-out loss measured on the training text would only measure memory: the same file (by any
// path) or the same bytes is refused.
void check_held_out_is_not_training(const std::string& train, const std::string& valid) {
  std::error_code ec;
  const bool same_file = fs::equivalent(train, valid, ec);
  const bool same_bytes = !same_file && fs::file_size(train) == fs::file_size(valid) &&
                          util::digest_file(train).xxh64 == util::digest_file(valid).xxh64;
  if (same_file || same_bytes)
    throw AppError("the held-out stories " + valid + (same_file ? " are the training file " : " hold the same bytes as ") +
                   train + ": a held-out loss on them would measure what the model memorised; pass stories kept out of "
                   "training with --valid (or --data-dir with its own valid.txt)");
}

// Stories are separated by lines of <|endoftext|>; a file without one is a single story (a play, a
// book): encoded as it is, but said, since a wrong file looks just like that.
void note_if_one_story(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  for (std::string line; std::getline(in, line);) {  // stops at the first separator: stories files start with them
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == text::kEndOfText) return;
  }
  const std::string sep(text::kEndOfText);
  std::printf("note: %s has no %s line between stories: it is encoded as one text (pass stories separated by lines "
              "of %s to have each one end with it)\n",
              path.c_str(), sep.c_str(), sep.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  PrepareArgs args;
  const auto app = prepare_cli(args);
  return run_app(*app, argc, argv, [&] {
    if (args.train_path.empty() || args.valid_path.empty()) {
      const std::string dir = find_stories_dir(args.data_dir);
      if (args.train_path.empty()) args.train_path = (fs::path(dir) / "train.txt").string();
      if (args.valid_path.empty()) args.valid_path = (fs::path(dir) / "valid.txt").string();
    }
    const std::string hint = "pass --data-dir DIR, or --train FILE and --valid FILE";
    require_file(args.train_path, "training stories", hint);
    require_file(args.valid_path, "held-out stories", hint);
    if (fs::file_size(args.train_path) == 0) throw AppError("training stories " + args.train_path + ": the file is empty");
    if (fs::file_size(args.valid_path) == 0) throw AppError("held-out stories " + args.valid_path + ": the file is empty");
    check_held_out_is_not_training(args.train_path, args.valid_path);
    // Before any work: the folder must be one prepare may write into (NOTE [ What prepare writes into ]).
    const std::vector<std::string> inputs = {args.train_path, args.valid_path, args.tokenizer_path};
    check_prepare_folder(args.out_dir, inputs);
    for (const std::string& path : {args.train_path, args.valid_path}) note_if_one_story(path);

    text::Tokenizer tok;
    if (!args.tokenizer_path.empty()) {
      require_file(args.tokenizer_path, "tokenizer", "train one by leaving out --tokenizer");
      tok = text::Tokenizer::load(args.tokenizer_path);
      std::printf("tokenizer: %s (%zu tokens)\n", args.tokenizer_path.c_str(), tok.vocab_size());
    } else {
      std::string text = stories_prefix(args.train_path, args.tokenizer_bytes);
      std::printf("training the tokenizer on %s bytes of %s, vocabulary %zu\n", format_count(int64_t(text.size())).c_str(),
                  args.train_path.c_str(), args.vocab_size);
      std::fflush(stdout);
      ProgressLine progress;
      auto t0 = Clock::now();
      tok = text::Tokenizer::train(text, args.vocab_size, [&](size_t done, size_t total) {
        progress.update(format("merges: %zu / %zu (%s)", done, total, format_duration(seconds_since(t0)).c_str()));
      });
      progress.finish(format("merges: %zu in %.1f s", tok.merges().size(), seconds_since(t0)));
      if (tok.vocab_size() < args.vocab_size)
        std::printf("note: the text has no more pairs to merge; the vocabulary has %zu tokens, not %zu\n",
                    tok.vocab_size(), args.vocab_size);
    }

    Encoded train = encode_file(tok, args.train_path, "train");
    Encoded valid = encode_file(tok, args.valid_path, "valid");

    // All computed: now the three files, as one.
    PreparedFolderWriter out(args.out_dir, inputs);
    const std::string tok_out = (fs::path(args.out_dir) / "tokenizer.json").string();
    const std::string train_out = (fs::path(args.out_dir) / "train.bin").string();
    const std::string valid_out = (fs::path(args.out_dir) / "valid.bin").string();
    text::write_token_file(out.staged("train.bin"), train.tokens);
    text::write_token_file(out.staged("valid.bin"), valid.tokens);
    tok.save(out.staged("tokenizer.json"));
    // Read back through the memory map: the header and the count must agree with what we wrote.
    for (const auto& [name, n] : {std::pair{"train.bin", train.tokens.size()}, std::pair{"valid.bin", valid.tokens.size()}}) {
      text::TokenFile f(out.staged(name));
      if (f.size() != n) throw AppError(out.staged(name) + ": read back " + std::to_string(f.size()) + " tokens, wrote " + std::to_string(n));
    }
    out.commit({"tokenizer.json", "train.bin", "valid.bin"});
    std::printf("wrote %s (%zu tokens), %s (%s tokens), %s (%s tokens)\n", tok_out.c_str(), tok.vocab_size(),
                train_out.c_str(), format_count(int64_t(train.tokens.size())).c_str(), valid_out.c_str(),
                format_count(int64_t(valid.tokens.size())).c_str());
    return 0;
  });
}
