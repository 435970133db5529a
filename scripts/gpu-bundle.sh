#!/usr/bin/env bash
# gpu-bundle: everything scripts/gpu-check.sh needs on a GPU machine that has CUDA, a compiler, CMake
# and Python but none of our Debian packages and no network: the .deb files of the build and run
# dependencies (with the run-time libraries a CUDA image may lack) and the TinyStories text, in one
# folder of at most 40 MiB. Run it here, on Debian 12 with apt (network needed); no root needed.
#
#   scripts/gpu-bundle.sh [DIR]          (default: .gpu-bundle, which .gitignore covers, so that
#                                         the device tool can carry it: carry: [".gpu-bundle"])
#
# DIR must not exist, be empty, or be a bundle this script made (it is then replaced whole; nothing
# else in it is touched, and a folder with anything else in it is refused). The new bundle is put
# together beside DIR and renamed into place, so an interrupted run leaves the old one.
# Environment: MVGPT_DATA_DIR (the TinyStories folder; default ../shared/data/tinystories).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.gpu-bundle}
data=${MVGPT_DATA_DIR:-../shared/data/tinystories}
limit_mib=40
marker=MANIFEST

# Built against: headers, CMake packages and libraries (Debian 12's versions: apt's candidates).
build_packages=(
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0  # BLAS
  libtbb-dev libtbb12 libtbbmalloc2 libtbbbind-2-5                          # thread pool (TBB's CMake package names tbbbind)
  libdnnl-dev libdnnl2                                                       # bfloat16 products
  libgtest-dev libgmock-dev                                                  # tests (static libraries)
  nlohmann-json3-dev libcli11-dev                                            # header-only
  libbenchmark-dev libbenchmark1debian                                       # mvgpt_bench (gpu-check --bench-only)
)
# Needed at run time by the libraries above, and often absent from a CUDA image: gpu-check.sh puts
# each on the library path only where the system has no copy of its own.
runtime_packages=(libgfortran5 libquadmath0 libgomp1 ocl-icd-libopencl1)

fail() {
  echo "gpu-bundle: $*" >&2
  exit 1
}
command -v apt-get > /dev/null || fail "apt-get not found: run this on Debian 12 (or Ubuntu) with apt"
for f in train.txt valid.txt; do
  [ -f "$data/$f" ] || fail "$data/$f not found: set MVGPT_DATA_DIR to the TinyStories folder (train.txt, valid.txt)"
done
if [ -e "$dir" ] || [ -L "$dir" ]; then
  [ -d "$dir" ] && [ ! -L "$dir" ] || fail "$dir exists and is not a folder: name a new folder"
  if [ -n "$(ls -A "$dir")" ]; then
    [ -f "$dir/$marker" ] || fail "$dir is not empty and is not a bundle made by this script (no $marker): name a new or empty folder"
    # Replaced whole only when it holds nothing but what its manifest lists.
    extra=$(cd "$dir" && comm -23 <(find . -mindepth 1 ! -type d -printf '%P\n' | LC_ALL=C sort) \
      <( (grep -v '^#' "$marker" | awk '{print $2}'; echo "$marker") | LC_ALL=C sort))
    [ -z "$extra" ] || fail "$dir holds files its $marker does not list (${extra//$'\n'/, }): move them, or name another folder"
  fi
fi

parent=$(dirname "$dir")
[ -d "$parent" ] || fail "$parent: no such folder"
new=$(mktemp -d "$parent/.gpu-bundle.new.XXXXXX")
trap 'rm -rf "$new"' EXIT
chmod 755 "$new"
mkdir "$new/debs" "$new/runtime" "$new/data"

# apt-get download fetches the candidate version of each name into the current folder; it needs the
# package lists (apt-get update) but no root.
# As root, apt's download user cannot write into this folder: download as root, without the warning.
sandbox=()
[ "$(id -u)" = 0 ] && sandbox=(-o APT::Sandbox::User=root)
download() {
  (cd "$1" && shift && apt-get download -qq "${sandbox[@]}" "$@") ||
    fail "apt-get download failed for: ${*:2} (no network, or the lists need apt-get update)"
}
echo "gpu-bundle: downloading ${#build_packages[@]} build and ${#runtime_packages[@]} run-time packages"
download "$new/debs" "${build_packages[@]}"
download "$new/runtime" "${runtime_packages[@]}"
cp "$data/train.txt" "$data/valid.txt" "$new/data/"
[ -f "$data/SOURCE.md" ] && cp "$data/SOURCE.md" "$new/data/"

{
  echo "# mvgpt GPU bundle: made by scripts/gpu-bundle.sh on $(date -u +%Y-%m-%dT%H:%MZ) ($(. /etc/os-release && echo "$PRETTY_NAME"))"
  echo "# sha256 and path of each file; scripts/gpu-check.sh --bundle checks them before it uses any"
  (cd "$new" && find debs runtime data -type f | LC_ALL=C sort | xargs sha256sum)
} > "$new/$marker"

size=$(du -sb "$new" | cut -f1)
if [ "$size" -gt $((limit_mib * 1024 * 1024)) ]; then
  fail "the bundle came to $((size / 1024 / 1024)) MiB, over its $limit_mib MiB (left nothing behind)"
fi

# Into place: an old bundle goes aside first and is removed once the new one is there.
old=
if [ -d "$dir" ]; then
  old=$(mktemp -d "$parent/.gpu-bundle.old.XXXXXX")
  rmdir "$old"
  mv "$dir" "$old"
fi
mv "$new" "$dir"
trap - EXIT
[ -n "$old" ] && rm -rf "$old"
echo "gpu-bundle: $dir holds $(ls "$dir/debs" | wc -l) build packages, $(ls "$dir/runtime" | wc -l) run-time packages" \
  "and the stories ($(du -sh "$dir" | cut -f1) in all)"
echo "  on the GPU machine: scripts/gpu-check.sh --bundle $dir --out \$OUT"
