#!/usr/bin/env bash
# The layering rule of docs/architecture.md, checked on the sources (no binaries needed):
# nothing in the core (src/*.h|cpp but the factory file, src/ops, src/math, the core public
# headers) includes a backend (src/cpu, src/cuda) or distributed header, and MIRROR_WITH_CUDA
# is tested in one source file only; then no include between layers runs upward
# (scripts/include_graph.py, skipped without python3).
# A self-test first plants a bad include in a copy of the core, so the check can fail.
# Usage: layering.sh BUILD_DIR (unused: the check reads the sources next to this script).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
fail() { echo "FAIL: $*" >&2; exit 1; }

core_files() {  # the core's files under $1, one per line
  local r="$1"
  find "$r/src" -maxdepth 1 \( -name '*.h' -o -name '*.cpp' \) ! -name backend_registry.cpp
  find "$r/src/ops" "$r/src/math" -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh'
  find "$r/include/mirror" -maxdepth 1 -name '*.h'
}
# Prints "file: line" for every core include of a backend or distributed header.
bad_includes() {
  core_files "$1" | sort | xargs grep -nE \
    '^\s*#\s*include\s+"(cpu/|cuda/|distributed/|mirror/distributed/)' || true
}

# Self-test: a copy of the core with one planted upward include must be caught.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src/ops" "$work/src/math" "$work/include/mirror"
cp "$root"/src/tensor.cpp "$work/src/"
sed -i '1a #include "mirror/distributed/communicator.h"' "$work/src/tensor.cpp"
[[ -n "$(bad_includes "$work")" ]] || fail "self-test: a planted include in src/tensor.cpp was not caught"

found="$(bad_includes "$root")"
[[ -z "$found" ]] || fail "the core includes a backend or distributed header:
$found
(reach a backend through src/backend.h, Note [Backend table]; see docs/architecture.md)"
echo "core: no backend or distributed include in $(core_files "$root" | wc -l) files"

cuda_files="$(grep -rlE '^\s*#\s*(if|ifdef|ifndef|elif).*MIRROR_WITH_CUDA' "$root/src" "$root/distributed" "$root/include" \
  --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' || true)"
[[ "$(echo "$cuda_files" | grep -c .)" -le 1 ]] ||
  fail "MIRROR_WITH_CUDA appears in more than the factory file: $cuda_files"
echo "MIRROR_WITH_CUDA: ${cuda_files#"$root/"}"

# The whole graph: no arrow may run upward between any two layers.
if command -v python3 >/dev/null; then
  python3 "$root/scripts/include_graph.py" "$root" || fail "scripts/include_graph.py found upward arrows"
fi
