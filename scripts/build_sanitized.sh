#!/usr/bin/env bash
# Builds mirror-train with a sanitizer into build-asan/ or build-tsan/ (CPU only), for the stop
# signal stress test under ASan or TSan:
#   scripts/build_sanitized.sh asan && tests/e2e/stop_stress.sh build-asan 50
#   scripts/build_sanitized.sh tsan && TSAN_OPTIONS=... tests/e2e/stop_stress.sh build-tsan 50
# (tests/e2e/tsan.supp names the uninstrumented libraries whose reports are not ours.)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "${1:-}" in
  asan) flags="-fsanitize=address -fno-omit-frame-pointer" ;;
  tsan) flags="-fsanitize=thread" ;;
  *) echo "usage: $(basename "$0") asan|tsan" >&2; exit 2 ;;
esac
build="$root/build-$1"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMIRROR_CUDA=OFF \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" \
  -DCMAKE_SHARED_LINKER_FLAGS="$flags" >/dev/null
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target mirror-train
