// merge: folds a model's LoRA adapters into its weights (W += alpha / r B A, in float64, rounded
// once) and writes an ordinary checkpoint that evaluate, context, generate and other tools load
// without knowing about adapters.
#include <cstdio>
#include <filesystem>

#include "apps/common/app.h"
#include "apps/common/checkpoints.h"
#include "apps/flags/merge.h"
#include "apps/common/run_folder.h"
#include <mvgpt/gpt/checkpoint.h>
#include <mvgpt/nn/lora.h>
#include <mvgpt/nn/safetensors.h>
#include <mvgpt/util/atomic_file.h>

namespace fs = std::filesystem;
using namespace mvgpt;
using namespace mvgpt::apps;

int main(int argc, char** argv) {
  MergeArgs args;
  const auto app = merge_cli(args);
  return run_app(*app, argc, argv, [&] {
    check_new_output_folder(args.out_dir, "merge", "checkpoints/merged");
    const std::string dir = resolve_checkpoint(args.ckpt);
    auto loaded = load_model(dir, Device::cpu(), args.adapter);
    const nn::LoRAOptions lora = nn::lora_options(*loaded.model);
    if (lora.rank == 0)
      throw AppError(dir + " has no LoRA adapters to merge; pass --adapter FILE, or a run trained with --lora-rank");
    nn::merge_lora(*loaded.model);
    // W + alpha / r B A can overflow float32 even from finite parts: nothing that is not finite is written.
    for (const auto& [name, t] : loaded.model->state_dict())
      if (const int64_t i = safetensors::first_non_finite(t.detach()); i >= 0)
        throw AppError("merging " + dir + (args.adapter.empty() ? "" : " + " + args.adapter) + " makes " + name +
                       " non-finite at element " + std::to_string(i) + " (alpha " + format("%g", lora.alpha) + ", rank " +
                       std::to_string(lora.rank) + "): the adapter's weights or scale are not a trained adapter's; nothing was written");
    std::map<std::string, std::string> meta = {{"merged_from", dir}};
    if (loaded.metadata.count("step")) meta["step"] = loaded.metadata.at("step");
    const std::string tokenizer = checkpoint_tokenizer(dir);
    gpt::save_checkpoint(args.out_dir, *loaded.model, meta, [&](const std::string& tmp) {
      if (!tokenizer.empty()) util::write_file_atomic((fs::path(tmp) / "tokenizer.json").string(), util::read_file(tokenizer));
    });
    std::printf("merged %zu adapters (rank %lld, alpha %g) of %s%s into %s: an ordinary checkpoint of %s parameters\n",
                lora.targets.size(), (long long)lora.rank, lora.alpha, dir.c_str(),
                args.adapter.empty() ? "" : (" + " + args.adapter).c_str(), args.out_dir.c_str(),
                format_count(loaded.model->num_parameters()).c_str());
    return 0;
  });
}
