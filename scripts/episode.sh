#!/usr/bin/env bash
# The episode, end to end, on a fresh machine: install, build, prepare the stories, pretrain the
# model with learned positions and the one with rotary embeddings (ten minutes each), evaluate both
# on the held-out stories, measure both past the context window, and draw the pictures.
#
#   bash scripts/episode.sh            # the real thing: 10 + 10 minutes of training, then measurements
#   bash scripts/episode.sh --quick    # a short run that exercises every step (about 9 minutes here)
#
# Environment: MVGPT_EPISODE_MINUTES (minutes per model, default 10), MVGPT_QUICK_STEPS (steps per
# model with --quick, default 30), MVGPT_DEVICE (cpu, cuda or auto; default auto), MVGPT_PRECISION
# (the training's products: fp32, bf16 or auto, the default: bf16 where the device computes it
# natively, AMX or AVX512-BF16 or a GPU from sm_80; the measurements stay fp32), MVGPT_DATA_DIR
# (the raw stories; default ../shared/data/tinystories), MVGPT_BUILD_DIR (default build),
# MVGPT_SKIP_INSTALL=1 (dependencies are already there), MVGPT_EPISODE_DIR (where data/,
# checkpoints/ and runs/ go; default the repository root).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

quick=${MVGPT_EPISODE_QUICK:-0}
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "episode.sh: unknown argument '$arg' (known: --quick)" >&2; exit 2 ;;
  esac
done

build=${MVGPT_BUILD_DIR:-build}
device=${MVGPT_DEVICE:-auto}
precision=${MVGPT_PRECISION:-auto}
minutes=${MVGPT_EPISODE_MINUTES:-10}

step() { printf '\n=== %s\n' "$*"; }

step "dependencies"
if [ "${MVGPT_SKIP_INSTALL:-0}" != 1 ]; then
  bash scripts/install-deps.sh  # as root or through sudo; nothing to do when all is there
fi

step "build (the apps)"
generator=(-G Ninja)
[ -f "$build/CMakeCache.txt" ] && generator=()  # keep the generator an existing build folder was made with
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$build" --target prepare pretrain evaluate context generate
bin="$(cd "$build/apps" && pwd)"
# The raw stories are found from the executables' location, so the outputs can go anywhere.
mkdir -p "${MVGPT_EPISODE_DIR:-$repo}"
cd "${MVGPT_EPISODE_DIR:-$repo}"
mkdir -p runs

step "prepare: tokenizer and token files"
"$bin/prepare" --out data

if [ "$quick" = 1 ]; then
  steps=${MVGPT_QUICK_STEPS:-30}
  train_args=(--steps "$steps" --eval-interval 10)
  context_args=(--streams 1)
  echo "quick run: $steps steps per model"
else
  train_args=(--minutes "$minutes")
  context_args=()
fi

step "pretrain: learned positions (checkpoints/pretrain)"
"$bin/pretrain" --device "$device" --precision "$precision" --overwrite "${train_args[@]}"
step "pretrain: rotary position embeddings (checkpoints/pretrain-rope)"
"$bin/pretrain" --rope --device "$device" --precision "$precision" --overwrite "${train_args[@]}"

step "evaluate on the held-out stories"
"$bin/evaluate" --device "$device" --ckpt checkpoints/pretrain --ckpt checkpoints/pretrain-rope | tee runs/evaluate.txt

step "past the context window"
"$bin/context" --device "$device" --ckpt checkpoints/pretrain --ckpt checkpoints/pretrain-rope \
  --out-dir runs/context "${context_args[@]}" | tee runs/context.txt

step "a story from each model"
for run in pretrain pretrain-rope; do
  echo "--- $run"
  "$bin/generate" --device "$device" --ckpt "checkpoints/$run" --prompt "Once upon a time" --max-new-tokens 120
done

step "pictures"
if command -v gnuplot > /dev/null; then
  gnuplot -e "files='checkpoints/pretrain/log.csv checkpoints/pretrain-rope/log.csv'" \
          -e "titles='learned rotary'" -e "out='runs/training.png'" "$repo/scripts/plot_training.gp"
else
  echo "gnuplot is not installed: no PNGs (the CSVs are there)"
fi

step "results"
cat runs/evaluate.txt
echo
cat runs/context.txt
cat <<EOF

in $PWD:
training logs:    checkpoints/pretrain/log.csv, checkpoints/pretrain-rope/log.csv
training curves:  runs/training.png
past the window:  runs/context/context_losses.csv, runs/context/context_losses.png
TensorBoard:      tensorboard --logdir checkpoints
EOF
