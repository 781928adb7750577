#!/usr/bin/env bash
# Note [Pinned CUDA headers] (cmake/MirrorImportedLibraries.cmake): a CUDA build compiles against
# the cuDNN and NCCL headers CMake found (MIRROR_cudnn_INCLUDE_DIR, MIRROR_nccl_INCLUDE_DIR: the
# GPU kit's pinned wheels), even though the CUDA toolkit's include folder, which CUDA::cudart
# brings, holds its own cudnn.h and nccl.h. Copies of the installed headers with other patch
# levels play the pinned wheels; a probe target linked the way libmirror is
# (mirror_link_cuda_libraries) must compile against them, and a target linked the old way (the
# toolkit's targets first) must not -- which shows the toolkit's copies do shadow here, so the
# first check means something. Usage: kit_headers.sh BUILD_DIR (77 = skipped: no CUDA toolkit).
set -euo pipefail
build="$(realpath "${1:?usage: kit_headers.sh BUILD_DIR}")"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
nvcc="$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)"
[ -x "${nvcc:-}" ] || nvcc="$(command -v nvcc || true)"
[ -x "${nvcc:-}" ] || { echo "SKIP: no nvcc (the CUDA backend is not built here)"; exit 77; }
toolkit_inc="$(cd "$(dirname "$nvcc")/../include" && pwd -P)"
for h in cudnn_version.h nccl.h; do
  [ -f "$toolkit_inc/$h" ] ||
    { echo "SKIP: the toolkit's include folder has no $h: nothing can shadow the pinned headers"; exit 77; }
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# ---- the "pinned wheels": the toolkit's headers with other patch levels
mkdir -p "$work/wheels/cudnn/include" "$work/wheels/nccl/include" "$work/probe"
cp "$toolkit_inc"/cudnn*.h "$work/wheels/cudnn/include/"
cp "$toolkit_inc/nccl.h" "$work/wheels/nccl/include/"
# Each cuDNN sub-header checks its own patch level against cudnn_version.h's.
sed -i -E 's/^#define (CUDNN_PATCHLEVEL|CUDNN_[A-Z_]+_PATCH) +[0-9]+/#define \1 77/' "$work/wheels/cudnn/include/"cudnn*.h
sed -i -E 's/^#define NCCL_PATCH +[0-9]+/#define NCCL_PATCH 99/' "$work/wheels/nccl/include/nccl.h"
grep -q '^#define CUDNN_PATCHLEVEL 77' "$work/wheels/cudnn/include/cudnn_version.h" || fail "could not patch cudnn_version.h"
grep -q '^#define NCCL_PATCH 99' "$work/wheels/nccl/include/nccl.h" || fail "could not patch nccl.h"

cat >"$work/probe/probe.cpp" <<'EOF'
#include <cudnn.h>
#include <nccl.h>
static_assert(CUDNN_PATCHLEVEL == 77 && CUDNN_VERSION == EXPECT_CUDNN,
              "compiled against a cudnn.h other than the pinned one");
static_assert(NCCL_PATCH == 99 && NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH == EXPECT_NCCL,
              "compiled against an nccl.h other than the pinned one");
int probe() { return 0; }
EOF
cat >"$work/probe/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.20)
project(probe LANGUAGES CXX)
find_package(CUDAToolkit REQUIRED)
include("$root/cmake/MirrorImportedLibraries.cmake")
mirror_find_cuda_libraries()
if(NOT MirrorDeps_cuda_libraries_FOUND)
  message(FATAL_ERROR "cuDNN or NCCL not found")
endif()
mirror_header_version(cudnn_header "\${MIRROR_cudnn_INCLUDE_DIR}/cudnn_version.h" CUDNN_MAJOR CUDNN_MINOR CUDNN_PATCHLEVEL)
mirror_header_version(nccl_header "\${MIRROR_nccl_INCLUDE_DIR}/nccl.h" NCCL_MAJOR NCCL_MINOR NCCL_PATCH)
add_library(pinned OBJECT probe.cpp)
mirror_link_cuda_libraries(pinned)
add_library(toolkit_first OBJECT EXCLUDE_FROM_ALL probe.cpp)
target_link_libraries(toolkit_first PRIVATE CUDA::cudart CUDA::cublas MirrorDeps::cudnn MirrorDeps::nccl)
foreach(t pinned toolkit_first)
  target_compile_definitions(\${t} PRIVATE EXPECT_CUDNN=\${cudnn_header} EXPECT_NCCL=\${nccl_header})
endforeach()
EOF
cmake -S "$work/probe" -B "$work/probe/build" -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DMIRROR_cudnn_INCLUDE_DIR="$work/wheels/cudnn/include" \
  -DMIRROR_nccl_INCLUDE_DIR="$work/wheels/nccl/include" >"$work/configure.log" 2>&1 ||
  fail "configuring the probe: $(tail -20 "$work/configure.log")"
cmake --build "$work/probe/build" --target pinned >"$work/pinned.log" 2>&1 ||
  fail "a target linked with mirror_link_cuda_libraries compiled against the toolkit's headers: $(grep -m3 -E 'error|static assert' "$work/pinned.log")"
if cmake --build "$work/probe/build" --target toolkit_first >"$work/old.log" 2>&1; then
  fail "with the toolkit's targets first the probe still saw the pinned headers: the check above proves nothing here"
fi
grep -q "other than the pinned one" "$work/old.log" || fail "the old link order failed for another reason: $(tail -5 "$work/old.log")"
echo "PASS: the pinned cudnn.h/nccl.h win over $toolkit_inc's (which a toolkit-first link picks)"
