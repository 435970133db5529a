#!/usr/bin/env bash
# Installs what mvgpt builds and runs with, from Debian's packages (run as root).
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config ccache
  libopenblas-dev libtbb-dev            # GEMM and the thread pool
  libgtest-dev libgmock-dev libbenchmark-dev  # tests and benchmarks
  nlohmann-json3-dev libcli11-dev       # JSON files and command lines
  gnuplot-nox                           # training and context plots
  libopenmpi-dev openmpi-bin            # data-parallel training (optional at build time)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
