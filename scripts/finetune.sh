#!/usr/bin/env bash
# Fine-tuning the episode's rotary model on Shakespeare three ways (issue 16): nothing, full
# fine-tuning (every weight), and LoRA (rank 8 on the attention projections, the weights frozen),
# the same steps, batches and data for both trainings. Reports the held-out Shakespeare loss of each,
# the held-out stories loss (what each forgets), the trained share and the adapter's size; draws the
# two runs' curves.
#
#   bash scripts/finetune.sh        (after scripts/episode.sh: it needs checkpoints/pretrain-rope)
#
# Environment: MVGPT_FINETUNE_STEPS (default 60), MVGPT_BUILD_DIR (default build), MVGPT_SHAKESPEARE
# (default ../shared/data/tinyshakespeare/input.txt), MVGPT_EPISODE_DIR (where the episode ran).
# Writes data-shakespeare/, checkpoints/shakespeare-{full,lora}/ and runs/finetune.{txt,png}.
set -euo pipefail
source "$(dirname "$0")/apps_paths.sh"  # repo, build, bin
steps=${MVGPT_FINETUNE_STEPS:-60}
text=${MVGPT_SHAKESPEARE:-$repo/../shared/data/tinyshakespeare/input.txt}
cd "${MVGPT_EPISODE_DIR:-$repo}"
base=checkpoints/pretrain-rope
[ -f "$base/best/config.json" ] || { echo "finetune.sh: no $base/best: run scripts/episode.sh first" >&2; exit 1; }
mkdir -p runs data-shakespeare

# The text with the base model's own tokenizer (its ids are the model's), 90% / 10% as nanoGPT splits it.
bytes=$(wc -c < "$text")
head -c $((bytes * 9 / 10)) "$text" > data-shakespeare/train.txt
tail -c +$((bytes * 9 / 10 + 1)) "$text" > data-shakespeare/valid.txt
"$bin/prepare" --tokenizer "$base/best/tokenizer.json" --train data-shakespeare/train.txt \
  --valid data-shakespeare/valid.txt --out data-shakespeare

common=(--init-from "$base" --data data-shakespeare --steps "$steps" --batch-size 16 --warmup-steps 5
        --eval-interval 10 --eval-windows 32 --device cpu --overwrite)
SECONDS=0
"$bin/pretrain" "${common[@]}" --lr 3e-4 --min-lr 3e-5 --out checkpoints/shakespeare-full
full_s=$SECONDS
SECONDS=0
"$bin/pretrain" "${common[@]}" --lr 2e-3 --min-lr 2e-4 --lora-rank 8 --out checkpoints/shakespeare-lora
lora_s=$SECONDS

{
  echo "fine-tuning $base on Shakespeare: $steps steps of 16 x 256 tokens each (full: ${full_s} s, LoRA: ${lora_s} s)"
  echo "held-out Shakespeare (data-shakespeare/valid.bin):"
  "$bin/evaluate" --device cpu --tokens data-shakespeare/valid.bin --ckpt "$base" --ckpt checkpoints/shakespeare-full \
    --ckpt checkpoints/shakespeare-lora
  echo "held-out stories (data/valid.bin): what each forgets"
  "$bin/evaluate" --device cpu --tokens data/valid.bin --ckpt "$base" --ckpt checkpoints/shakespeare-full \
    --ckpt checkpoints/shakespeare-lora
  echo "adapter: $(stat -c %s checkpoints/shakespeare-lora/best/adapter.safetensors) bytes;" \
       "weights: $(stat -c %s checkpoints/shakespeare-full/best/model.safetensors) bytes"
} | tee runs/finetune.txt
if command -v gnuplot > /dev/null; then
  gnuplot -e "files='checkpoints/shakespeare-full/log.csv checkpoints/shakespeare-lora/log.csv'" \
          -e "titles='full LoRA-r8'" -e "out='runs/finetune.png'" \
          -e "title='Fine-tuning the rotary model on Shakespeare: every weight vs LoRA rank 8 (same steps and batches)'" \
          "$repo/scripts/plot_training.gp"
fi
