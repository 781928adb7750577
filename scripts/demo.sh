#!/usr/bin/env bash
# The main job on the embedded default: installs what is missing, builds, and trains the TF-doc
# CNN on Fashion-MNIST (Debian package) with 2 ranks for a short run, printing progress and the
# test accuracy. Extra arguments go to mirror-train and win over the demo's own settings (e.g.
# --epochs 3 --train-limit 0 for all the data, --devices cpu).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
"$root/scripts/setup.sh"
if [ -z "${MIRROR_DEMO_SKIP_BUILD:-}" ]; then  # set by the e2e test, which runs on a built tree
  echo "demo: building Mirror into $build (about 5 minutes the first time; full log: $build.log)"
  # One progress line in 25 build steps, so a first build is not minutes of silence.
  "$root/scripts/build.sh" 2>&1 | tee "$build.log" |
    awk '/^\[[0-9]+\/[0-9]+\]/ { n++; if (n % 25 == 1) { sub(/ [A-Z].*/, ""); print "demo: build step " $0; fflush() } }
         /error|FAILED/ { print; fflush() }'
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
