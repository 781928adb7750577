#!/usr/bin/env bash
# Packs the GPU bring-up kit: Mirror built with the CUDA backend plus every runtime library a
# bare GPU machine lacks (oneDNN, Open MPI with its helper programs and plugins, PMIx, hwloc,
# Boost.Program_options, libgomp, ...), so that `bash .gpukit/gpu_check.sh OUTDIR` there builds
# nothing and installs nothing. See docs/gpu-kit.md.
#
#   scripts/gpu_kit.sh [--build-dir DIR] [--kit DIR] [--no-build] [--torch VERSION]
#                      [--pins-from FILE] [--no-pin]
#
#   --build-dir DIR  the CUDA build to pack (default build-gpukit; configured and built here
#                    when missing: Release, -DMIRROR_CUDA=ON, CMAKE_CUDA_ARCHITECTURES 80;90)
#   --kit DIR        where the kit goes (default .gpukit, ignored by git); replaced
#   --no-build       pack what DIR already holds (fails when something is missing); its cuDNN
#                    and NCCL are compared with the pins, not rebuilt
#   --torch VERSION  the PyTorch of the GPU machine (default 2.11.0): the kit is built against
#                    exactly the nvidia-cudnn-cu13 and nvidia-nccl-cu13 its metadata pins
#                    (scripts/gpu_kit_pins.py: torch's metadata through pip, the two wheels
#                    downloaded once into $MIRROR_GPUKIT_CACHE, default ~/.cache/mirror-gpukit)
#   --pins-from FILE read the pins from this METADATA / pip --report file (no network)
#   --no-pin         build against whatever cuDNN/NCCL CMake finds (recorded as NOT PINNED)
#
# The kit: gpu_check.sh, README.txt, BUILD_INFO.txt and mirror-kit.tar.gz (programs, gpu test
# binaries and the fixtures they read under test-data/, lib/, the relocatable Open MPI under
# ompi/, launch/mirrorrun, bench/step_torch.py, MANIFEST.txt). The tarball keeps the kit under the device tool's 64 MiB carry limit (oneDNN
# alone is 38 MiB); gpu_check.sh unpacks it into a private folder, never over /.
# Never carried: libcuda (the driver's), and cuDNN, NCCL, cuBLAS and the CUDA runtime, which
# gpu_check.sh finds on the GPU machine (its pip wheels and CUDA toolkit) by path at run time.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-gpukit" kit="$root/.gpukit" do_build=1
torch_version=2.11.0 pins_from="" do_pin=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$(realpath -m "${2:?--build-dir needs a folder}")"; shift 2 ;;
    --kit) kit="$(realpath -m "${2:?--kit needs a folder}")"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --torch) torch_version="${2:?--torch needs a version}"; shift 2 ;;
    --pins-from)
      [ -f "${2:?--pins-from needs a file}" ] || { echo "gpu_kit: --pins-from: no such file '$2'" >&2; exit 2; }
      pins_from="$(realpath "$2")"; shift 2 ;;
    --no-pin) do_pin=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_kit: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
die() { echo "gpu_kit: $*" >&2; exit 1; }
trap 'echo "gpu_kit: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
limit_mib=64
programs=(mirror-train mirror-bench mirror-doctor step-bench)
gpu_tests=()
for src in "$root"/tests/gpu/*_test.cpp; do gpu_tests+=("$(basename "$src" .cpp)"); done
# The GPU machine brings these (pip wheels / CUDA toolkit / driver): never carried.
gpu_side='^(libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so|libcudnn[a-z_]*\.so|libnccl\.so|libnvrtc|libnvJitLink|libnvidia-)'
# Every Linux has these, and newer is compatible: not carried (libstdc++/libgcc_s go to
# lib/fallback/, used only when the machine's own are too old).
system_libs='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil)\.so'
fallback_libs='^(libstdc\+\+|libgcc_s)\.so'
# What this build links, and what the GPU machine's wheels provide (KINDS.md: nvidia-cudnn-cu13,
# nvidia-nccl-cu13, nvidia-cublas and nvidia-cuda-runtime for CUDA 13).
expected_sonames=(libcudnn.so.9 libnccl.so.2 libcublas.so.13 libcudart.so.13)

# ---------------------------------------------------------------- pins
# Note [Kit version pinning]: the GPU machine loads cuDNN and NCCL from the wheels its PyTorch
# installed, and a library older than the one a binary was built against is not guaranteed to
# work. So the kit is built against exactly those wheels: torch's metadata names them
# (Requires-Dist nvidia-cudnn-cu13==..., nvidia-nccl-cu13==...), gpu_kit_pins.py downloads them
# once and CMake is pointed at their headers and libraries. When that fails the kit is still
# made, against what CMake finds, and says so loudly (here and in BUILD_INFO.txt).
pins_py=(python3 "$root/scripts/gpu_kit_pins.py")
pins=() pin_note="" cudnn_wheel="" nccl_wheel=""
loud() {
  local bar
  bar="$(printf '#%.0s' {1..78})"
  printf '%s
gpu_kit: WARNING: %s
%s
' "$bar" "$*" "$bar" >&2
}
pin_err="$(mktemp)"
if ((!do_pin)); then
  pin_note="NOT PINNED (--no-pin)"
elif resolved="$("${pins_py[@]}" resolve --torch "$torch_version" ${pins_from:+--metadata "$pins_from"} 2>"$pin_err")"; then
  torch_version="$(sed -n 's/^torch=//p' <<<"$resolved")"
  pins=("$(sed -n 's/^cudnn=//p' <<<"$resolved")" "$(sed -n 's/^nccl=//p' <<<"$resolved")")
  echo "gpu_kit: torch $torch_version pins ${pins[*]}${pins_from:+ (read from $pins_from)}"
else
  pin_note="NOT PINNED ($(tail -1 "$pin_err" | sed 's/^gpu_kit_pins: //'))"
fi
if ((do_build)) && ((${#pins[@]})); then
  if fetched="$("${pins_py[@]}" fetch "${pins[@]}" 2>"$pin_err")"; then
    cudnn_wheel="$(sed -n 's/^nvidia-cudnn-cu13=//p' <<<"$fetched")"
    nccl_wheel="$(sed -n 's/^nvidia-nccl-cu13=//p' <<<"$fetched")"
  else
    pin_note="NOT PINNED ($(tail -1 "$pin_err" | sed 's/^gpu_kit_pins: //'))"
  fi
fi
rm -f "$pin_err"
[ -z "$pin_note" ] || loud "the kit's cuDNN/NCCL are not pinned to torch $torch_version's wheels: ${pin_note#NOT PINNED }; $( ((do_build)) && echo "building against what CMake finds instead" || echo "packing $build as it is")"

# ---------------------------------------------------------------- build
# The CUDA backend lives in libmirror.so (programs link it), or in the program itself when it was
# linked statically.
has_cuda() {
  local f
  for f in "$1" $(ldd "$1" 2>/dev/null | awk '/libmirror\.so/ {print $3}'); do
    readelf -d "$f" 2>/dev/null | grep -q 'NEEDED.*libcudart\.so' && return 0
  done
  return 1
}
if ((do_build)); then
  wheel_args=()
  if [ -n "$cudnn_wheel" ] && [ -n "$nccl_wheel" ]; then  # the pinned wheels (Note [Kit version pinning])
    wheel_args=("-DMIRROR_cudnn_INCLUDE_DIR=$cudnn_wheel/include"
                "-DMIRROR_cudnn_LIBRARY=$cudnn_wheel/lib/libcudnn.so.9"
                "-DMIRROR_nccl_INCLUDE_DIR=$nccl_wheel/include"
                "-DMIRROR_nccl_LIBRARY=$nccl_wheel/lib/libnccl.so.2")
  fi
  if [ ! -f "$build/CMakeCache.txt" ] || ((${#wheel_args[@]})); then
    echo "gpu_kit: configuring $build (Release, CUDA backend, sm_80 + sm_90${wheel_args:+, cuDNN and NCCL from the pinned wheels})"
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMIRROR_CUDA=ON \
      "-DCMAKE_CUDA_ARCHITECTURES=80;90" "${wheel_args[@]}" >/dev/null
  fi
  echo "gpu_kit: building ${programs[*]} ${gpu_tests[*]} in $build"
  cmake --build "$build" -j "${JOBS:-$(nproc)}" --target "${programs[@]}" "${gpu_tests[@]}" >/dev/null
fi
for p in "${programs[@]}"; do [ -x "$build/bin/$p" ] || die "$build/bin/$p is missing (build it, or drop --no-build)"; done
for t in "${gpu_tests[@]}"; do [ -x "$build/tests/$t" ] || die "$build/tests/$t is missing (build it, or drop --no-build)"; done
has_cuda "$build/bin/mirror-doctor" ||
  die "$build has no CUDA backend (neither mirror-doctor nor its libmirror.so links libcudart): configure it with -DMIRROR_CUDA=ON on a machine with nvcc, cuDNN and NCCL"

# ---------------------------------------------------------------- stage
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
tree="$stage/mirror-kit"
mkdir -p "$tree"/{bin,tests,lib/fallback,launch,bench,scripts}
manifest="$tree/MANIFEST.txt"
: >"$manifest"
carry() {  # carry SOURCE DEST: copies the file the path resolves to, records where it came from
  mkdir -p "$(dirname "$2")"
  cp -L "$1" "$2"
  echo "${2#"$tree"/} <- $(realpath "$1")" >>"$manifest"
}
for p in "${programs[@]}"; do carry "$build/bin/$p" "$tree/bin/$p"; done
for t in "${gpu_tests[@]}"; do carry "$build/tests/$t" "$tree/tests/$t"; done
carry "$root/launch/mirrorrun" "$tree/launch/mirrorrun"
carry "$root/bench/step_torch.py" "$tree/bench/step_torch.py"
carry "$root/scripts/gpu_check.sh" "$tree/scripts/gpu_check.sh"
carry "$root/scripts/gpu_kernel_times.py" "$tree/scripts/gpu_kernel_times.py"
# ---- the files the gpu tests read (Note [Kit fixtures], tests/gpu/gpu_test_util.h): all of
# tests/data, which gpu_check.sh hands them as MIRROR_TEST_DATA; every binary's KitFixtures test
# (no GPU needed) must find its files in the staged copy, or nothing is packed.
while IFS= read -r f; do
  carry "$f" "$tree/test-data/${f#"$root"/tests/data/}"
done < <(find "$root/tests/data" -type f | sort)
for t in "${gpu_tests[@]}"; do
  MIRROR_TEST_DATA="$tree/test-data" "$tree/tests/$t" --gtest_filter='KitFixtures.*' \
    >"$stage/fixtures-$t.log" 2>&1 ||
    die "$t does not find its fixtures in the kit: $(grep -m3 'cannot be read' "$stage/fixtures-$t.log" || tail -3 "$stage/fixtures-$t.log")"
done
echo "gpu_kit: every gpu test finds its fixtures in the kit ($(find "$tree/test-data" -type f | wc -l) files of tests/data)"

# ---- Open MPI, relocatable through OPAL_PREFIX (Debian's layout under ompi/)
mpirun_path="$(command -v mpirun || true)"
[ -n "$mpirun_path" ] || die "mpirun not found: install openmpi-bin (scripts/setup.sh)"
ompi_info --path prefix 2>/dev/null | grep -q 'Prefix: /usr$' ||
  die "expected Debian's Open MPI (prefix /usr); found: $(ompi_info --path prefix 2>&1 | head -1)"
ompi_pkglib="$(ompi_info --path pkglibdir | sed -n 's/.*Pkglibdir: //p' | head -1)"
ompi_pkgdata="$(ompi_info --path pkgdatadir | sed -n 's/.*Pkgdatadir: //p' | head -1)"
omp="$tree/ompi"
for b in orterun orted ompi_info; do carry "/usr/bin/$b" "$omp/bin/$b"; done
ln -s orterun "$omp/bin/mpirun"
ln -s orterun "$omp/bin/mpiexec"
for f in "$ompi_pkglib"/*.so; do carry "$f" "$omp/${ompi_pkglib#/usr/}/$(basename "$f")"; done
for f in "$ompi_pkgdata"/*; do [ -f "$f" ] && carry "$f" "$omp/${ompi_pkgdata#/usr/}/$(basename "$f")"; done
# PMIx (external to Debian's Open MPI 4.1): its plugins and help files, found through
# PMIX_INSTALL_PREFIX at run time.
pmix_lib="$(realpath /usr/lib/x86_64-linux-gnu/libpmix.so.2 2>/dev/null || true)"
if [ -n "$pmix_lib" ]; then
  pmix_prefix="$(dirname "$(dirname "$pmix_lib")")"  # .../pmix2
  while IFS= read -r f; do
    carry "$f" "$omp/${pmix_prefix#/usr/}/${f#"$pmix_prefix"/}"
  done < <(find "$pmix_prefix" -type f \( -name '*.so' -o -name '*.txt' \) ! -name 'lib*.so*')
fi

# ---- shared libraries: the closure of every ELF file above, by SONAME
needed_cuda="$stage/cuda-needed.txt"
: >"$needed_cuda"
collect_libs() {
  local elf line name path
  while IFS= read -r elf; do
    while IFS= read -r line; do
      name="${line%% *}"
      path="$(echo "$line" | sed -n 's/.*=> \(\/[^ ]*\) (.*/\1/p')"
      if [[ "$name" =~ $gpu_side ]]; then echo "$name" >>"$needed_cuda"; continue; fi
      [[ "$name" =~ $system_libs ]] && continue
      if [[ "$line" == *"not found"* ]]; then die "$elf needs $name, which is not installed here"; fi
      [ -n "$path" ] || continue
      if [[ "$name" =~ $fallback_libs ]]; then
        [ -f "$tree/lib/fallback/$name" ] || carry "$path" "$tree/lib/fallback/$name"
      elif [ ! -f "$tree/lib/$name" ]; then
        carry "$path" "$tree/lib/$name"
      fi
    done < <(ldd "$elf" 2>/dev/null | sed 's/^[[:space:]]*//' | grep -v '^statically' || true)
  done < <(find "$tree/bin" "$tree/tests" "$omp" -type f -exec sh -c 'head -c4 "$1" | grep -q ELF' _ {} \; -print)
}
collect_libs

# ---- SONAME check against the GPU machine's wheels
sort -u -o "$needed_cuda" "$needed_cuda"
soname_report="$stage/sonames.txt"
{
  echo "CUDA-side libraries the kit loads from the GPU machine (ldd closure of bin/ and tests/):"
  sed 's/^/  /' "$needed_cuda"
  status="match"
  for s in "${expected_sonames[@]}"; do
    if ! grep -qx "$s" "$needed_cuda"; then
      echo "  DIFFERS: the GPU machine provides $s (KINDS.md wheels) but this build does not link it;"
      echo "           it links: $(grep -E "^${s%%.so*}\.so" "$needed_cuda" | tr '\n' ' ')"
      status="DIFFER"
    fi
  done
  while IFS= read -r s; do
    case "$s" in libcuda.so.1|libcublasLt.so.13|libnvrtc*|libnvJitLink*) continue ;; esac
    printf '%s\n' "${expected_sonames[@]}" | grep -qx "$s" ||
      { echo "  DIFFERS: the build also needs $s, which is not among the expected wheels"; status="DIFFER"; }
  done <"$needed_cuda"
  echo "SONAMEs vs the GPU machine's wheels (${expected_sonames[*]}): $status"
} >"$soname_report"

# ---- what was built against (for the run-time comparison in gpu_check.sh)
header_define() { grep -h "#define $2 " "$1" 2>/dev/null | awk '{print $3}' | head -1; }
nvcc_path="$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")"
[ -x "$nvcc_path" ] || nvcc_path="$(command -v nvcc || echo nvcc)"
cuda_inc="$(dirname "$nvcc_path")/../include"
cudnn_inc="$(sed -n 's/^MIRROR_cudnn_INCLUDE_DIR:PATH=//p' "$build/CMakeCache.txt")"
nccl_inc="$(sed -n 's/^MIRROR_nccl_INCLUDE_DIR:PATH=//p' "$build/CMakeCache.txt")"
# Note [Pinned CUDA headers] (cmake/MirrorImportedLibraries.cmake): the versions compiled in are
# read from the binary (mirror-doctor reports CUDNN_VERSION and NCCL_VERSION_CODE as the compiler
# saw them), not from the folders CMake was pointed at, which another copy could have shadowed.
doctor_json="$stage/doctor.json"
"$build/bin/mirror-doctor" --json >"$doctor_json" 2>/dev/null ||
  die "$build/bin/mirror-doctor --json failed; it reports the cuDNN/NCCL versions compiled in"
code_of() {  # code_of cudnn|nccl: the version the binary was compiled against, as x.y.z
  python3 -c '
import json, sys
c = int(json.load(open(sys.argv[1]))["ranks"][0]["gpu"][sys.argv[2] + "_compiled"])
print(f"{c // 10000}.{c // 100 % 100}.{c % 100}" if c > 0 else "")' "$doctor_json" "$1"
}
cudnn_compiled="$(code_of cudnn)" nccl_compiled="$(code_of nccl)"
[ -n "$cudnn_compiled" ] && [ -n "$nccl_compiled" ] || die "mirror-doctor reports no compiled cuDNN/NCCL version"
# The pins against the headers the build really used.
if ((${#pins[@]})); then
  if ! pin_check="$("${pins_py[@]}" compare --doctor-json "$doctor_json" "${pins[@]}" 2>&1)"; then
    ((do_build)) && [ -z "$pin_note" ] && die "built against the pinned wheels, yet: $pin_check"
    loud "this build's cuDNN/NCCL differ from torch $torch_version's pins: $pin_check"
  fi
else
  pin_check="$pin_note"
fi
{
  echo "mirror commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "packed: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(uname -m)"
  echo "build: $build ($(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt"))"
  # The targets nvcc was given (the cache may not name them when CMakeLists.txt chose them).
  archs="$(grep -o -E 'sm_[0-9]+a?' "$build/build.ninja" 2>/dev/null | sort -u | tr '\n' ' ' || true)"
  echo "cuda architectures: ${archs:-unknown}"
  echo "nvcc: $("$nvcc_path" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "cuda runtime compiled: $(header_define "$cuda_inc/cuda_runtime_api.h" CUDART_VERSION)"
  echo "cublas compiled: $(header_define "$cuda_inc/cublas_api.h" CUBLAS_VER_MAJOR).$(header_define "$cuda_inc/cublas_api.h" CUBLAS_VER_MINOR)"
  echo "cudnn compiled: $cudnn_compiled"
  echo "nccl compiled: $nccl_compiled"
  echo "cudnn headers: $cudnn_inc"
  echo "nccl headers: $nccl_inc"
  echo "pinned by: torch $torch_version${pins[*]:+: ${pins[*]}}${pins_from:+ (read from $(basename "$pins_from"))}"
  echo "pins vs compiled: $pin_check"
  echo "open mpi: $(ompi_info --version 2>/dev/null | head -1)"
  echo "glibc needed: $(objdump -T "$tree"/bin/* "$tree"/tests/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1)"
  echo "libstdc++ needed: $(objdump -T "$tree"/bin/* "$tree"/tests/* 2>/dev/null | grep -o 'GLIBCXX_[0-9.]*' | sort -Vu | tail -1)"
  cat "$soname_report"
} >"$tree/BUILD_INFO.txt"

# ---------------------------------------------------------------- pack
rm -rf "$kit"
mkdir -p "$kit"
tar -C "$stage" -czf "$kit/mirror-kit.tar.gz" mirror-kit
cp "$root/scripts/gpu_check.sh" "$kit/gpu_check.sh"
cp "$tree/BUILD_INFO.txt" "$kit/BUILD_INFO.txt"
cat >"$kit/README.txt" <<'EOF'
Mirror GPU bring-up kit (made by scripts/gpu_kit.sh; docs/gpu-kit.md).
On the GPU machine, from the repository root:   bash .gpukit/gpu_check.sh "$OUT"
(device tool: carry [".gpukit"]). It unpacks mirror-kit.tar.gz into a private folder, finds
cuDNN/NCCL/cuBLAS/cudart in the python wheels and the CUDA toolkit, and runs every check it
can; OUTDIR gets summary.txt, all.log and logs.tar.gz. Exit 0 = everything that could run passed.
EOF

unpacked_kib="$(du -sk "$tree" | cut -f1)"
kit_bytes="$(du -sb "$kit" | cut -f1)"
kit_mib="$(awk -v b="$kit_bytes" 'BEGIN {printf "%.1f", b / 1048576}')"
cat "$soname_report"
echo "gpu_kit: pins vs compiled: $pin_check"
echo "gpu_kit: $(grep -c . "$manifest") files carried ($(find "$tree/lib" -name '*.so*' | wc -l) libraries, $((unpacked_kib / 1024)) MiB unpacked)"
echo "gpu_kit: kit $kit: $kit_mib MiB (limit $limit_mib MiB)"
((kit_bytes <= limit_mib * 1048576)) || die "the kit is $kit_mib MiB, over the $limit_mib MiB limit"
echo "gpu_kit: on the GPU machine: bash ${kit#"$root"/}/gpu_check.sh \"\$OUT\"   (device tool: carry [\"${kit#"$root"/}\"])"
