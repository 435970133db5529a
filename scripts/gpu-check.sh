#!/usr/bin/env bash
# gpu-check: the one command for a machine with an NVIDIA GPU (H100/H200 class). Builds mvgpt with
# CUDA (nvcc warnings are errors here), runs the whole test suite, then the CUDA cases on their own
# (each op and each model path on the GPU against the CPU: a skip there is a failure, except tests
# that skip *because* a GPU is present), the op cases under compute-sanitizer (memcheck, racecheck),
# pretrains the RoPE model on the GPU, generates with it on the GPU, and compares `evaluate --json`
# and `context --json` losses on cuda with cpu. Every step runs under a time limit and its exit code
# counts. Ends with one table of the steps; exit 1 when any failed. Its limits add up to well over
# 10 minutes, but it is meant to take under 10 on one H100/H200 with 16 cores (not yet measured: no
# GPU machine has run it); the table's last row says whether it did.
#
#   scripts/gpu-check.sh [log]          (default: runs/gpu-check.log)
#
# Environment: MVGPT_BUILD_DIR (build-gpu), MVGPT_JOBS (nproc), MVGPT_DATA_DIR (the TinyStories
# folder with train.txt/valid.txt, used when data/ has no token files yet; prepare also looks in
# ../shared/data/tinystories), MVGPT_GPU_CHECK_MINUTES (1, the pretraining time),
# MVGPT_GPU_CHECK_LOSS_TOL (1e-3, the largest |loss(cuda) - loss(cpu)| accepted).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
log=${1:-runs/gpu-check.log}
build=${MVGPT_BUILD_DIR:-build-gpu}
jobs=${MVGPT_JOBS:-$(nproc)}
minutes=${MVGPT_GPU_CHECK_MINUTES:-1}
loss_tol=${MVGPT_GPU_CHECK_LOSS_TOL:-1e-3}
run_dir=checkpoints/gpu-check-rope
work=runs/gpu-check
mkdir -p "$(dirname "$log")" "$work"
exec > >(tee "$log") 2>&1

start=$SECONDS
rows=()      # "step|result|seconds|note" for the summary table
failed=0
step() { printf '\n=== [%4d s] %s\n' $((SECONDS - start)) "$*"; }
# record NAME RESULT SECONDS NOTE: one row of the table; any result but PASS, SKIP or SLOW fails the check.
record() {
  rows+=("$1|$2|$3|$4")
  case $2 in PASS | SKIP | SLOW) ;; *) failed=1 ;; esac
}
# run NAME SECONDS CMD...: runs CMD under a time limit; records PASS or FAIL (exit code, time limit).
# Returns CMD's exit code. The note of a passing step is $note when set.
run() {
  local name=$1 limit=$2
  shift 2
  echo "+ $*"
  local t0=$SECONDS
  timeout --signal=INT --kill-after=15 "$limit" "$@"
  local rc=$?
  if [ $rc -eq 0 ]; then
    record "$name" PASS $((SECONDS - t0)) "${note:-}"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    record "$name" FAIL $((SECONDS - t0)) "time limit ${limit} s"
  else
    record "$name" FAIL $((SECONDS - t0)) "exit $rc"
  fi
  note=
  return $rc
}
# gtest_skips JSON: prints "name: message" for each skipped test whose message does not say that it
# skips because a GPU is present (those are written for machines without one).
gtest_skips() {
  python3 - "$1" <<'EOF'
import json, sys
try:
    report = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"(no gtest report: {e})")
    sys.exit(0)
for suite in report.get("testsuites", []):
    for t in suite.get("testsuite", []):
        if t.get("result") != "SKIPPED" and t.get("status") != "NOTRUN":
            continue
        msg = " ".join(s.get("message", "") for s in t.get("skipped", []) + t.get("failures", []))
        if "a GPU is present" in msg:
            continue
        print(f"{suite['name']}.{t['name']}: {msg.strip()[:200]}")
EOF
}
# gtest_cases NAME SECONDS BINARY FILTER: runs the CUDA cases of one test binary; fails on any failure,
# on no test run, and on any skip (the GPU must be usable for every one of them).
gtest_cases() {
  local name=$1 limit=$2 bin=$3 filter=$4 json=$work/$1.json
  rm -f "$json"
  run "$name" "$limit" "$bin" --gtest_filter="$filter" --gtest_brief=1 --gtest_output="json:$json" || return 1
  local skips count last secs
  skips=$(gtest_skips "$json")
  count=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['tests'])" "$json" 2>/dev/null || echo 0)
  last=${rows[${#rows[@]}-1]}
  secs=$(echo "$last" | cut -d'|' -f3)
  unset 'rows[${#rows[@]}-1]'
  if [ "$count" = 0 ]; then
    record "$name" FAIL "$secs" "no test matched $filter"
  elif [ -n "$skips" ]; then
    echo "!!! skipped on a GPU machine:"
    echo "$skips"
    record "$name" FAIL "$secs" "$(echo "$skips" | wc -l) of $count skipped"
  else
    record "$name" PASS "$secs" "$count tests, none skipped"
  fi
}
# loss_diff A.json B.json: the largest |loss| difference of rows with the same model (and method).
loss_diff() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
key = lambda r: (r.get("model"), r.get("method"), r.get("position", r.get("length")))
bm = {key(r): r for r in b}
worst, n = 0.0, 0
for r in a:
    o = bm.get(key(r))
    if o is None or "loss" not in r:
        continue
    worst, n = max(worst, abs(r["loss"] - o["loss"])), n + 1
print(f"{worst:.3g} {n}")
EOF
}
# compare NAME CUDA.json CPU.json: records PASS when every loss agrees within $loss_tol.
compare() {
  local out worst n
  out=$(loss_diff "$2" "$3" 2>&1) || {
    record "$1" FAIL - "cannot compare: $out"
    return
  }
  read -r worst n <<< "$out"
  if [ "${n:-0}" -gt 0 ] && python3 -c "import sys; sys.exit(0 if float('$worst') <= float('$loss_tol') else 1)"; then
    record "$1" PASS - "max |loss(cuda) - loss(cpu)| = $worst over $n rows (tolerance $loss_tol)"
  else
    record "$1" FAIL - "max |loss(cuda) - loss(cpu)| = $worst over ${n:-0} rows (tolerance $loss_tol)"
  fi
}

step "machine"
gpus=0
if nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; then
  gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
  record machine PASS - "$gpus GPU(s): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
else
  record machine FAIL - "nvidia-smi failed: no GPU or no driver"
fi
/usr/local/cuda/bin/nvcc --version | tail -2 || true
# The gtest reports and the loss comparisons are read with python3.
command -v python3 > /dev/null || record python3 FAIL - "python3 not found: the CUDA steps' reports cannot be read"
echo "cores: $(nproc), jobs: $jobs, commit: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (+ local changes)')"

step "configure (MVGPT_CUDA=ON, nvcc warnings are errors)"
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
built=1
run configure 180 cmake -S . -B "$build" "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DMVGPT_CUDA=ON -DMVGPT_CUDA_WERROR=ON -DMVGPT_BUILD_BENCH=OFF || built=0

if [ $built = 1 ]; then
  step "build"
  run build 420 cmake --build "$build" -j "$jobs" || built=0
fi

if [ $built = 1 ]; then
  step "tests (whole suite)"
  note="see the skips below" run ctest 300 bash -c \
    "ctest --test-dir '$build' -j $jobs --output-on-failure --timeout 240 2>&1 | tee '$work/ctest.out'; exit \${PIPESTATUS[0]}"
  skipped=$(grep -c '(Skipped)' "$work/ctest.out")
  last=${rows[${#rows[@]}-1]}
  rows[${#rows[@]}-1]="${last%|*}|$skipped skipped (no GPU-less reason allowed in the CUDA steps below)"

  step "CUDA cases: every op and every model path on the GPU against the CPU (a skip is a failure)"
  gtest_cases cuda-ops 180 "$build/tests/test_backends" '*cuda_*:CudaOnly.*:CudaDevice.*:DeviceCoverage.*'
  gtest_cases cuda-model 180 "$build/tests/test_mvgpt" '*ModelOnDevice*cuda_*'
  gtest_cases cuda-apps 240 "$build/tests/test_apps" '*AppsOnDevice*cuda'

  step "compute-sanitizer over the CUDA op cases"
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ -x "$sanitizer" ]; then
    # memcheck over every op case; racecheck (shared-memory hazards) over the kernels that use it.
    note="no errors" run sanitizer-memcheck 150 "$sanitizer" --tool memcheck --error-exitcode 99 \
      "$build/tests/test_backends" --gtest_filter='Devices/OpOnDevice.*/cuda_*' --gtest_brief=1
    shared='*cuda_reduce*:*cuda_softmax:*cuda_layer_norm:*cuda_rms_norm:*cuda_attention:*cuda_cross_entropy:*cuda_norms_wide'
    note="no errors" run sanitizer-racecheck 150 "$sanitizer" --tool racecheck --error-exitcode 99 \
      "$build/tests/test_backends" --gtest_filter="$shared" --gtest_brief=1
  else
    record sanitizer FAIL - "compute-sanitizer not found (part of the CUDA toolkit: cuda-sanitizer package)"
  fi

  step "NCCL (data parallel over GPUs)"
  if [ "$gpus" -ge 2 ]; then
    gtest_cases nccl 240 "$build/tests/test_dist" 'NcclRanks.*'
  else
    record nccl SKIP - "$gpus GPU(s): the NCCL tests need 2"
  fi

  step "data"
  if [ ! -f data/train.bin ] || [ ! -f data/valid.bin ] || [ ! -f data/tokenizer.json ]; then
    run prepare 180 "$build/apps/prepare" --out data
  else
    record prepare PASS 0 "data/ already has train.bin, valid.bin and tokenizer.json"
  fi

  step "pretrain the RoPE model for $minutes minute(s) on cuda"
  if run pretrain $((minutes * 60 + 120)) "$build/apps/pretrain" --rope --minutes "$minutes" --device cuda \
    --out "$run_dir" --overwrite; then
    step "generate on cuda"
    note="a story from the trained model" run generate-cuda 60 "$build/apps/generate" --ckpt "$run_dir" --device cuda \
      --prompt "Once upon a time" --max-new-tokens 200 --seed 1

    step "evaluate --json on cuda and on cpu"
    run evaluate-cuda 90 bash -c "'$build/apps/evaluate' --ckpt '$run_dir' --device cuda --json --max-windows 64 > '$work/evaluate-cuda.json'" &&
      run evaluate-cpu 180 bash -c "'$build/apps/evaluate' --ckpt '$run_dir' --device cpu --json --max-windows 64 > '$work/evaluate-cpu.json'" &&
      compare evaluate-cuda-vs-cpu "$work/evaluate-cuda.json" "$work/evaluate-cpu.json"

    step "context --json on cuda and on cpu"
    run context-cuda 120 bash -c "'$build/apps/context' --ckpt '$run_dir' --device cuda --streams 2 --no-plot --json --out-dir '$work/context-cuda' > '$work/context-cuda.json'" &&
      run context-cpu 240 bash -c "'$build/apps/context' --ckpt '$run_dir' --device cpu --streams 2 --no-plot --json --out-dir '$work/context-cpu' > '$work/context-cpu.json'" &&
      compare context-cuda-vs-cpu "$work/context-cuda.json" "$work/context-cpu.json"
  fi
fi

step "summary"
total=$((SECONDS - start))
if [ $total -le 600 ]; then
  record total PASS $total "within the 10 minutes"
else
  record total SLOW $total "over the 10 minutes this check should take"
fi
printf '%-22s %-6s %6s  %s\n' step result secs note
printf '%-22s %-6s %6s  %s\n' ---- ------ ---- ----
for r in "${rows[@]}"; do
  IFS='|' read -r name result secs rnote <<< "$r"
  printf '%-22s %-6s %6s  %s\n' "$name" "$result" "$secs" "$rnote"
done
if [ $failed = 0 ]; then
  echo "gpu-check: all steps passed in $((SECONDS - start)) s; log in $log"
else
  echo "gpu-check: FAILED ($((SECONDS - start)) s); log in $log"
  exit 1
fi
