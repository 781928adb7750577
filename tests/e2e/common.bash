# The set-up the e2e scripts share; sourced, not run (ctest runs only tests/e2e/*.sh):
#   source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
# gives build (absolute), root (the repository), train (mirror-train), mirrorrun, a fresh work
# dir as the current directory (removed on exit), fail MESSAGE (counted in $failures), and the
# environment for Open MPI as root with one OpenMP thread. Exits 77 (skipped) when mirror-train
# is not built; e2e_need_mpirun does the same without mpirun.
set -u
[ $# -ge 1 ] && [ -d "$1" ] || { echo "usage: $(basename "$0") <build dir>" >&2; exit 2; }
build="$(cd "$1" && pwd)"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
train="$build/bin/mirror-train"
mirrorrun="$root/launch/mirrorrun"
if [ ! -x "$train" ]; then echo "skip: $train is not built"; exit 77; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
e2e_need_mpirun() { command -v mpirun >/dev/null || { echo "skip: no mpirun"; exit 77; }; }
# True when mixed_bfloat16 runs on this CPU: AVX-512 BF16, not capped by ONEDNN_MAX_CPU_ISA
# (mirror-doctor asks the backend, as mirror-train does). Its callers skip the bfloat16 runs
# otherwise, saying so, as gpu tests skip without a GPU.
e2e_cpu_bf16() {
  "$build/bin/mirror-doctor" --json 2>/dev/null | grep -q '"cpu_precision": *"bf16 yes'
}
