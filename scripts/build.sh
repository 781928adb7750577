#!/usr/bin/env bash
# Configures and builds Mirror into ${BUILD_DIR:-build} (Release, Ninja). Extra arguments go to
# cmake's configure step, e.g. scripts/build.sh -DMIRROR_CUDA=OFF. BUILD_TARGETS (space
# separated, e.g. "mirror-train mirror-doctor") builds only those; default: everything.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
jobs="${JOBS:-$(nproc)}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "$jobs" "${targets[@]}"
