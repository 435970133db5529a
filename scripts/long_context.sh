#!/usr/bin/env bash
# Longer context for the episode's rotary model (issue 16, docs/rope.md): the `full` method (the
# whole stream in one pass) on held-out streams of 1,024 tokens, four times its window of 256,
# three ways: the plain model, NTK-aware scaling by 4 at load time (no training), and position
# interpolation by 4 after a short fine-tune at block size 1,024 (about 2% of the pretraining
# tokens). The sliding window is the bar to reach. Reports each one's loss before and past 256, the
# steps and wall times, and draws the loss by position.
#
#   bash scripts/long_context.sh        (after scripts/episode.sh: it needs checkpoints/pretrain-rope)
#
# Environment: MVGPT_BUILD_DIR (default build), MVGPT_EPISODE_DIR (where the episode ran: its
# checkpoints/pretrain-rope and data/ are read; default the clone), MVGPT_LONG_STEPS (fine-tune
# steps, default 10 of 2 x 1,024 tokens), MVGPT_LONG_STREAMS (default 8). Writes
# checkpoints/rope-pi4/ and runs/long-context/ in the clone.
set -euo pipefail
source "$(dirname "$0")/apps_paths.sh"  # repo, build, bin
steps=${MVGPT_LONG_STEPS:-10}
streams=${MVGPT_LONG_STREAMS:-8}
episode=${MVGPT_EPISODE_DIR:-$repo}
base=$episode/checkpoints/pretrain-rope
data=$episode/data
[ -f "$base/best/config.json" ] || { echo "long_context.sh: no $base/best: run scripts/episode.sh first" >&2; exit 1; }
out=runs/long-context
mkdir -p "$out"
ctx=(--tokens "$data/valid.bin" --length 1024 --streams "$streams" --device cpu --no-plot)

# Position interpolation by 4, fine-tuned at the new block size: 10 steps x 2 x 1,024 = 20,480
# tokens (the 268-step pretraining saw 268 x 16 x 256 = 1,097,728: 1.9%), the rate well under the
# pretraining's peak so that ten steps adjust the model rather than retrain it.
SECONDS=0
"$bin/pretrain" --init-from "$base" --data "$data" --block-size 1024 --rope-scaling linear:4 --steps "$steps" --batch-size 2 \
  --lr 3e-4 --min-lr 3e-5 --eval-interval "$steps" --eval-windows 32 --device cpu --overwrite --out checkpoints/rope-pi4 \
  | tee "$out/finetune.log"
finetune_s=$SECONDS

# The three methods of the plain model past its window (the window method takes minutes).
SECONDS=0
"$bin/context" --ckpt "$base" "${ctx[@]}" --out-dir "$out/plain" | tee "$out/plain.txt"
plain_s=$SECONDS

# `full` scored from position 1 (--block-size 1 only moves where scoring starts for a rotary
# model), so one pass gives the loss inside the first 256 and past it. Linear by 4 without the
# fine-tune shows what the fine-tune is for.
declare -A full_s
run_full() {  # name, flags...
  local name=$1
  shift
  SECONDS=0
  "$bin/context" "$@" "${ctx[@]}" --methods full --block-size 1 --out-dir "$out/full-$name" > /dev/null
  full_s[$name]=$SECONDS
}
run_full plain --ckpt "$base"
run_full ntk4 --ckpt "$base" --rope-scaling ntk:4
run_full linear4-untrained --ckpt "$base" --rope-scaling linear:4
run_full pi4 --ckpt checkpoints/rope-pi4

# Mean of column 2 over positions [lo, hi) of a per-position CSV (each row a mean over the streams).
mean() { awk -F, -v lo="$2" -v hi="$3" 'NR > 1 && $1 >= lo && $1 < hi && $2 != "" { s += $2; n++ } END { printf "%.4f", s / n }' "$1"; }
{
  echo "context on $streams held-out streams of 1,024 tokens ($(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores)"
  echo "fine-tune (position interpolation by 4, block size 1,024): $steps steps x 2 x 1,024 tokens, ${finetune_s} s"
  echo "plain model, window / cache / full past 256: ${plain_s} s"
  cat "$out/plain.txt" | sed -n '/ window \| cache \| full /p'
  printf '%-34s %10s %10s %10s %6s\n' "full method" "1-255" "256-1023" "1-1023" "s"
  for name in plain ntk4 linear4-untrained pi4; do
    f="$out/full-$name/context_losses.csv"
    printf '%-34s %10s %10s %10s %6s\n' "$name" "$(mean "$f" 1 256)" "$(mean "$f" 256 1024)" "$(mean "$f" 1 1024)" "${full_s[$name]}"
  done
} | tee "$out/summary.txt"

# One CSV for the plot: per position, the plain model's window and each full run (means over the
# streams), then the same as centred means over 65 positions, each side of 256 on its own, so that
# every curve averages the same positions (one position's mean over 8 streams is too noisy to read).
awk -F, -v half=32 -v edge=256 '
  FNR == 1 { file++; next }
  { v[file, $1] = $2; if ($1 > last) last = $1 }
  END {
    printf "position,window,plain,ntk4,pi4,linear4_untrained,window_avg,plain_avg,ntk4_avg,pi4_avg,linear4_untrained_avg\n"
    for (p = 1; p <= last; p++) {
      line = p
      for (f = 1; f <= file; f++) line = line "," (((f, p) in v) ? v[f, p] : "")
      for (f = 1; f <= file; f++) {
        s = 0; n = 0
        for (q = p - half; q <= p + half; q++)
          if ((q < edge) == (p < edge) && (f, q) in v && v[f, q] != "") { s += v[f, q]; n++ }
        line = line "," ((f, p) in v && n > 0 ? sprintf("%.6f", s / n) : "")
      }
      print line
    }
  }' "$out/plain/context_losses.csv" "$out/full-plain/context_losses.csv" "$out/full-ntk4/context_losses.csv" \
     "$out/full-pi4/context_losses.csv" "$out/full-linear4-untrained/context_losses.csv" > "$out/long_context.csv"

if command -v gnuplot > /dev/null; then
  gnuplot -e "csv='$out/long_context.csv'" -e "out='$out/long_context.png'" "$repo/scripts/plot_long_context.gp"
  echo "plot: $out/long_context.png"
fi
