#!/usr/bin/env bash
# gpu-check-isolated: proof that a --bundle build takes nothing from the system's own copies of the
# bundle's packages. In a private mount namespace, every file the system's installed copy of each of
# the bundle's build packages holds (dpkg -L: headers, CMake packages, libraries) is masked by an
# empty file; then scripts/gpu-check.sh --bundle DIR runs there (with --build-only unless other
# arguments are given). Any use of a system copy then fails loudly: an empty header or CMake file,
# an empty library the linker or loader cannot read. Outside the namespace nothing changes.
# Needs root (unshare) and a Debian system with those packages installed.
#
#   scripts/gpu-check-isolated.sh BUNDLE [gpu-check arguments...]   (default: --build-only)
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=${1:?usage: scripts/gpu-check-isolated.sh BUNDLE [gpu-check arguments...]}
shift
[ $# -gt 0 ] || set -- --build-only
[ -f "$bundle/MANIFEST" ] || { echo "gpu-check-isolated: $bundle has no MANIFEST: make it with scripts/gpu-bundle.sh" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "gpu-check-isolated: needs root (a private mount namespace)" >&2; exit 2; }

if [ "${MVGPT_ISOLATED:-}" != 1 ]; then
  exec unshare --mount --propagation private env MVGPT_ISOLATED=1 "$0" "$bundle" "$@"
fi

empty=$(mktemp)
masked=0 packages=()
for deb in "$bundle"/debs/*.deb; do
  p=$(dpkg-deb -f "$deb" Package)
  dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed" || continue
  packages+=("$p")
  while IFS= read -r f; do
    # Regular files only (a link resolves to a masked file of the same package).
    [ -f "$f" ] && [ ! -L "$f" ] || continue
    mount --bind "$empty" "$f"
    masked=$((masked + 1))
  done < <(dpkg -L "$p")
done
echo "gpu-check-isolated: masked $masked files of the system's ${packages[*]:-(none installed)}"
# Shown masked: the first header and library the build would otherwise find.
for f in /usr/include/tbb/tbb.h /usr/include/oneapi/dnnl/dnnl.hpp /usr/lib/x86_64-linux-gnu/libdnnl.so.2; do
  [ -e "$f" ] && echo "  $f: $(stat -L -c %s "$f") bytes"
done
scripts/gpu-check.sh --bundle "$bundle" "$@"
