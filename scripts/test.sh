#!/usr/bin/env bash
# From a fresh clone to a green test run: install dependencies, build everything (library, apps,
# tests, benchmarks), run the whole GoogleTest suite, build the example consumer against the
# installed package, then build and run the suite again under AddressSanitizer, LeakSanitizer and
# UndefinedBehaviorSanitizer (MVGPT_SKIP_SANITIZERS=1 skips that part; docs/reliability.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build=${MVGPT_BUILD_DIR:-build}
jobs=${MVGPT_JOBS:-$(nproc)}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${MVGPT_CMAKE_ARGS:-}
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 600
# The modules as another project sees them: installed, then found with find_package(mvgpt).
cmake --install "$build" --prefix "$build/install" > /dev/null
cmake -S examples/consumer -B "$build/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$PWD/$build/install" > /dev/null
cmake --build "$build/consumer" > /dev/null
"$build/consumer/consumer"

# The suite again with sanitizers: any finding aborts its test, so it fails the run. -O1 keeps the
# instrumented build quick to run; benchmarks and the example are left out.
if [[ "${MVGPT_SKIP_SANITIZERS:-0}" != 1 ]]; then
  asan=${MVGPT_ASAN_BUILD_DIR:-build-asan}
  cmake -S . -B "$asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
    -DMVGPT_SANITIZE=address,undefined -DMVGPT_CUDA=OFF -DMVGPT_BUILD_BENCH=OFF -DMVGPT_BUILD_EXAMPLES=OFF
  cmake --build "$asan" -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1 \
    UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$asan" --output-on-failure -j "$jobs" --timeout 1200
fi
