// Tokenizer throughput on TinyStories: encoding MB/s (first 1 MB of train.txt, a fresh chunk cache
// each call, as an app pays it) and the time to train a 10,000-token vocabulary on all of train.txt.
// Data: $MVGPT_DATA_DIR or ../shared/data/tinystories next to the source tree; skipped if missing.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include <mvgpt/text/tokenizer.h>
#include <mvgpt/util/atomic_file.h>

namespace {

namespace fs = std::filesystem;

std::optional<std::string> train_txt_path() {
  fs::path dir;
  if (const char* env = std::getenv("MVGPT_DATA_DIR")) dir = env;
  else dir = fs::absolute(__FILE__).parent_path().parent_path().parent_path() / "shared" / "data" / "tinystories";
  const fs::path file = dir / "train.txt";
  if (!fs::exists(file)) return std::nullopt;
  return file.string();
}

struct Corpus {
  std::string text;  // all of train.txt
  mvgpt::text::Tokenizer tokenizer;
};

// Trained once for the encode benches (a few seconds).
const Corpus* corpus() {
  static const std::optional<Corpus> c = []() -> std::optional<Corpus> {
    const auto path = train_txt_path();
    if (!path) return std::nullopt;
    Corpus out;
    out.text = mvgpt::util::read_file(*path);
    out.tokenizer = mvgpt::text::Tokenizer::train(out.text, 10000);
    return out;
  }();
  return c ? &*c : nullptr;
}

void encode_bench(benchmark::State& state, size_t bytes) {
  const Corpus* c = corpus();
  if (c == nullptr) {
    state.SkipWithError("train.txt not found (set MVGPT_DATA_DIR)");
    return;
  }
  const std::string_view text = std::string_view(c->text).substr(0, bytes);
  size_t tokens = 0;
  for (auto _ : state) {
    const auto ids = c->tokenizer.encode(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
  state.counters["bytes_per_token"] = double(text.size()) / double(tokens);
}

// Above the parallel threshold: pieces are encoded by oneTBB's workers.
void BM_TokenizerEncode1MB(benchmark::State& state) { encode_bench(state, size_t(1) << 20); }
BENCHMARK(BM_TokenizerEncode1MB)->Unit(benchmark::kMillisecond)->UseRealTime();

// Below it: one thread.
void BM_TokenizerEncode128KB(benchmark::State& state) { encode_bench(state, size_t(1) << 17); }
BENCHMARK(BM_TokenizerEncode128KB)->Unit(benchmark::kMillisecond);

void BM_TokenizerTrain10k(benchmark::State& state) {
  const auto path = train_txt_path();
  if (!path) {
    state.SkipWithError("train.txt not found (set MVGPT_DATA_DIR)");
    return;
  }
  const std::string text = mvgpt::util::read_file(*path);
  for (auto _ : state) {
    auto t = mvgpt::text::Tokenizer::train(text, 10000);
    benchmark::DoNotOptimize(t.vocab_size());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
}
BENCHMARK(BM_TokenizerTrain10k)->Unit(benchmark::kSecond)->Iterations(1)->UseRealTime();

}  // namespace
