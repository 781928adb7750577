#!/usr/bin/env bash
# The test command: installs what is missing, builds (CUDA backend too when nvcc exists), and
# runs every ctest label that can run here (unit, mpi, e2e, cluster; gpu tests skip without a
# GPU and cluster tests without network namespaces, i.e. not root: both are reported as
# skipped, never as passed).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
"$root/scripts/build.sh" "$@"
build="${BUILD_DIR:-$root/build}"
# The interop tests' Python modules (tensorboard, safetensors), first on PATH when they install.
if pybin="$("$root/scripts/test_python.sh" "$build/test-python")"; then export PATH="$pybin:$PATH"; fi
cd "$build"
ctest --output-on-failure -j "${CTEST_JOBS:-2}" --timeout 600
