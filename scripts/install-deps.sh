#!/usr/bin/env bash
# Installs what mvgpt builds and runs with, from Debian's packages: nothing when they are all there;
# otherwise apt-get, as root or through sudo. Known to work on Debian 12 (bookworm); Ubuntu 24.04 has
# the same packages (22.04's CMake 3.22 is older than the 3.25 mvgpt needs: install a newer one first).
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config ccache
  libopenblas-dev libtbb-dev            # GEMM and the thread pool
  libdnnl-dev                           # bfloat16 GEMM (oneDNN)
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
  echo "install-deps: installing ${missing[*]}"
  as_root=()
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo > /dev/null; then
      as_root=(sudo)
    else
      echo "install-deps: missing packages and not root, and there is no sudo: as root, run" >&2
      echo "  apt-get install ${missing[*]}" >&2
      echo "then run this again (or set MVGPT_SKIP_INSTALL=1 if they are installed some other way)" >&2
      exit 1
    fi
  fi
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
