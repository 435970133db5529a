#!/usr/bin/env bash
# nanoGPT's CPU recipe for a character-level GPT on Shakespeare, run with mvgpt's apps:
#   python train.py config/train_shakespeare_char.py --device=cpu --compile=False --eval_iters=20 \
#     --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 \
#     --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0
# (nanoGPT's README: "we get a validation loss of about 1.88" in "about 3 minutes" on a laptop CPU.)
# The same model: 4 layers, 4 heads, width 128, block 64, batch 12, 2,000 steps, lr 1e-3 -> 1e-4 after
# 100 warm-up steps, beta2 0.99, weight decay 0.1, clip 1, no dropout, tied embeddings; the last 10%
# of the text held out. Characters are bytes here (vocabulary 257: the 256 bytes and the end-of-text
# token, no merges); Shakespeare's text is ASCII, so a byte is a character. Held-out loss: 240
# windows (nanoGPT's 20 batches of 12), measured every 250 steps.
#
#   bash examples/shakespeare_char/run.sh [BUILD_DIR] [STEPS]      (defaults: build, 2000)
# The split text, the token files and the run go to BUILD_DIR/shakespeare_char/.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "${1:-$repo/build}" && pwd)"
steps=${2:-2000}
text=${MVGPT_SHAKESPEARE:-$repo/../shared/data/tinyshakespeare/input.txt}
bin="$build/apps"
[ -x "$bin/pretrain" ] || bin="$build/install/libexec/mvgpt"  # installed: bin/mvgpt-<app> links to these
work="$build/shakespeare_char"
mkdir -p "$work"
[ -f "$text" ] || { echo "shakespeare_char: $text: no such file; set MVGPT_SHAKESPEARE to tinyshakespeare's input.txt" >&2; exit 1; }

# The first 90% to train on, the rest held out (nanoGPT's split, by characters).
bytes=$(wc -c < "$text")
head -c $((bytes * 9 / 10)) "$text" > "$work/train.txt"
tail -c +$((bytes * 9 / 10 + 1)) "$text" > "$work/valid.txt"
"$bin/prepare" --train "$work/train.txt" --valid "$work/valid.txt" --vocab-size 257 --out "$work/data"
cat > "$work/config.json" <<JSON
{"vocab_size": 257, "block_size": 64, "n_layer": 4, "n_head": 4, "n_embd": 128, "rope": false,
 "bias": false, "dropout": 0.0}
JSON
start=$SECONDS
"$bin/pretrain" --config "$work/config.json" --data "$work/data" --out "$work/run" --overwrite --device cpu \
  --steps "$steps" --batch-size 12 --lr 1e-3 --min-lr 1e-4 --warmup-steps 100 --beta2 0.99 --weight-decay 0.1 \
  --grad-clip 1 --eval-interval 250 --eval-windows 240 --log-interval 250
echo "shakespeare_char: $steps steps in $((SECONDS - start)) s on $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p'))"
