// llama2.c in, through the apps: import --format llama2c --tokenizer tokenizer.bin, then generate at
// temperature 0 prints what run.c -t 0 printed for the same model file, tokenizer and prompt
// (tests/fixtures/llama2c/run_c_output, made by llama2.c itself: README.md there), and prepare,
// evaluate and context run on the imported model.
#include <nlohmann/json.hpp>

#include "app_runner.h"
#include "llama2c_fixtures.h"

#include <mvgpt/text/tokenizer.h>

namespace mvgpt::apps::testing {
namespace {

using mvgpt::testing::llama2c::from_hex;
using mvgpt::testing::llama2c::read_jsonl;
const fs::path kFixtures = mvgpt::testing::llama2c::kFixtures;

class Llama2cApps : public AppsTest {
 protected:
  // The model imported with its tokenizer, once per process.
  static fs::path imported(const std::string& model) {
    const fs::path out = root() / "llama2c" / model;
    if (!fs::exists(out)) {
      RunResult r = run_app("import", "--format llama2c --from " + (kFixtures / (model + ".bin")).string() + " --tokenizer " +
                                          (kFixtures / "tok512.bin").string() + " --out " + out.string(),
                            root());
      EXPECT_EQ(r.code, 0) << r.out << r.err;
      EXPECT_NE(r.out.find("with its tokenizer"), std::string::npos) << r.out;
    }
    return out;
  }
};

TEST_F(Llama2cApps, GenerateAtTemperatureZeroPrintsWhatRunCPrints) {
  const text::Tokenizer tok = text::Tokenizer::load((kFixtures / "tok512.bin").string());
  // generate.jsonl has the decoded text of each run: run.c's printf drops lone bytes that are not
  // printable (a character split into byte tokens), which mvgpt prints.
  std::map<std::string, std::string> text_of;
  for (const auto& g : read_jsonl("generate.jsonl"))
    text_of[g["model"].get<std::string>() + g["prompt_hex"].get<std::string>() + std::to_string(g["steps"].get<int>())] =
        from_hex(g["text_hex"]);
  int runs = 0, identical = 0;
  for (const auto& run : read_jsonl("run_c_output/index.jsonl")) {
    const std::string model = run["model"], prompt = from_hex(run["prompt_hex"]);
    const int64_t steps = run["steps"];
    SCOPED_TRACE(model + ": \"" + prompt + "\", " + std::to_string(steps) + " steps");
    // run.c's -n counts positions, the prompt's included: its last prompt token and every token after
    // it choose one more.
    const int64_t new_tokens = steps - int64_t(tok.encode_prompt(prompt).size()) + 1;
    write_text(root() / "llama2c" / "prompt.txt", prompt);
    const fs::path ckpt = imported(model.substr(0, model.size() - 4));
    RunResult ours = run_app("generate", "--ckpt " + ckpt.string() + " --prompt-file llama2c/prompt.txt --temperature 0 "
                             "--stop-at-end --max-new-tokens " + std::to_string(new_tokens), root());
    ASSERT_EQ(ours.code, 0) << ours.err;
    const std::string run_c = slurp(kFixtures / "run_c_output" / run["file"].get<std::string>());
    const std::string text = text_of.at(model + run["prompt_hex"].get<std::string>() + std::to_string(steps)) + "\n";
    EXPECT_EQ(ours.out, text);
    identical += ours.out == run_c;
    ++runs;
  }
  EXPECT_EQ(runs, 14);
  EXPECT_EQ(identical, 12);  // the two runs from "Zoë saw a dog": run.c leaves out ë's two byte tokens
}

TEST_F(Llama2cApps, PrepareEvaluateAndContextRunOnTheImportedModel) {
  const fs::path ckpt = imported("tiny_legacy");
  const fs::path cwd = root() / "llama2c";
  write_text(cwd / "stories" / "train.txt", tiny_stories(20, 5));
  write_text(cwd / "stories" / "valid.txt", tiny_stories(30, 6));
  RunResult p = run_app("prepare", "--data-dir stories --tokenizer " + (ckpt / "tokenizer.json").string() + " --out data", cwd);
  ASSERT_EQ(p.code, 0) << p.out << p.err;
  RunResult e = run_app("evaluate", "--ckpt " + ckpt.string() + " --tokens data/valid.bin --device cpu --json", cwd);
  ASSERT_EQ(e.code, 0) << e.err;
  const double loss = nlohmann::json::parse(e.out)[0]["loss"];
  EXPECT_LT(loss, 4.0);  // uniform over 512 ids is 6.24: the trained model reads these stories
  RunResult c = run_app("context", "--ckpt " + ckpt.string() + " --tokens data/valid.bin --length 192 --streams 2 "
                        "--device cpu --json --no-plot --out-dir ctx", cwd);
  ASSERT_EQ(c.code, 0) << c.err;
  std::map<std::string, double> by_method;
  for (const auto& r : nlohmann::json::parse(c.out)) by_method[r["method"]] = r["loss"];
  ASSERT_EQ(by_method.size(), 3u) << c.out;  // window, cache and full past the 128-token window
  EXPECT_NEAR(by_method["cache"], by_method["window"], 0.05);
}

TEST_F(Llama2cApps, ImportRefusesAnotherModelsTokenizerInOneLine) {
  const std::string from = (kFixtures / "tiny_v1.bin").string();
  expect_one_line_error(run_app("import", "--format llama2c --from " + from + " --tokenizer " +
                                              (kFixtures / "tokenizer.bin").string() + " --out llama2c/wrong",
                                root()),
                        "import", "has 32000 pieces but");
  EXPECT_FALSE(fs::exists(root() / "llama2c" / "wrong"));
  const fs::path ours = prepared() / "data" / "tokenizer.json";  // byte-level BPE
  expect_one_line_error(
      run_app("import", "--format llama2c --from " + from + " --tokenizer " + ours.string() + " --out llama2c/wrong", root()),
      "import", "is a byte-level BPE tokenizer");
  expect_one_line_error(run_app("import", "--from some/folder --tokenizer tok.bin --out llama2c/x", root()), "import",
                        "--tokenizer is for --format llama2c", 2);
}

}  // namespace
}  // namespace mvgpt::apps::testing
