#!/usr/bin/env bash
# gpu-check: the one command for a machine with an NVIDIA GPU (H100/H200 class). Builds mvgpt with
# CUDA, runs the whole test suite (its CUDA cases run every op on the GPU and compare it with the
# CPU; none may be skipped here), pretrains the RoPE model for two minutes on the GPU, and runs
# `context` on the GPU and on the CPU. Everything goes to one log. About 8 minutes on 16 cores.
#
#   scripts/gpu-check.sh [log]          (default: runs/gpu-check.log)
#
# Environment: MVGPT_BUILD_DIR (build-gpu), MVGPT_JOBS (nproc), MVGPT_DATA_DIR (the TinyStories
# folder with train.txt/valid.txt, used when data/ has no token files yet; prepare also looks in
# ../shared/data/tinystories), MVGPT_GPU_CHECK_MINUTES (2, the pretraining time).
set -uo pipefail
cd "$(dirname "$0")/.."
log=${1:-runs/gpu-check.log}
build=${MVGPT_BUILD_DIR:-build-gpu}
jobs=${MVGPT_JOBS:-$(nproc)}
minutes=${MVGPT_GPU_CHECK_MINUTES:-2}
run_dir=checkpoints/gpu-check-rope
mkdir -p "$(dirname "$log")"
exec > >(tee "$log") 2>&1

start=$SECONDS
failures=()
step() { printf '\n=== [%4d s] %s\n' $((SECONDS - start)) "$*"; }
# run NAME SECONDS CMD...: runs CMD under a time limit and records a failure by name.
run() {
  local name=$1 limit=$2
  shift 2
  echo "+ $*"
  timeout --signal=INT --kill-after=15 "$limit" "$@"
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "!!! $name failed (exit $rc$([ $rc -eq 124 ] && echo ', time limit'))"
    failures+=("$name")
  fi
  return $rc
}

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || echo "!!! nvidia-smi failed: is there a GPU?"
/usr/local/cuda/bin/nvcc --version | tail -2 || true
echo "cores: $(nproc), jobs: $jobs, commit: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (+ local changes)')"

step "configure (MVGPT_CUDA=ON)"
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
run configure 120 cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DMVGPT_CUDA=ON \
  -DMVGPT_BUILD_BENCH=OFF -DMVGPT_BUILD_EXAMPLES=OFF || exit 1

step "build"
run build 300 cmake --build "$build" -j "$jobs" || exit 1

step "tests (whole suite)"
run ctest 240 ctest --test-dir "$build" -j "$jobs" --output-on-failure --timeout 200

step "CUDA cases (each op on the GPU against the CPU; a skip here is a failure)"
cuda_out=$("$build/tests/test_backends" --gtest_filter='*cuda_*:CudaOnly.*:CudaDevice.*' --gtest_brief=1 2>&1)
echo "$cuda_out" | tail -40
if echo "$cuda_out" | grep -q 'SKIPPED'; then
  echo "!!! CUDA cases were skipped: the GPU was not usable"
  failures+=("cuda-skipped")
fi

step "data"
if [ ! -f data/train.bin ] || [ ! -f data/valid.bin ] || [ ! -f data/tokenizer.json ]; then
  run prepare 150 "$build/apps/prepare" --out data
else
  echo "data/ already has train.bin, valid.bin and tokenizer.json"
fi

step "pretrain the RoPE model for $minutes minutes on cuda"
run pretrain $((minutes * 60 + 90)) "$build/apps/pretrain" --rope --minutes "$minutes" --device cuda \
  --out "$run_dir" --overwrite

step "context on cuda"
run context-cuda 90 "$build/apps/context" --ckpt "$run_dir" --device cuda --streams 4 --no-plot \
  --out-dir runs/gpu-check-context-cuda

step "context on cpu"
run context-cpu 90 "$build/apps/context" --ckpt "$run_dir" --device cpu --streams 1 --no-plot \
  --out-dir runs/gpu-check-context-cpu

step "done"
if [ ${#failures[@]} -eq 0 ]; then
  echo "gpu-check: all steps passed in $((SECONDS - start)) s; log in $log"
else
  echo "gpu-check: FAILED steps: ${failures[*]} ($((SECONDS - start)) s); log in $log"
  exit 1
fi
