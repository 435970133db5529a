#!/usr/bin/env bash
# torch2-venv: today's PyTorch from PyPI in a virtual environment of its own, the second peer of
# bench/compare (which looks for it here by default). The wheel also pulls NVIDIA's CUDA libraries
# (a few GB): unused, PyTorch runs on the CPU here. Needs python3-venv and a network; no root.
#
#   bench/torch2-venv.sh [DIR]     (default ~/.cache/mvgpt/torch2-venv)
#
# Environment: MVGPT_TORCH2_VERSION (2.15.0, the version bench/compare's figures were taken with).
set -euo pipefail
dir=${1:-$HOME/.cache/mvgpt/torch2-venv}
version=${MVGPT_TORCH2_VERSION:-2.15.0}
if [ -e "$dir" ] && [ ! -x "$dir/bin/python3" ]; then
  echo "torch2-venv: $dir exists and is not a virtual environment: name another folder" >&2
  exit 1
fi
[ -x "$dir/bin/python3" ] || /usr/bin/python3 -m venv "$dir" ||
  { echo "torch2-venv: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
"$dir/bin/python3" -m pip install --quiet "torch==$version" numpy
echo "torch2-venv: $("$dir/bin/python3" -c 'import torch; print("torch", torch.__version__)') in $dir"
echo "  bench/compare finds it there (or pass --torch2 $dir/bin/python3)"
