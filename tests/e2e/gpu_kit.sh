#!/usr/bin/env bash
# The GPU bring-up kit end to end, without a GPU: packs the kit from the given CUDA build
# (scripts/gpu_kit.sh --no-build), checks it stays within the device tool's 64 MiB, copies it
# into a fresh folder and runs its gpu_check.sh there. Where `unshare -m` works (root), the
# system's copies of what the kit carries (Open MPI and its helpers and plugins, PMIx, oneDNN,
# Boost, hwloc, libevent, ...) are hidden first, as on the GPU machine, so the run shows the
# kit is complete. Checks: exit 0, the CPU steps passed (the kit's Open MPI and oneDNN work),
# and without a GPU every GPU step was skipped with its reason and the GPU flags failed cleanly.
# Version pinning (Note [Kit version pinning], scripts/gpu_kit.sh), with no network: the pins
# come from torch-2.11.0.METADATA (the Requires-Dist of torch 2.11.0's PyPI metadata) and must
# match what the build compiled against, in BUILD_INFO.txt; gpu_kit_pins.py's errors are
# checked on small made-up inputs; gpu_check.sh must print built-against vs loaded versions
# first and stop (exit 3) when a loaded library is older than the kit's. GPU_CHECK_ONLY must run
# only the selected steps, and scripts/gpu_kernel_times.py must sum rows of a real ncu log
# (ncu-kernel-times.csv) per kernel.
# The kit carries tests/data, and every gpu test that reads a fixture finds it there (its
# KitFixtures test passes on the unpacked kit and fails on an empty folder).
# Usage: gpu_kit.sh BUILD_DIR (exit 77 = skipped: the build has no CUDA backend).
set -euo pipefail
build="$(realpath "${1:?usage: gpu_kit.sh BUILD_DIR}")"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
doctor="$build/bin/mirror-doctor"
[[ -x "$doctor" ]] || { echo "SKIP: $doctor not built"; exit 77; }
# The CUDA backend is in libmirror.so (or the program, when linked statically).
cuda_built=0
for f in "$doctor" $(ldd "$doctor" 2>/dev/null | awk '/libmirror\.so/ {print $3}'); do
  readelf -d "$f" 2>/dev/null | grep -q 'NEEDED.*libcudart' && cuda_built=1
done
((cuda_built)) ||
  { echo "SKIP: $build has no CUDA backend (built without nvcc/cuDNN/NCCL): nothing to pack"; exit 77; }
for src in "$root"/tests/gpu/*_test.cpp; do
  t="$build/tests/$(basename "$src" .cpp)"
  [[ -x "$t" ]] || { echo "SKIP: $t not built"; exit 77; }
done
command -v mpirun >/dev/null || { echo "SKIP: Open MPI not installed (nothing to carry)"; exit 77; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# ---- mirror-bench's GPU options: bad values are refused by name; auto picks MPI without a GPU
bench="$build/bin/mirror-bench"
if "$bench" allreduce --backend tcp >"$work/bad.txt" 2>&1; then fail "--backend tcp was accepted"; fi
grep -q "auto, mpi or nccl" "$work/bad.txt" || fail "bad --backend message: $(cat "$work/bad.txt")"
if "$bench" train --devices tpu >"$work/bad.txt" 2>&1; then fail "--devices tpu was accepted"; fi
grep -q "cpu or gpu" "$work/bad.txt" || fail "bad --devices message: $(cat "$work/bad.txt")"
if ! "$doctor" --json | grep -q '"gpu": *true'; then
  "$bench" allreduce -b 8 -e 64 -n 1 -w 0 -r 1 >"$work/auto.txt" 2>&1 || fail "$(cat "$work/auto.txt")"
  grep -q "^# backend mpi (auto: rank 0: no usable GPU" "$work/auto.txt" ||
    fail "--backend auto without a GPU does not say why it uses MPI: $(cat "$work/auto.txt")"
fi

# ---- the pins: read from torch's metadata, compared with headers (no network, no download)
pins_py=(python3 "$root/scripts/gpu_kit_pins.py")
metadata="$root/tests/e2e/torch-2.11.0.METADATA"
"${pins_py[@]}" resolve --torch 2.11.0 --metadata "$metadata" >"$work/pins.txt" || fail "resolve: $(cat "$work/pins.txt")"
grep -qx "cudnn=nvidia-cudnn-cu13==9.19.0.56" "$work/pins.txt" || fail "cuDNN pin: $(cat "$work/pins.txt")"
grep -qx "nccl=nvidia-nccl-cu13==2.28.9" "$work/pins.txt" || fail "NCCL pin: $(cat "$work/pins.txt")"
printf '%s\n' '{"install": [{"metadata": {"name": "torch", "version": "2.12.0", "requires_dist": [' \
  '"nvidia-cudnn-cu13==9.20.1.3; platform_system == \"Linux\"",' \
  '"nvidia-nccl-cu13==2.29.2; platform_system == \"Linux\"", "filelock"]}}]}' >"$work/report.json"
"${pins_py[@]}" resolve --torch 2.12.0 --metadata "$work/report.json" >"$work/pins2.txt" ||
  fail "a pip --report file was not read: $(cat "$work/pins2.txt")"
grep -qx "nccl=nvidia-nccl-cu13==2.29.2" "$work/pins2.txt" || fail "pip report pins: $(cat "$work/pins2.txt")"
grep -v nccl "$metadata" >"$work/no-nccl.METADATA"
if "${pins_py[@]}" resolve --metadata "$work/no-nccl.METADATA" >/dev/null 2>"$work/err.txt"; then
  fail "metadata without an NCCL pin was accepted"
fi
grep -q "pins no exact version of nvidia-nccl-cu13" "$work/err.txt" || fail "missing pin: $(cat "$work/err.txt")"
if "${pins_py[@]}" resolve --torch 2.10.0 --metadata "$metadata" >/dev/null 2>"$work/err.txt"; then
  fail "torch 2.11.0's metadata was accepted for torch 2.10.0"
fi
grep -q "describes torch 2.11.0, not the requested 2.10.0" "$work/err.txt" || fail "$(cat "$work/err.txt")"
cudnn_inc="$(sed -n 's/^MIRROR_cudnn_INCLUDE_DIR:PATH=//p' "$build/CMakeCache.txt")"
nccl_inc="$(sed -n 's/^MIRROR_nccl_INCLUDE_DIR:PATH=//p' "$build/CMakeCache.txt")"
if "${pins_py[@]}" compare --cudnn-include "$cudnn_inc" --nccl-include "$nccl_inc" \
    nvidia-cudnn-cu13==9.0.0.1 nvidia-nccl-cu13==2.0.1 >"$work/cmp.txt"; then
  fail "headers were taken for cuDNN 9.0.0 / NCCL 2.0.1: $(cat "$work/cmp.txt")"
fi
grep -q "^DIFFER (nvidia-cudnn-cu13 9.0.0.1 vs headers " "$work/cmp.txt" || fail "compare: $(cat "$work/cmp.txt")"
# The versions the binary was compiled against (what the compiler saw, Note [Pinned CUDA headers]).
"$doctor" --json >"$work/doctor.json"
if "${pins_py[@]}" compare --doctor-json "$work/doctor.json" nvidia-cudnn-cu13==9.0.0.1 \
    nvidia-nccl-cu13==2.28.9 >"$work/cmp2.txt"; then
  fail "the binary was taken for cuDNN 9.0.0: $(cat "$work/cmp2.txt")"
fi
grep -q "^DIFFER (nvidia-cudnn-cu13 9.0.0.1 vs compiled " "$work/cmp2.txt" || fail "compare --doctor-json: $(cat "$work/cmp2.txt")"

# ---- pack
bash "$root/scripts/gpu_kit.sh" --build-dir "$build" --no-build --kit "$work/kit" \
  --pins-from "$metadata" | tee "$work/pack.log"
grep -q "^SONAMEs vs the GPU machine's wheels .*: match$" "$work/pack.log" ||
  fail "the build's CUDA SONAMEs differ from the GPU machine's wheels (see above)"
info="$work/kit/BUILD_INFO.txt"
grep -qx "pinned by: torch 2.11.0: nvidia-cudnn-cu13==9.19.0.56 nvidia-nccl-cu13==2.28.9 (read from torch-2.11.0.METADATA)" "$info" ||
  fail "BUILD_INFO.txt does not record the pins: $(grep '^pinned' "$info")"
grep -qx "pins vs compiled: match (nvidia-cudnn-cu13 9.19.0.56 vs compiled 9.19.0; nvidia-nccl-cu13 2.28.9 vs compiled 2.28.9)" "$info" ||
  fail "this build does not compile against torch 2.11.0's cuDNN/NCCL: $(grep '^pins vs' "$info") (scripts/gpu_kit.sh builds against the pinned wheels)"
grep -qx "cudnn compiled: 9.19.0" "$info" || fail "$(grep '^cudnn compiled' "$info")"
grep -qx "nccl compiled: 2.28.9" "$info" || fail "$(grep '^nccl compiled' "$info")"
bytes="$(du -sb "$work/kit" | cut -f1)"
((bytes <= 64 * 1048576)) || fail "the kit is $bytes bytes, over 64 MiB"
grep -q "^gpu_kit: kit .*MiB (limit 64 MiB)$" "$work/pack.log" || fail "the kit's size is not printed"
for f in gpu_check.sh mirror-kit.tar.gz BUILD_INFO.txt README.txt; do
  [[ -s "$work/kit/$f" ]] || fail "the kit lacks $f"
done
tar -tzf "$work/kit/mirror-kit.tar.gz" >"$work/contents.txt"
for f in bin/mirror-train bin/mirror-bench bin/mirror-doctor bin/step-bench lib/libdnnl.so.2 lib/libmpi.so.40 \
         ompi/bin/orted bench/step_torch.py launch/mirrorrun; do
  grep -qx "mirror-kit/$f" "$work/contents.txt" || fail "the kit lacks $f"
done
if grep -E 'lib(cuda|cudart|cublas|cudnn|nccl)[^/]*\.so' "$work/contents.txt"; then
  fail "the kit carries CUDA-side libraries the GPU machine provides"
fi

# ---- the fixtures of the gpu tests (Note [Kit fixtures], tests/gpu/gpu_test_util.h): every file
# of tests/data is in the kit; a gpu test that reads files reads them through fixture_path() and
# lists them in a KitFixtures test, which passes on the unpacked kit and fails without the files.
grep -q "^gpu_kit: every gpu test finds its fixtures in the kit" "$work/pack.log" ||
  fail "the packing did not check the gpu tests' fixtures"
while IFS= read -r f; do
  grep -qx "mirror-kit/test-data/${f#"$root"/tests/data/}" "$work/contents.txt" ||
    fail "the kit lacks the fixture ${f#"$root"/}"
done < <(find "$root/tests/data" -type f)
mkdir -p "$work/fixtures" "$work/no-data"
tar -C "$work/fixtures" -xzf "$work/kit/mirror-kit.tar.gz"
for src in "$root"/tests/gpu/*_test.cpp; do
  t="$(basename "$src" .cpp)"
  if grep -q 'MIRROR_SOURCE_DIR' "$src"; then
    fail "$t names the source tree; read fixtures through fixture_path() (Note [Kit fixtures])"
  fi
  grep -q 'fixture_path(' "$src" || continue
  grep -q 'TEST(KitFixtures' "$src" || fail "$t reads fixtures but has no KitFixtures test"
  MIRROR_TEST_DATA="$work/fixtures/mirror-kit/test-data" "$build/tests/$t" \
    --gtest_filter='KitFixtures.*' >"$work/fixtures-$t.log" 2>&1 ||
    fail "$t does not find its fixtures in the kit: $(tail -3 "$work/fixtures-$t.log")"
  grep -q '^\[  PASSED  \] [1-9]' "$work/fixtures-$t.log" || fail "$t ran no KitFixtures test"
  if MIRROR_TEST_DATA="$work/no-data" "$build/tests/$t" --gtest_filter='KitFixtures.*' \
    >"$work/nodata-$t.log" 2>&1; then
    fail "$t's KitFixtures test passed without its files"
  fi
done

# ---- a fresh copy, run where the system's copies of what it carries are hidden
cp -r "$work/kit" "$work/fresh"
tar -xzOf "$work/kit/mirror-kit.tar.gz" mirror-kit/MANIFEST.txt >"$work/manifest.txt"
carried='/(libmpi|libopen-|liboshmem|libmca_common|libpmix|libdnnl|libboost|libhwloc|libevent|libfabric|libuc[mpst]|libpsm|libinfinipath|libibverbs|librdmacm|libefa|libmunge|libgomp)[^/]*$'
cat >"$work/hidden-run.sh" <<EOF
set -e
for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/share/openmpi /etc/openmpi; do
  [ -d "\$d" ] && mount -t tmpfs none "\$d"
done
for f in \$(sed -n 's/.* <- //p' "$work/manifest.txt" | grep -E '$carried' | grep -v '^/usr/lib/x86_64-linux-gnu/\(openmpi\|pmix2\)/'; echo /usr/bin/orterun /usr/bin/orted /usr/bin/ompi_info); do
  [ -f "\$f" ] && mount --bind /dev/null "\$f"
done
set +e
exec bash "$work/fresh/gpu_check.sh" "$work/out"
EOF
hidden=0
if unshare -m --propagation private true 2>/dev/null; then
  hidden=1
  echo "running gpu_check.sh with the system's Open MPI, PMIx, oneDNN, Boost, ... hidden"
  set +e
  unshare -m --propagation private bash "$work/hidden-run.sh"
  rc=$?
  set -e
else
  echo "NOTE: unshare -m is not permitted here; running gpu_check.sh without hiding the system's libraries"
  set +e
  bash "$work/fresh/gpu_check.sh" "$work/out"
  rc=$?
  set -e
fi
[[ "$rc" == 0 ]] || fail "gpu_check.sh exited $rc"

# ---- what it did
summary="$work/out/summary.txt"
[[ -s "$summary" && -s "$work/out/all.log" && -s "$work/out/logs.tar.gz" ]] || fail "outputs missing"
(($(find "$work/out" -type f | wc -l) <= 8)) || fail "more than 8 output files (the device tool returns 8)"
for s in doctor cpu-allreduce-mpi-2ranks cpu-train-cnn; do
  grep -q "^PASS  $s " "$summary" || fail "step $s did not pass: $(grep " $s " "$summary")"
done
grep -q -E "^(PASS|SKIP)  gpu-tests " "$summary" || fail "gpu tests: $(grep ' gpu-tests ' "$summary")"
grep -q "^totals: .* 0 failed" "$summary" || fail "$(grep '^totals' "$summary")"
# Built-against vs loaded versions come first, before any step.
sed -n 2p "$summary" | grep -q "^built against vs loaded (torch 2.11.0: " || fail "versions not first: $(head -3 "$summary")"
for lib in cuDNN NCCL; do
  grep -qE "^  $lib +built against [0-9.]+, loaded [0-9.]+ from /.*: ok$" "$summary" ||
    fail "$lib versions: $(grep "^  $lib" "$summary")"
done
if grep -q '^GPU: none usable' "$summary"; then
  grep -q "^PASS  gpu-flags-refused " "$summary" || fail "the GPU flags did not fail cleanly without a GPU"
  for s in gpu-one-step gpu-train-cnn gpu-train-gru-rows share-mpi-resnet-syncbn \
           share-mpi-cnn-bf16-wire share-mpi-peer-killed nccl-allreduce-1rank bench-train-gpu-cnn \
           bench-train-gpu-gru bench-train-gpu-resnet bench-train-gpu-resnet-bf16 \
           memcheck-train-gru-rows memcheck-train-cnn torch-step-gpu torch-step-gpu-bf16 \
           profile-gpu-resnet profile-gpu-cnn-bf16; do
    grep -q -E "^SKIP  $s +needs a GPU" "$summary" || fail "step $s: $(grep " $s " "$summary")"
  done
fi
# The stages come in order of value (smoke, numerics, two replicas on the GPU, benchmarks).
grep -n "^== " "$summary" | cut -d' ' -f2 | tr -d '.\n' | grep -qx "1234" ||
  fail "stages out of order: $(grep '^== ' "$summary")"
grep -q -E "^SKIP  share-nccl-resnet-syncbn +needs a GPU" "$summary" ||
  fail "the NCCL sharing step: $(grep ' share-nccl-resnet-syncbn ' "$summary")"
grep -q "^OPAL_PREFIX=/tmp/mirror-gpukit\.[^/]*/mirror-kit/ompi$" "$work/out/all.log" ||
  fail "gpu_check.sh did not point OPAL_PREFIX at its private copy of the kit"
# Open MPI / PMIx complaints about files they cannot find mean the relocation is incomplete.
if grep -n -E "couldn't open the help file|unable to open mca_|component .* not found" "$work/out/all.log"; then
  fail "Open MPI or PMIx looked for files outside the kit (above)"
fi
# ---- GPU_CHECK_ONLY runs the selected steps and reports the others as not selected
GPU_CHECK_ONLY='doctor|gpu-tests' bash "$work/kit/gpu_check.sh" "$work/out-only" >"$work/only.log" 2>&1 ||
  fail "gpu_check.sh with GPU_CHECK_ONLY failed: $(tail -5 "$work/only.log")"
grep -q "^PASS  doctor " "$work/out-only/summary.txt" || fail "GPU_CHECK_ONLY: doctor did not run"
grep -q -E "^SKIP  cpu-train-cnn +not selected \(GPU_CHECK_ONLY\)" "$work/out-only/summary.txt" ||
  fail "GPU_CHECK_ONLY: cpu-train-cnn: $(grep ' cpu-train-cnn ' "$work/out-only/summary.txt")"
grep -q -E "^(PASS|SKIP)  gpu-tests +[0-9]+ passed" "$work/out-only/summary.txt" ||
  fail "GPU_CHECK_ONLY: the gpu tests did not run: $(grep ' gpu-tests ' "$work/out-only/summary.txt")"
# ---- the kernel-time summary of the profile steps, on rows of a real ncu log (H200, 2026-11-27)
times="$(python3 "$root/scripts/gpu_kernel_times.py" "$root/tests/e2e/ncu-kernel-times.csv" --steps 1 --step-ms 0.5)" ||
  fail "gpu_kernel_times.py failed on tests/e2e/ncu-kernel-times.csv"
grep -q "^12 kernel launches over 1 steps .*: 12 launches and 0.086 ms of kernel time per step$" <<<"$times" &&
  grep -q "^step wall time 0.500 ms: kernels fill 17 % of it$" <<<"$times" &&
  grep -q -E "^bias_add_kernel +2 +0\.0183 +21\.4%$" <<<"$times" &&
  grep -q -E "^nchwToNhwcKernel +2 +0\.0080 " <<<"$times" ||
  fail "gpu_kernel_times.py summary: $times"
# ---- a machine that loads an older cuDNN than the kit's: gpu_check.sh stops first, saying so
mkdir -p "$work/older"
tar -C "$work/older" -xzf "$work/kit/mirror-kit.tar.gz"
sed -i 's/^cudnn compiled: .*/cudnn compiled: 9.99.0/' "$work/older/mirror-kit/BUILD_INFO.txt"
set +e
bash "$work/older/mirror-kit/scripts/gpu_check.sh" "$work/out-older" >"$work/older.log" 2>&1
rc=$?
set -e
[[ "$rc" == 3 ]] || fail "gpu_check.sh with an older cuDNN exited $rc, not 3: $(tail -5 "$work/older.log")"
grep -q "^STOP: cuDNN [0-9.]* is loaded (.*) but the kit was built against 9.99.0\." "$work/out-older/summary.txt" ||
  fail "no STOP line naming both versions: $(cat "$work/out-older/summary.txt")"
if grep -qE "^(PASS|SKIP|FAIL) " "$work/out-older/summary.txt"; then fail "steps ran after the STOP"; fi

echo "PASS (kit $(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1048576}') MiB, system copies hidden: $hidden)"
