#!/usr/bin/env bash
# The main job on the embedded default: installs what is missing, builds, and trains the TF-doc
# CNN on Fashion-MNIST (Debian package) with 2 ranks for a short run, printing progress and the
# test accuracy. Extra arguments go to mirror-train and win over the demo's own settings (e.g.
# --epochs 3 --train-limit 0 for all the data, --devices cpu).
# The CUDA backend is built only where a GPU can run it: an NVIDIA driver is present (its
# libcuda.so.1, or /proc/driver/nvidia). Elsewhere the demo builds the CPU backend, skips nvJPEG,
# and says so; MIRROR_DEMO_CUDA=ON forces the CUDA build (AUTO: where nvcc is found). A build
# folder configured before keeps its choice. Only the two programs the demo runs are built
# (scripts/build.sh builds everything, tests included).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
cuda="${MIRROR_DEMO_CUDA:-}"
case "$cuda" in
  "" | ON | OFF | AUTO) ;;
  *) echo "demo: MIRROR_DEMO_CUDA must be ON, OFF or AUTO, not '$cuda'" >&2; exit 2 ;;
esac
if [ -z "$cuda" ] && [ ! -f "$build/CMakeCache.txt" ]; then
  if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' || [ -d /proc/driver/nvidia ]; then
    cuda=AUTO
  else
    cuda=OFF
    echo "demo: no NVIDIA driver here, so it builds the CPU backend only (MIRROR_DEMO_CUDA=ON scripts/demo.sh builds the CUDA backend too)"
  fi
fi
setup_args=()
[ "$cuda" = OFF ] && setup_args=(--cpu-only)
"$root/scripts/setup.sh" "${setup_args[@]}"
if [ -z "${MIRROR_DEMO_SKIP_BUILD:-}" ]; then  # set by the e2e test, which runs on a built tree
  echo "demo: building mirror-train and mirror-doctor into $build (about 7 minutes the first time on 2 cores; full log: $build.log)"
  # One progress line in 25 build steps, so a first build is not minutes of silence.
  BUILD_TARGETS="mirror-train mirror-doctor" "$root/scripts/build.sh" ${cuda:+"-DMIRROR_CUDA=$cuda"} 2>&1 |
    tee "$build.log" |
    awk '/^\[[0-9]+\/[0-9]+\]/ { n++; if (n % 25 == 1) { sub(/ [A-Z].*/, ""); print "demo: build step " $0; fflush() } }
         / error: |^FAILED: / { print; fflush() }'
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "demo: the build failed; see $build.log" >&2; exit 1; }
fi
"$build/bin/mirror-doctor" | tail -n 1
# The demo's settings, each only where the caller did not give that flag (mirror-train refuses a
# flag given twice).
given=" $* "
args=()
default() {  # default FLAG VALUE
  case "$given" in *" $1 "* | *" $1="*) ;; *) args+=("$1" "$2") ;; esac
}
default --model cnn
default --epochs 1
default --train-limit 12000
[[ "$given" == *" --batch-per-replica"* ]] || default --batch-size 64
default --devices auto
args+=("$@")
if [ -x "$root/launch/mirrorrun" ]; then
  exec "$root/launch/mirrorrun" -np 2 "$build/bin/mirror-train" "${args[@]}"
fi
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec mpirun --oversubscribe -np 2 "$build/bin/mirror-train" "${args[@]}"
