#!/usr/bin/env bash
# Regenerate tests/fixtures/llama2c/ from a llama2.c checkout (see that folder's README.md).
#
#   scripts/llama2c_fixtures/make_fixtures.sh [LLAMA2C_DIR] [COMMIT]
#
#   LLAMA2C_DIR  a llama2.c work tree OUTSIDE this project (default /tmp/llama2c); cloned from
#                $LLAMA2C_REPO (default https://github.com/karpathy/llama2.c.git) if absent
#   COMMIT       default 350e04fe35433e6d2941dce5a1f53308f87058eb
# Environment:
#   STORIES  TinyStories text (default /work/shared/data/tinystories/train.txt, read in place)
#   WORK     scratch folder (default /tmp/llama2c_fixtures_work; wiped)
#   PYTHON   python with torch + numpy + sentencepiece (default /usr/bin/python3)
#
# Nothing from llama2.c is copied into the project except the files it produces
# (tokenizer.bin is llama2.c's own file, kept as a fixture).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
L2C="${1:-/tmp/llama2c}"
COMMIT="${2:-350e04fe35433e6d2941dce5a1f53308f87058eb}"
LLAMA2C_REPO="${LLAMA2C_REPO:-https://github.com/karpathy/llama2.c.git}"
STORIES="${STORIES:-/work/shared/data/tinystories/train.txt}"
WORK="${WORK:-/tmp/llama2c_fixtures_work}"
PYTHON="${PYTHON:-/usr/bin/python3}"
FX="$ROOT/tests/fixtures/llama2c"
NICE="nice -n 10"

case "$(cd "$(dirname "$L2C")" 2>/dev/null && pwd)/" in
  "$ROOT"/*) echo "LLAMA2C_DIR must be outside the project" >&2; exit 1 ;;
esac
if [ ! -d "$L2C/.git" ]; then
  git clone -q "$LLAMA2C_REPO" "$L2C"
fi
git -C "$L2C" checkout -q "$COMMIT"
[ "$(git -C "$L2C" rev-parse HEAD)" = "$COMMIT" ] || { echo "checkout failed" >&2; exit 1; }
[ -z "$(git -C "$L2C" status --porcelain --untracked-files=no)" ] || { echo "$L2C has local changes" >&2; exit 1; }

rm -rf "$WORK"; mkdir -p "$WORK" "$FX"
echo "== versions"
gcc --version | head -1
$PYTHON -c 'import sys, torch, numpy, sentencepiece; print("python", sys.version.split()[0], "torch", torch.__version__, "numpy", numpy.__version__, "sentencepiece", sentencepiece.__version__)'

echo "== build run.c and the harness (plain -O2: no -Ofast, no OpenMP)"
$NICE gcc -O2 -o "$WORK/run" "$L2C/run.c" -lm
$NICE gcc -O2 -I"$L2C" -o "$WORK/harness" "$HERE/harness.c" -lm

echo "== 1. llama2.c's tokenizer.bin"
cp "$L2C/tokenizer.bin" "$FX/tokenizer.bin"

echo "== 2. tok512: sentencepiece BPE as tinystories.py train_vocab, exported by tokenizer.py"
$NICE $PYTHON "$HERE/train_tok.py" "$L2C" "$STORIES" "$WORK" > "$WORK/train_tok.log" 2>&1 || { tail -20 "$WORK/train_tok.log"; exit 1; }
tail -2 "$WORK/train_tok.log"
cp "$WORK/tok512.bin" "$WORK/tok512.model" "$FX/"

echo "== 3. tiny models: model.py + export.py"
$NICE $PYTHON "$HERE/train_tiny.py" "$L2C" "$STORIES" "$WORK/tok512.model" "$FX" "$WORK"

echo "== 4-5. encode / generate / run.c fixtures"
$NICE $PYTHON "$HERE/run_fixtures.py" "$L2C" "$WORK" "$FX"

echo "== cross-check against llama2.c's PyTorch model"
$NICE $PYTHON "$HERE/verify_torch.py" "$L2C" "$WORK" "$FX"

echo "== sizes and sha256"
(cd "$FX" && du -ab . | sort -k2 && sha256sum *.bin *.model)
