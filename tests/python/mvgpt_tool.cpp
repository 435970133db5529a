// The C++ side of the Python checks (tests/python/): what our model computes, for them to compare.
//   mvgpt_tool logits DIR TOKENS OUT       loads the checkpoint DIR (load_checkpoint: an mvgpt folder,
//                                          or a Hugging Face one we export), runs "tokens" (I32 (B, T))
//                                          of the safetensors file TOKENS, writes "logits" (F32 (B, T, V)) to OUT
//   mvgpt_tool random CONFIG SEED SCALE OUT [TOKENIZER]
//                                          a checkpoint of the config.json CONFIG with weights N(0, SCALE^2)
//                                          (large enough that logits differ visibly), tokenizer.json beside it
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/gpt/checkpoint.h>
#include <mvgpt/nn/safetensors.h>
#include <mvgpt/util/atomic_file.h>

using namespace mvgpt;

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  try {
    if (cmd == "logits" && argc == 5) {
      auto loaded = gpt::load_checkpoint(argv[2]);
      auto tokens = safetensors::load(argv[3]);
      NoGradGuard no_grad;
      Tensor logits = loaded.model->forward(tokens.at("tokens"));
      safetensors::save(argv[4], {{"logits", logits}});
      return 0;
    }
    if (cmd == "random" && (argc == 6 || argc == 7)) {
      const gpt::GPTConfig config = gpt::GPTConfig::from_json(util::read_file(argv[2]), argv[2]);
      Generator gen(std::strtoull(argv[3], nullptr, 10));
      gpt::GPT model(config, &gen);
      {
        NoGradGuard no_grad;
        const double scale = std::strtod(argv[4], nullptr);
        for (auto& p : model.parameters()) ops::copy_(p, ops::mul(ops::randn(p.shape(), DType::f32, Device::cpu(), &gen), scale));
      }
      const std::string tokenizer = argc == 7 ? util::read_file(argv[6]) : "";
      gpt::save_checkpoint(argv[5], model, {}, [&](const std::string& tmp) {
        if (!tokenizer.empty()) util::write_file_atomic(tmp + "/tokenizer.json", tokenizer);
      });
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mvgpt_tool: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: mvgpt_tool logits DIR TOKENS OUT | random CONFIG SEED SCALE OUT [TOKENIZER]\n");
  return 2;
}
