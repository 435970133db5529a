#!/usr/bin/env bash
# From a fresh clone to a green test run: install dependencies, build everything (library, apps,
# tests, benchmarks), run the whole GoogleTest suite, build the examples against the installed
# package and run them (a character-level GPT on Shakespeare among them), then build and run the
# suite again under AddressSanitizer, LeakSanitizer and UndefinedBehaviorSanitizer (MVGPT_SKIP_SANITIZERS=1 skips that part; docs/testing.md).
# On the repository's 2-core machine: about 25 minutes (two builds of ~5-8 minutes, CUDA included
# when nvcc is there, and two runs of the suite). MVGPT_SKIP_INSTALL=1: the dependencies are there.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
step() { printf '\n=== %s (%s)\n' "$*" "$(date -u -d @$((SECONDS - start)) +%M:%S 2>/dev/null || echo "$((SECONDS - start)) s")"; }

step "dependencies (scripts/install-deps.sh: as root or through sudo)"
if [ "${MVGPT_SKIP_INSTALL:-0}" != 1 ]; then
  bash scripts/install-deps.sh
fi
build=${MVGPT_BUILD_DIR:-build}
jobs=${MVGPT_JOBS:-$(nproc)}
step "build everything in $build (Release)"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${MVGPT_CMAKE_ARGS:-}
cmake --build "$build" -j "$jobs"
step "the whole suite"
ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 600
step "the installed package, and the examples built against it (examples/README.md)"
# The modules as another project sees them: installed, then found with find_package(mvgpt).
rm -rf "$build/install"  # ours: an install from older sources must not hide a missing header
cmake --install "$build" --prefix "$build/install" > /dev/null
# Every installed header compiles on its own from the install (<mvgpt/...> only, no internal header
# reached); the CUDA backend's need the toolkit and are left out.
(cd "$build/install/include" && find mvgpt -name '*.h' -not -path '*/cuda/*' | sort) | while read -r h; do
  printf '#include <%s>\n' "$h" | ${CXX:-c++} -std=c++20 -fsyntax-only -Wno-psabi -I"$build/install/include" -x c++ - \
    || { echo "installed header $h does not compile on its own"; exit 1; }
done
cmake -S examples -B "$build/examples" -G Ninja -DCMAKE_PREFIX_PATH="$PWD/$build/install" > /dev/null
cmake --build "$build/examples" > /dev/null
# Installed as mvgpt-<app> on PATH (a bare export or import is another program's).
for app in prepare pretrain evaluate context generate merge export import; do "$build/install/bin/mvgpt-$app" --version > /dev/null; done
"$build/examples/consumer"
"$build/examples/mlp_spirals"
"$build/examples/llama"
if [ -f "${MVGPT_SHAKESPEARE:-../shared/data/tinyshakespeare/input.txt}" ]; then
  bash examples/shakespeare_char/run.sh "$build"
else
  echo "shakespeare_char: skipped (no ../shared/data/tinyshakespeare/input.txt; set MVGPT_SHAKESPEARE)"
fi

# The suite again with sanitizers: any finding aborts its test, so it fails the run. -O1 keeps the
# instrumented build quick to run; benchmarks and the example are left out.
if [[ "${MVGPT_SKIP_SANITIZERS:-0}" != 1 ]]; then
  step "build and run the suite again under ASan + LSan + UBSan (in build-asan)"
  asan=${MVGPT_ASAN_BUILD_DIR:-build-asan}
  cmake -S . -B "$asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DMVGPT_SANITIZE=address,undefined -DMVGPT_CUDA=OFF -DMVGPT_BUILD_BENCH=OFF
  cmake --build "$asan" -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1 \
    UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$asan" --output-on-failure -j "$jobs" --timeout 1200
fi
step "done"
