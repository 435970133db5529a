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
  python3-torch python3-pip             # the Python checks against PyTorch, transformers, TensorBoard (tests/python)
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

# The Python checks' packages from PyPI, at the versions they were verified with (docs/checkpoints.md),
# into Debian's python3 (where python3-torch is; 4.46 is among the last transformers for PyTorch 1.13).
# Best effort: without network the checks print "skipped: <package> not installed". Already there: nothing.
# MVGPT_SKIP_PYTHON_DEPS=1 skips this part.
python_packages=(transformers==4.46.3 tokenizers==0.20.3 safetensors==0.4.5 tensorboard==2.18.0 sentencepiece==0.2.0)
if [ "${MVGPT_SKIP_PYTHON_DEPS:-0}" != 1 ] && ! /usr/bin/python3 - "${python_packages[@]}" <<'PY' 2> /dev/null
import importlib.metadata as m, sys
sys.exit(any(m.version(p.split("==")[0]) != p.split("==")[1] for p in sys.argv[1:]))
PY
then
  echo "install-deps: pip installing ${python_packages[*]} for /usr/bin/python3"
  as_root=()
  [ "$(id -u)" != 0 ] && command -v sudo > /dev/null && as_root=(sudo)
  # numpy<2: Debian's python3-torch 1.13 is built against numpy 1.
  "${as_root[@]}" /usr/bin/python3 -m pip install --quiet --break-system-packages "${python_packages[@]}" "numpy<2" ||
    echo "install-deps: pip failed (no network?); the Python checks will be skipped" >&2
fi

# llama.cpp for the GGUF check (tests/python/test_gguf.py): llama-cpp-python builds the llama.cpp it
# vendors from source with CMake (about 5 minutes on 2 cores, once), pinned as docs/checkpoints.md says.
# Best effort too: without it that check prints "skipped: llama_cpp not installed".
llama_cpp_python=0.3.36
if [ "${MVGPT_SKIP_PYTHON_DEPS:-0}" != 1 ] &&
   [ "$(/usr/bin/python3 -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))' 2> /dev/null)" != "$llama_cpp_python" ]; then
  echo "install-deps: pip building llama-cpp-python==$llama_cpp_python (llama.cpp) for /usr/bin/python3"
  as_root=()
  [ "$(id -u)" != 0 ] && command -v sudo > /dev/null && as_root=(sudo)
  "${as_root[@]}" env CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" /usr/bin/python3 -m pip install --quiet --break-system-packages \
    --no-cache-dir "llama-cpp-python==$llama_cpp_python" ||
    echo "install-deps: pip could not build llama-cpp-python; the GGUF check will be skipped" >&2
fi
