#!/usr/bin/env bash
# From a fresh clone to a green test run: install dependencies, build everything (library, apps,
# tests, benchmarks), run the whole GoogleTest suite, and build the example consumer against the
# installed package.
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
