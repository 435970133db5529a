# Sourced by the measurement scripts (finetune.sh, long_context.sh): moves to the clone and sets
# repo (the clone), build (MVGPT_BUILD_DIR, default build/, relative to the clone) and bin (the
# built apps).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
build=${MVGPT_BUILD_DIR:-build}
[[ "$build" = /* ]] || build="$repo/$build"
bin="$build/apps"
