#!/usr/bin/env bash
# gpu-check: the one command for a machine with an NVIDIA GPU (H100/H200 class), made for a bare,
# offline one: with --bundle (scripts/gpu-bundle.sh's folder) it takes every library it builds
# against from that folder's .deb files, unpacked into a private prefix (never into /), and the
# stories from it too. It builds only the targets it runs, with CUDA for this GPU (nvcc warnings are
# errors), then:
#   - the CUDA cases of every primitive op, every fused unit, every model path and the apps, on the
#     GPU against the CPU, with MVGPT_REQUIRE_CUDA=1 (a case that cannot reach the GPU fails instead
#     of skipping; the skips allowed are the tests of the no-GPU behaviour, which skip because a
#     GPU is present);
#   - the op and fused-unit CUDA cases under compute-sanitizer's memcheck and racecheck, with
#     MVGPT_CUDA_ALLOCATOR=direct (every tensor its own cudaMalloc, so that memcheck sees its bounds);
#   - prepare, pretraining the RoPE model for a minute on the GPU, generate on the GPU, and the
#     losses of `evaluate --json` and `context --json` on cuda against cpu.
# The sanitizers run beside the data and training steps. Every step has a time limit and fails when
# it ran no test. Ends with one table of the steps (also in OUT/summary.txt); exit 1 when any failed.
# Aim: under 8 minutes on 16 cores, build included (the table's last row says).
#
#   scripts/gpu-check.sh [--bundle DIR] [--out DIR] [--build-only | --bench-only]
#
#   --bundle DIR   the folder scripts/gpu-bundle.sh made (default: the system's own packages)
#   --out DIR      where the log and the table go, at most 8 files (default runs/gpu-check); it must
#                  be new, empty or an earlier gpu-check's output
#   --build-only   stop after the build and the check of where its libraries came from (for a
#                  machine without a GPU: how docs/cuda.md shows the bundle is all the build takes)
#   --bench-only   instead of the checks, build mvgpt_bench and run bench/compare --device cuda
#                  against the machine's PyTorch (MVGPT_TORCH_PYTHON, default /opt/torch/.venv/bin/
#                  python3), its table into OUT/compare-cuda.txt: a second call after the check, into
#                  an --out of its own (it replaces the log and the table there)
#
# Environment: MVGPT_BUILD_DIR (build-gpu), MVGPT_JOBS (nproc), MVGPT_DATA_DIR (without --bundle:
# the TinyStories folder; prepare also looks in ../shared/data/tinystories), MVGPT_GPU_CHECK_MINUTES
# (1, the pretraining time), MVGPT_GPU_CHECK_LOSS_TOL (1e-3, the largest |loss(cuda) - loss(cpu)|),
# MVGPT_GPU_CHECK_ARCH (the CUDA architectures: native where a GPU answers, else 90).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

usage() { sed -n '19,29p' "$0" | sed 's/^# \{0,1\}//'; }
bundle= out=runs/gpu-check build_only=0 bench_only=0
while [ $# -gt 0 ]; do
  case $1 in
    --bundle) bundle=${2:?--bundle needs a folder}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --build-only) build_only=1; shift ;;
    --bench-only) bench_only=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

build=${MVGPT_BUILD_DIR:-build-gpu}
jobs=${MVGPT_JOBS:-$(nproc)}
minutes=${MVGPT_GPU_CHECK_MINUTES:-1}
loss_tol=${MVGPT_GPU_CHECK_LOSS_TOL:-1e-3}
budget=480  # seconds: the 8 minutes this check should take on 16 cores
# Every step ends by this many seconds after the start, whatever its own limit: the device tool stops
# a command at 600 s, and a check cut off from outside would leave no table.
deadline=${MVGPT_GPU_CHECK_DEADLINE:-560}

[ $build_only = 1 ] && [ $bench_only = 1 ] && { echo "gpu-check: --build-only or --bench-only, not both" >&2; exit 2; }
torch_py=${MVGPT_TORCH_PYTHON:-/opt/torch/.venv/bin/python3}
system_ld_path=${LD_LIBRARY_PATH-}  # PyTorch's, without the bundle's libraries put first below

# The output folder holds only what this script writes (7 files); an earlier run's are replaced.
outputs=(gpu-check.log summary.txt evaluate-cuda.json evaluate-cpu.json context-cuda.json context-cpu.json compare-cuda.txt)
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2> /dev/null)" ]; then
  for f in "$out"/* "$out"/.[!.]*; do
    [ -e "$f" ] || continue
    case " ${outputs[*]} " in *" $(basename "$f") "*) ;; *)
      echo "gpu-check: $out holds $(basename "$f"), which this check does not write: name a new or empty --out folder" >&2
      exit 2 ;;
    esac
  done
fi
mkdir -p "$out" || { echo "gpu-check: cannot make --out folder $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
rm -f "${outputs[@]/#/$out/}"
if [ -n "$bundle" ]; then
  [ -f "$bundle/MANIFEST" ] || { echo "gpu-check: $bundle has no MANIFEST: make it with scripts/gpu-bundle.sh" >&2; exit 2; }
  bundle=$(cd "$bundle" && pwd)
fi

work=$build/gpu-check  # the check's own files (gtest output, data, the trained model): this script's alone
rm -rf "$work"
mkdir -p "$work"
rows=$work/rows  # "step|result|seconds|note", one line a step
: > "$rows"
exec > >(tee "$out/gpu-check.log") 2>&1
tee_pid=$!
trap 'exec 1>&- 2>&-; wait $tee_pid' EXIT  # the log complete before the caller collects --out

start=$SECONDS
step() { printf '\n=== [%4d s] %s\n' $((SECONDS - start)) "$*"; }
# table: the steps so far, as summary.txt holds them.
table() {
  echo "# mvgpt gpu-check, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2> /dev/null)$([ -n "$bundle" ] && echo ", bundle $bundle")"
  printf '%-22s %-6s %6s  %s\n' step result secs note
  printf '%-22s %-6s %6s  %s\n' ---- ------ ---- ----
  while IFS='|' read -r name result secs rnote; do
    printf '%-22s %-6s %6s  %s\n' "$name" "$result" "$secs" "$rnote"
  done < "$rows"
}
# record NAME RESULT SECONDS NOTE: one row of the table; any result but PASS, SKIP or SLOW fails.
# summary.txt is rewritten with each row, so a run stopped from outside still leaves its table; each
# writer (the sanitizer tracks run beside the main one) renames a whole table of its own into place.
record() {
  echo "$1|$2|$3|$4" >> "$rows"
  table > "$work/summary.$BASHPID" && mv -f "$work/summary.$BASHPID" "$out/summary.txt"
}
# limit_for SECONDS: a step's time limit, cut to what is left before the deadline (at least 1).
limit_for() {
  local left=$((deadline - (SECONDS - start)))
  echo $(($1 < left ? $1 : (left > 1 ? left : 1)))
}
# run NAME SECONDS CMD...: CMD under a time limit; records PASS (note: $note) or FAIL. Returns its code.
run() {
  local name=$1 limit
  limit=$(limit_for "$2")
  shift 2
  echo "+ $*"
  local t0=$SECONDS
  if declare -F "$1" > /dev/null; then  # a function of this script: in a bash of its own (exported)
    timeout --signal=INT --kill-after=15 "$limit" bash -c '"$@"' bash "$@"
  else
    timeout --signal=INT --kill-after=15 "$limit" "$@"
  fi
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

# The skips a GPU machine may show: tests of the no-GPU errors, which skip when a GPU is present.
allowed_skips=(CudaDevice.WithoutGpuRequestsFailClearly CudaDevice.LaunchCounterStaysAtZeroWithoutAGpu)
# gtest_summary FILE: "RAN FAILED SKIPPED_NAMES..." from GoogleTest's closing lines (1.12 lists the
# skipped tests there by name, though not in --gtest_brief mode, and writes no skip messages).
gtest_summary() {
  local ran failed
  ran=$(sed -n 's/^\[==========\] \([0-9][0-9]*\) tests\{0,1\} from .* ran\..*/\1/p' "$1" | tail -1)
  failed=$(sed -n 's/^\[  FAILED  \] \([0-9][0-9]*\) tests\{0,1\}, listed below:.*/\1/p' "$1" | tail -1)
  echo "${ran:-0}" "${failed:-0}" $(sed -n 's/^\[  SKIPPED \] \([^ ]*\)$/\1/p' "$1" | sort -u)
}
# gtest_step NAME SECONDS BINARY FILTER [PREFIX...]: runs one binary's cases matching FILTER (under
# PREFIX, e.g. a sanitizer) with MVGPT_REQUIRE_CUDA=1; fails on any failure, on no test run and on
# a skip that is not allowed.
gtest_step() {
  local name=$1 limit bin=$3 filter=$4 log=$work/$1.out
  limit=$(limit_for "$2")
  shift 4
  echo "+ $* $bin --gtest_filter=$filter"
  local t0=$SECONDS
  MVGPT_REQUIRE_CUDA=1 timeout --signal=INT --kill-after=15 "$limit" "$@" "$bin" --gtest_filter="$filter" \
    > "$log" 2>&1
  local rc=$? secs=$((SECONDS - t0))
  grep -v '^\[ RUN      \]\|^\[       OK \]' "$log"  # what failed or was skipped, and the totals
  local summary ran failed skipped bad=()
  summary=$(gtest_summary "$log")
  read -r ran failed skipped <<< "$summary"
  for s in $skipped; do
    case " ${allowed_skips[*]} " in *" $s "*) ;; *) bad+=("$s") ;; esac
  done
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    record "$name" FAIL $secs "time limit $limit s ($ran tests had run)"
  elif [ "$ran" = 0 ]; then
    record "$name" FAIL $secs "no test ran (filter $filter, exit $rc)"
  elif [ $rc -ne 0 ]; then
    record "$name" FAIL $secs "exit $rc: $failed of $ran failed$(grep -o '\(ERROR\|RACECHECK\) SUMMARY: [1-9][0-9]* [a-z]*' "$log" | tail -1 | sed 's/^/; /')"
  elif [ ${#bad[@]} -gt 0 ]; then
    record "$name" FAIL $secs "${#bad[@]} of $ran skipped: ${bad[*]:0:3}"
  else
    record "$name" PASS $secs "$ran tests$([ -n "$skipped" ] && echo ", allowed skips: $skipped")"
  fi
}
# loss_diff A.json B.json: the largest |loss| difference of rows with the same model (and method).
loss_diff() {
  python3 - "$1" "$2" << 'EOF'
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
# compare NAME CUDA.json CPU.json: PASS when every loss agrees within $loss_tol.
compare() {
  local res worst n
  res=$(loss_diff "$2" "$3" 2>&1) || {
    record "$1" FAIL - "cannot compare: $res"
    return
  }
  read -r worst n <<< "$res"
  if [ "${n:-0}" -gt 0 ] && python3 -c "import sys; sys.exit(0 if float('$worst') <= float('$loss_tol') else 1)"; then
    record "$1" PASS - "max |loss(cuda) - loss(cpu)| = $worst over $n rows (tolerance $loss_tol)"
  else
    record "$1" FAIL - "max |loss(cuda) - loss(cpu)| = $worst over ${n:-0} rows (tolerance $loss_tol)"
  fi
}

step "machine"
gpus=0
if nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2> /dev/null; then
  gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
  record machine PASS - "$gpus GPU(s): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
elif [ $build_only = 1 ]; then
  record machine SKIP - "no GPU answers (nvidia-smi): --build-only"
else
  record machine FAIL - "nvidia-smi failed: no GPU or no driver"
fi
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$nvcc" --version | tail -2 || true
command -v python3 > /dev/null || record python3 FAIL - "python3 not found: the loss comparisons need it"
echo "cores: $(nproc), jobs: $jobs, commit: $(git rev-parse --short HEAD 2> /dev/null)$(git diff --quiet 2> /dev/null || echo ' (+ local changes)')"
arch=${MVGPT_GPU_CHECK_ARCH:-$([ "$gpus" -gt 0 ] && echo native || echo 90)}

# The bundle's packages, unpacked into a private prefix; CMake finds them through CMAKE_PREFIX_PATH
# and the programs through LD_LIBRARY_PATH.
cmake_deps=()
if [ -n "$bundle" ]; then
  step "bundle: check and unpack $bundle"
  prefix=$PWD/$build/bundle-prefix runtime=$PWD/$build/bundle-runtime
  unpack() {  # unpack DEB DIR: dpkg-deb where there is one, else ar and tar (the same data)
    if command -v dpkg-deb > /dev/null; then
      dpkg-deb -x "$1" "$2"
    else
      local t
      t=$(mktemp -d) && (cd "$t" && ar x "$1" && tar -xf data.tar.* -C "$2") && rm -rf "$t"
    fi
  }
  unpack_all() {
    (cd "$bundle" && grep -v '^#' MANIFEST | sha256sum --quiet -c -) || {
      echo "the bundle's files do not match its MANIFEST"
      return 1
    }
    rm -rf "$prefix" "$runtime" "$runtime-lib" && mkdir -p "$prefix" "$runtime" "$runtime-lib" || return 1
    local d
    for d in "$bundle"/debs/*.deb; do unpack "$d" "$prefix" || return 1; done
    for d in "$bundle"/runtime/*.deb; do unpack "$d" "$runtime" || return 1; done
    # Debian's OpenBLASConfig.cmake names its files by absolute /usr paths: point it at the prefix.
    sed -i "s#/usr/#$prefix/usr/#g" "$prefix"/usr/lib/x86_64-linux-gnu/openblas-pthread/cmake/openblas/OpenBLASConfig.cmake
    # Run-time libraries go on the path only where the system has none of its own (a newer system
    # copy must not be shadowed by Debian 12's).
    local lib
    for lib in "$runtime"/usr/lib/x86_64-linux-gnu/lib*.so.*; do
      [ -L "$lib" ] || continue  # the soname's link (libgomp.so.1), not the file it names
      ldconfig -p 2> /dev/null | grep -q "^[[:space:]]$(basename "$lib") (libc6,x86-64" ||
        ln -sf "$(readlink -f "$lib")" "$runtime-lib/$(basename "$lib")"
    done
    echo "run-time libraries the system lacks, taken from the bundle: $(ls "$runtime-lib" | tr '\n' ' ')"
  }
  export bundle prefix runtime
  export -f unpack unpack_all
  note="$(ls "$bundle"/debs | wc -l) packages into $build/bundle-prefix" run bundle 60 unpack_all || bundle_failed=1
  export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu:$prefix/usr/lib/x86_64-linux-gnu/openblas-pthread:$runtime-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  cmake_deps=(--fresh "-DCMAKE_PREFIX_PATH=$prefix/usr"
    "-DOpenBLAS_DIR=$prefix/usr/lib/x86_64-linux-gnu/openblas-pthread/cmake/openblas")
fi

built=${bundle_failed:+0}
built=${built:-1}
if [ "$built" = 1 ]; then
  step "configure (MVGPT_CUDA=ON for $arch, nvcc warnings are errors)"
  generator=()
  command -v ninja > /dev/null && generator=(-G Ninja)
  launcher=()
  command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  run configure 120 cmake -S . -B "$build" "${generator[@]}" "${launcher[@]}" "${cmake_deps[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc" -DMVGPT_CUDA=ON -DMVGPT_CUDA_WERROR=ON \
    -DMVGPT_CUDA_ARCHITECTURES="$arch" -DMVGPT_BUILD_BENCH=$([ $bench_only = 1 ] && echo ON || echo OFF) || built=0
fi
if [ "$built" = 1 ]; then
  if [ $bench_only = 1 ]; then
    step "build (mvgpt_bench)"
    targets=(mvgpt_bench)
  else
    step "build (the test binaries with CUDA cases, and the apps)"
    targets=(test_backends test_fused test_mvgpt test_apps prepare pretrain generate evaluate context)
    [ "$gpus" -ge 2 ] && targets+=(test_dist)
  fi
  # 300 s on 16 cores; longer on fewer (a --build-only proof on a small machine).
  run build $((jobs >= 16 ? 300 : 300 * 16 / jobs)) cmake --build "$build" -j "$jobs" --target "${targets[@]}" || built=0
fi

if [ "$built" = 1 ] && [ -n "$bundle" ]; then
  step "where the build's libraries came from (all from the bundle's prefix)"
  # deps_from_bundle: CMake found each package in the prefix, and each program loads them from it.
  deps_from_bundle() {
    local bad=0 v path lib
    local vars=(OpenBLAS_DIR TBB_DIR GTest_DIR nlohmann_json_DIR CLI11_DIR MVGPT_DNNL_INCLUDE_DIR MVGPT_DNNL_LIBRARY)
    local bins=("$build/tests/test_backends" "$build/apps/pretrain")
    if [ "$bench_only" = 1 ]; then
      vars+=(benchmark_DIR)
      bins=("$build/bench/mvgpt_bench")
    fi
    for v in "${vars[@]}"; do
      path=$(sed -n "s/^$v:[A-Z]*=//p" "$build/CMakeCache.txt")
      echo "$v = $path"
      case $path in "$prefix"/*) ;; *) echo "  not from the bundle"; bad=1 ;; esac
    done
    for bin in "${bins[@]}"; do
      for lib in libopenblas libtbb.so libdnnl; do
        path=$(ldd "$bin" | awk -v l="$lib" 'index($1, l) == 1 {print $3}')
        echo "$(basename "$bin"): $lib -> ${path:-(not loaded)}"
        case $path in "$prefix"/*) ;; *) bad=1 ;; esac
      done
      ldd "$bin" | grep -q 'not found' && { ldd "$bin" | grep 'not found'; bad=1; }
    done
    return $bad
  }
  export build prefix bench_only
  export -f deps_from_bundle
  note="CMake's packages and ldd's libraries all in $build/bundle-prefix" run deps-from-bundle 30 deps_from_bundle
fi

if [ "$built" = 1 ] && [ $bench_only = 1 ]; then
  step "bench/compare --device cuda: mvgpt against PyTorch eager bf16 on this GPU"
  if [ -x "$torch_py" ]; then
    export MVGPT_TORCH_LD_LIBRARY_PATH=$system_ld_path
    note="the table in compare-cuda.txt" run bench-vs-torch 420 bash -c \
      "'$torch_py' bench/compare --device cuda --rounds 2 --bench '$build/bench/mvgpt_bench' --torch2 '$torch_py' > '$out/compare-cuda.txt'"
    cat "$out/compare-cuda.txt" 2> /dev/null
  else
    record bench-vs-torch FAIL - "no PyTorch python at $torch_py (set MVGPT_TORCH_PYTHON)"
  fi
elif [ "$built" = 1 ] && [ $build_only = 0 ]; then
  step "CUDA cases: every op, fused unit, model path and app on the GPU against the CPU"
  gtest_step cuda-ops 150 "$build/tests/test_backends" '*cuda*:*Cuda*'
  gtest_step cuda-fused 120 "$build/tests/test_fused" '*OnDevice*cuda*:*Cuda*'
  gtest_step cuda-model 150 "$build/tests/test_mvgpt" '*OnDevice*cuda*'
  gtest_step cuda-apps 180 "$build/tests/test_apps" '*OnDevice*cuda*'

  # The sanitizers beside the data and training steps, memcheck and racecheck each in a background
  # track of its own (the GPU has room for all three); their rows and output join the log at the end.
  step "compute-sanitizer (memcheck, racecheck) over every op's and fused unit's CUDA cases, in the background"
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
    /usr/local/cuda/compute-sanitizer/compute-sanitizer 2> /dev/null | head -1)
  tracks=()
  if [ -z "$sanitizer" ]; then
    record sanitizers FAIL - "compute-sanitizer not found (the CUDA toolkit's cuda-sanitizer package)"
  else
    for tool in memcheck racecheck; do
      (
        exec > "$work/$tool.log" 2>&1
        export MVGPT_CUDA_ALLOCATOR=direct
        gtest_step "$tool-ops" 180 "$build/tests/test_backends" 'Devices/OpOnDevice.*/cuda_*' \
          "$sanitizer" --tool "$tool" --error-exitcode 99
        gtest_step "$tool-fused" 150 "$build/tests/test_fused" '*UnitOnDevice*cuda*' \
          "$sanitizer" --tool "$tool" --error-exitcode 99
      ) &
      tracks+=($!)
    done
  fi

  step "NCCL (data parallel over GPUs)"
  if [ "$gpus" -ge 2 ]; then
    gtest_step nccl 240 "$build/tests/test_dist" 'NcclRanks.*'
  else
    record nccl SKIP - "$gpus GPU(s): the NCCL tests need 2"
  fi

  step "data"
  data=$work/data run_dir=$work/rope
  data_flags=()
  [ -n "$bundle" ] && data_flags=(--data-dir "$bundle/data")
  if run prepare 150 "$build/apps/prepare" --out "$data" "${data_flags[@]}"; then
    step "pretrain the RoPE model for $minutes minute(s) on cuda"
    if run pretrain $((minutes * 60 + 90)) "$build/apps/pretrain" --rope --minutes "$minutes" --device cuda \
      --data "$data" --out "$run_dir"; then
      step "generate on cuda"
      note="a story from the trained model" run generate-cuda 60 "$build/apps/generate" --ckpt "$run_dir" \
        --device cuda --prompt "Once upon a time" --max-new-tokens 200 --seed 1

      step "evaluate --json on cuda and on cpu"
      run evaluate-cuda 60 bash -c "'$build/apps/evaluate' --ckpt '$run_dir' --tokens '$data/valid.bin' --device cuda --json --max-windows 64 > '$out/evaluate-cuda.json'" &&
        run evaluate-cpu 120 bash -c "'$build/apps/evaluate' --ckpt '$run_dir' --tokens '$data/valid.bin' --device cpu --json --max-windows 64 > '$out/evaluate-cpu.json'" &&
        compare evaluate-cuda-vs-cpu "$out/evaluate-cuda.json" "$out/evaluate-cpu.json"

      step "context --json on cuda and on cpu"
      run context-cuda 90 bash -c "'$build/apps/context' --ckpt '$run_dir' --tokens '$data/valid.bin' --device cuda --streams 2 --no-plot --json --out-dir '$work/context-cuda' > '$out/context-cuda.json'" &&
        run context-cpu 150 bash -c "'$build/apps/context' --ckpt '$run_dir' --tokens '$data/valid.bin' --device cpu --streams 2 --no-plot --json --out-dir '$work/context-cpu' > '$out/context-cpu.json'" &&
        compare context-cuda-vs-cpu "$out/context-cuda.json" "$out/context-cpu.json"
    fi
  fi

  step "compute-sanitizer's results"
  [ ${#tracks[@]} -gt 0 ] && wait "${tracks[@]}"
  cat "$work/memcheck.log" "$work/racecheck.log" 2> /dev/null
fi

step "summary"
total=$((SECONDS - start))
if [ $total -le $budget ]; then
  record total PASS $total "within the $((budget / 60)) minutes"
else
  record total SLOW $total "over the $((budget / 60)) minutes this check should take"
fi
cat "$out/summary.txt"
if ! grep -qv '|PASS|\||SKIP|\||SLOW|' "$rows"; then
  echo "gpu-check: all steps passed in $total s; log and table in $out"
else
  echo "gpu-check: FAILED ($total s); log and table in $out"
  exit 1
fi
