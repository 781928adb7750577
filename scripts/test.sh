#!/usr/bin/env bash
# The test command: installs what is missing, builds (CUDA backend too when nvcc exists), and
# runs every ctest label that can run here (unit, mpi, e2e, cluster; gpu tests skip without a
# GPU and cluster tests without network namespaces, i.e. not root: both are reported as
# skipped, never as passed), then, on a CPU beyond AVX2, the ISA-dependent ones capped at AVX2.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# AUTO: the CUDA code compiles wherever nvcc is found, whatever a demo build chose before.
"$root/scripts/build.sh" -DMIRROR_CUDA=AUTO "$@"
build="${BUILD_DIR:-$root/build}"
# The interop tests' Python modules (tensorboard, safetensors), first on PATH when they install.
if pybin="$("$root/scripts/test_python.sh" "$build/test-python")"; then export PATH="$pybin:$PATH"; fi
cd "$build"
ctest --output-on-failure -j "${CTEST_JOBS:-2}" --timeout 600
# The AVX2 leg (Note [One ISA knob], src/cpu/cpu_isa.h): on a CPU beyond AVX2, the tests whose
# results depend on the instruction set run once more with oneDNN and Mirror's vector loops capped
# at AVX2, as on a CPU without AVX-512. MIRROR_TEST_ISA_LEG=0 leaves it out.
if [ "${MIRROR_TEST_ISA_LEG:-1}" != 0 ] && grep -qw avx2 /proc/cpuinfo && grep -qw avx512f /proc/cpuinfo; then
  echo "test: the unit, mpi and isa labels once more under ONEDNN_MAX_CPU_ISA=AVX2"
  ONEDNN_MAX_CPU_ISA=AVX2 ctest --output-on-failure -j "${CTEST_JOBS:-2}" --timeout 600 \
    -L '^(unit|mpi|isa)$'
fi
