// The C++ side of the Python checks (tests/python/): what our model computes, for them to compare.
//   mvgpt_tool logits DIR TOKENS OUT       loads the checkpoint DIR (load_checkpoint: an mvgpt folder,
//                                          or a Hugging Face one we export), runs "tokens" (I32 (B, T))
//                                          of the safetensors file TOKENS, writes "logits" (F32 (B, T, V)) to OUT
//   mvgpt_tool random CONFIG SEED SCALE OUT [TOKENIZER]
//                                          a checkpoint of the config.json CONFIG with weights N(0, SCALE^2)
//                                          (large enough that logits differ visibly), tokenizer.json beside it
//   mvgpt_tool encode TOKENIZER TEXTS      each text of the JSON list TEXTS as a prompt (encode_prompt):
//                                          prints a JSON list of id lists
//   mvgpt_tool greedy DIR PROMPTS N        each prompt of the JSON list PROMPTS through the checkpoint DIR
//                                          with its tokenizer.json: encode_prompt, then gpt::generate at
//                                          temperature 0 for up to N tokens, stopping after the end of the
//                                          story (as generate --stop-at-end); prints the JSON list of all ids
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/gpt/checkpoint.h>
#include <mvgpt/gpt/generate.h>
#include <mvgpt/text/tokenizer.h>
#include <nlohmann/json.hpp>
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
    if (cmd == "encode" && argc == 4) {
      const text::Tokenizer tok = text::Tokenizer::load(argv[2]);
      nlohmann::json out = nlohmann::json::array();
      for (const auto& t : nlohmann::json::parse(util::read_file(argv[3]))) out.push_back(tok.encode_prompt(t.get<std::string>()));
      std::printf("%s\n", out.dump().c_str());
      return 0;
    }
    if (cmd == "greedy" && argc == 5) {
      auto loaded = gpt::load_checkpoint(argv[2]);
      const text::Tokenizer tok = text::Tokenizer::load(std::string(argv[2]) + "/tokenizer.json");
      nlohmann::json out = nlohmann::json::array();
      for (const auto& t : nlohmann::json::parse(util::read_file(argv[3]))) {
        std::vector<int32_t> ids;
        for (text::TokenId id : tok.encode_prompt(t.get<std::string>())) ids.push_back(int32_t(id));
        gpt::SampleOptions greedy;
        greedy.temperature = 0;
        const size_t prompt = ids.size();
        const auto fresh = gpt::generate(*loaded.model, ids, std::strtoll(argv[4], nullptr, 10), greedy,
                                         [&](int32_t id) { return text::TokenId(id) != tok.eot_id(); });
        ids.insert(ids.end(), fresh.begin(), fresh.end());
        // The end of the story is produced, then generation stops (generate --stop-at-end).
        out.push_back({{"prompt", prompt}, {"ids", ids}});
      }
      std::printf("%s\n", out.dump().c_str());
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mvgpt_tool: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: mvgpt_tool logits DIR TOKENS OUT | random CONFIG SEED SCALE OUT [TOKENIZER] | encode TOKENIZER TEXTS | "
                       "greedy DIR PROMPTS N\n");
  return 2;
}
