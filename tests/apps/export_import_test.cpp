// export --format hf and import: a trained run out as a Hugging Face folder and back in, weights bit
// for bit; the other apps load the exported folder directly to the same held-out loss; bad inputs
// fail with one line and leave nothing behind. (transformers' own check: tests/python/test_hf.py.)
#include <nlohmann/json.hpp>

#include "app_runner.h"

#include <mvgpt/backends/ops.h>
#include <mvgpt/nn/safetensors.h>

namespace mvgpt::apps::testing {
namespace {

class ExportImport : public AppsTest {};

// name -> bytes of each tensor in a safetensors file (the metadata aside).
std::map<std::string, std::string> tensor_bytes(const fs::path& file) {
  std::map<std::string, std::string> out;
  for (const auto& [name, t] : safetensors::load(file.string()).tensors) {
    const Tensor c = ops::contiguous(t);
    out[name] = std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
  }
  return out;
}

TEST_F(ExportImport, ATrainedRunGoesOutAndBackBitForBit) {
  for (bool rope : {false, true}) {
    const fs::path run = trained(rope);
    const fs::path cwd = prepared();
    const std::string name = rope ? "rope" : "learned";
    RunResult out = run_app("export", "--ckpt " + run.string() + " --format hf --out hf/" + name, cwd);
    ASSERT_EQ(out.code, 0) << out.out << out.err;
    EXPECT_NE(out.out.find(rope ? "GPTNeoXForCausalLM" : "GPT2LMHeadModel"), std::string::npos) << out.out;
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"})
      EXPECT_TRUE(fs::exists(cwd / "hf" / name / f)) << f;
    EXPECT_NE(slurp(cwd / "hf" / name / "config.json").find(rope ? "\"gpt_neox\"" : "\"gpt2\""), std::string::npos);

    RunResult back = run_app("import", "--from hf/" + name + " --out back/" + name, cwd);
    ASSERT_EQ(back.code, 0) << back.out << back.err;
    EXPECT_EQ(tensor_bytes(cwd / "back" / name / "model.safetensors"), tensor_bytes(run / "best" / "model.safetensors"));
    EXPECT_EQ(slurp(cwd / "back" / name / "config.json"), slurp(run / "best" / "config.json"));
    EXPECT_EQ(slurp(cwd / "back" / name / "tokenizer.json"), slurp(run / "best" / "tokenizer.json"));

    // evaluate reads the Hugging Face folder itself, to the loss of the run it came from.
    auto loss = [&](const std::string& ckpt) {
      RunResult r = run_app("evaluate", "--ckpt " + ckpt + " --device cpu --json", cwd);
      EXPECT_EQ(r.code, 0) << r.err;
      return r.code == 0 ? nlohmann::json::parse(r.out)[0]["loss"].get<double>() : -1.0;
    };
    EXPECT_EQ(loss("hf/" + name), loss(run.string()));
  }
}

TEST_F(ExportImport, BadInputsFailWithOneLineAndWriteNothing) {
  const fs::path run = trained(true);
  const fs::path cwd = prepared();
  write_text(cwd / "taken" / "file", "someone's\n");
  expect_one_line_error(run_app("export", "--ckpt " + run.string() + " --out taken", cwd), "export", "not empty");
  expect_one_line_error(run_app("export", "--ckpt " + run.string() + " --out .", cwd), "export", "name a new folder", 2);
  expect_one_line_error(run_app("export", "--ckpt " + run.string() + " --format gguf --out x", cwd), "export", "does not end in .gguf", 2);
  // A model no transformers class computes: grouped KV heads with LayerNorm.
  write_text(cwd / "gqa.json", "{\"vocab_size\": 300, \"block_size\": 16, \"n_layer\": 1, \"n_head\": 4, \"n_kv_head\": 2, "
                               "\"n_embd\": 32, \"rope\": true}");
  RunResult gqa = run_app("pretrain", "--config gqa.json --steps 1 --batch-size 2 --eval-windows 2 --device cpu --out checkpoints/gqa", cwd);
  ASSERT_EQ(gqa.code, 0) << gqa.err;
  expect_one_line_error(run_app("export", "--ckpt checkpoints/gqa --out hf/gqa", cwd), "export", "no transformers class");
  EXPECT_FALSE(fs::exists(cwd / "hf" / "gqa"));
  // import takes Hugging Face folders only.
  expect_one_line_error(run_app("import", "--from " + (run / "best").string() + " --out y", cwd), "import", "model_type");
  expect_one_line_error(run_app("import", "--from nowhere --out y", cwd), "import", "nowhere");
  EXPECT_FALSE(fs::exists(cwd / "y"));
  EXPECT_FALSE(fs::exists(cwd / "x"));
}

// export --format gguf writes one new file (llama.cpp's own check: tests/python/test_gguf.py), and
// import --format gguf reads it back to the same weights and loss.
TEST_F(ExportImport, GgufGoesOutAsOneNewFileAndBackBitForBit) {
  for (bool rope : {false, true}) {
    const fs::path run = trained(rope);
    const fs::path cwd = prepared();
    const std::string name = rope ? "rope" : "learned";
    RunResult out = run_app("export", "--ckpt " + run.string() + " --format gguf --out " + name + ".gguf", cwd);
    ASSERT_EQ(out.code, 0) << out.out << out.err;
    EXPECT_NE(out.out.find(rope ? "gptneox" : "gpt2"), std::string::npos) << out.out;
    RunResult back = run_app("import", "--format gguf --from " + name + ".gguf --out back-gguf/" + name, cwd);
    ASSERT_EQ(back.code, 0) << back.out << back.err;
    EXPECT_EQ(tensor_bytes(cwd / "back-gguf" / name / "model.safetensors"), tensor_bytes(run / "best" / "model.safetensors"));
    EXPECT_EQ(slurp(cwd / "back-gguf" / name / "config.json"), slurp(run / "best" / "config.json"));
    EXPECT_EQ(slurp(cwd / "back-gguf" / name / "tokenizer.json"), slurp(run / "best" / "tokenizer.json"));
  }
}

TEST_F(ExportImport, GgufNeverReplacesAFileAndRefusesBadInputInOneLine) {
  const fs::path run = trained(true);
  const fs::path cwd = prepared();
  write_text(cwd / "taken.gguf", "someone's\n");
  expect_one_line_error(run_app("export", "--ckpt " + run.string() + " --format gguf --out taken.gguf", cwd), "export",
                        "already exists");
  EXPECT_EQ(slurp(cwd / "taken.gguf"), "someone's\n");
  expect_one_line_error(run_app("export", "--ckpt " + run.string() + " --format gguf --out nowhere/m.gguf", cwd), "export",
                        "does not exist");
  expect_one_line_error(run_app("export", "--ckpt " + run.string() + " --format gguf --out " + (run / "best" / "m.gguf").string(), cwd),
                        "export", "inside", 2);
  expect_one_line_error(run_app("export", "--ckpt " + run.string() + " --outtype f16 --out hf/x", cwd), "export", "--outtype", 2);
  // Damaged files: one line naming the file; nothing written.
  write_text(cwd / "junk.gguf", "GGUF\x03");
  expect_one_line_error(run_app("import", "--format gguf --from junk.gguf --out y", cwd), "import", "junk.gguf");
  expect_one_line_error(run_app("import", "--format gguf --from taken.gguf --out y", cwd), "import", "not a GGUF file");
  expect_one_line_error(run_app("import", "--format gguf --from missing.gguf --out y", cwd), "import", "missing.gguf");
  EXPECT_FALSE(fs::exists(cwd / "y"));
  EXPECT_FALSE(fs::exists(cwd / "nowhere"));
}

}  // namespace
}  // namespace mvgpt::apps::testing
