#!/usr/bin/env bash
# Runs Mirror's GPU bring-up checks from the kit made by scripts/gpu_kit.sh, on a machine that
# has (or lacks) a GPU, and nothing of Mirror's dependencies but what the kit carries.
#
#   bash .gpukit/gpu_check.sh [OUTDIR]      (default: $OUT, else ./gpu-check-out)
#
# It unpacks mirror-kit.tar.gz into a private folder (GPU_CHECK_WORK, default a fresh one under
# /tmp; never over /), points OPAL_PREFIX/PATH/LD_LIBRARY_PATH at it, and finds cuDNN, NCCL,
# cuBLAS and the CUDA runtime in python3's nvidia/* wheels or the CUDA toolkit. Then the stages,
# in order of value, each step logged: (1) smoke: mirror-doctor, the kit's Open MPI and oneDNN on
# the CPU, one training step on the GPU; (2) numerics: the gpu test binaries (CUDA vs the CPU
# oracle) and short trainings; (3) two replicas sharing the one GPU (docs/gpu-kit.md, "Two
# replicas on one GPU"): over NCCL when the loaded NCCL is 2.30 or newer
# (NCCL_MULTI_RANK_GPU_ENABLE=1), over MPI with pinned host staging (--comm mpi) always, with
# sync BN, buckets, overlap and compression, and a peer killed mid-run (the watchdog and
# teardown); (4) benchmarks: mirror-bench allreduce and train, PyTorch's step time on the same
# GPU side by side, each kernel's time in one step (Nsight Compute), compute-sanitizer memcheck.
# A step whose GPU, driver, compute-sanitizer, ncu or torch is missing is skipped with the
# reason; without a GPU, the GPU flags are checked to fail
# cleanly. OUTDIR gets summary.txt and all.log, rewritten after every step (so a run cut short
# still reports), and logs.tar.gz at the end (the device tool returns at most 8 files).
# First of all it prints the cuDNN and NCCL versions the kit was built against next to the ones
# this machine loads, and stops (exit 3) when a loaded one is older (GPU_CHECK_ALLOW_OLDER=1 to
# go on anyway). Exit 0 when every step that could run passed. Env: GPU_CHECK_BUDGET (seconds,
# default 540): each step's time limit is cut to what is left of it and steps after it are
# skipped, so the whole run stays inside the device tool's 10 minutes; GPU_CHECK_ONLY (a regular
# expression over step names) runs only the steps it matches.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-${OUT:-$PWD/gpu-check-out}}"
budget="${GPU_CHECK_BUDGET:-540}"
mkdir -p "$out" || { echo "gpu_check: cannot create $out" >&2; exit 2; }
out="$(cd "$out" && pwd)"
start_s=$SECONDS

# ---------------------------------------------------------------- the kit's files
if [ -f "$here/mirror-kit.tar.gz" ]; then
  work="${GPU_CHECK_WORK:-$(mktemp -d /tmp/mirror-gpukit.XXXXXX)}"
  mkdir -p "$work"
  if ! tar -C "$work" -xzf "$here/mirror-kit.tar.gz" 2>/dev/null; then
    python3 -m tarfile -e "$here/mirror-kit.tar.gz" "$work" ||
      { echo "gpu_check: cannot unpack $here/mirror-kit.tar.gz" >&2; exit 2; }
  fi
  kit="$work/mirror-kit"
elif [ -x "$here/../bin/mirror-doctor" ]; then  # run from an unpacked kit's scripts/
  kit="$(cd "$here/.." && pwd)"
  work="$(mktemp -d /tmp/mirror-gpukit.XXXXXX)"
else
  echo "gpu_check: no mirror-kit.tar.gz next to this script and no kit around it; run" \
       "scripts/gpu_kit.sh first and use .gpukit/gpu_check.sh" >&2
  exit 2
fi
logs="$work/logs"
mkdir -p "$logs"
summary="$logs/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }

# ---------------------------------------------------------------- environment
orig_path="$PATH" orig_ld="${LD_LIBRARY_PATH:-}"
python="$(command -v python3 || true)"
env_log="$logs/00-environment.log"
{
  echo "kit: $kit"
  cat "$kit/BUILD_INFO.txt"
  echo
  echo "machine: $(uname -srm); $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"); $(nproc) cores"
  echo "nvidia-smi: $(command -v nvidia-smi || echo 'not installed')"
  nvidia-smi 2>&1 | head -20 || true
} >"$env_log" 2>&1

# Site-packages folders holding NVIDIA's wheels (python's own view, in the original env).
wheel_dirs=()
if [ -n "$python" ]; then
  while IFS= read -r d; do [ -d "$d" ] && wheel_dirs+=("$d"); done < <(
    "$python" - 2>/dev/null <<'PY'
import site, sys, os
roots = list(getattr(site, "getsitepackages", lambda: [])()) + [site.getusersitepackages()]
roots += [p for p in sys.path if p.endswith("-packages")]
try:
    import nvidia
    roots += [os.path.dirname(p) for p in nvidia.__path__]
except Exception:
    pass
seen = set()
for r in roots:
    d = os.path.join(r, "nvidia")
    if os.path.isdir(d) and d not in seen:
        seen.add(d)
        print(d)
PY
  )
fi
toolkit_dirs=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib)
find_lib() {  # find_lib SONAME: the first match, wheels first (what torch uses), then the toolkit
  local d hit
  for d in "${wheel_dirs[@]}"; do
    hit="$(find "$d" -maxdepth 4 -name "$1" 2>/dev/null | sort | head -1)"
    [ -n "$hit" ] && { echo "$hit"; return 0; }
  done
  for d in "${toolkit_dirs[@]}"; do [ -e "$d/$1" ] && { echo "$d/$1"; return 0; }; done
  hit="$(ldconfig -p 2>/dev/null | awk -v s="$1" '$1 == s {print $NF; exit}')"
  [ -n "$hit" ] && echo "$hit"
}
cuda_ld="" missing_cuda=""
declare -A found_lib
{
  echo
  echo "CUDA-side libraries (wheel folders: ${wheel_dirs[*]:-none}):"
  for s in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2 libnvrtc.so.13; do
    p="$(find_lib "$s")"
    if [ -z "$p" ]; then
      echo "  $s: NOT FOUND"
      [ "$s" = libnvrtc.so.13 ] || missing_cuda+=" $s"
      continue
    fi
    echo "  $s: $p"
    found_lib[$s]="$p"
    case ":$cuda_ld:" in *":$(dirname "$p"):"*) ;; *) cuda_ld="${cuda_ld:+$cuda_ld:}$(dirname "$p")" ;; esac
  done
  driver="$(ldconfig -p 2>/dev/null | awk '$1 == "libcuda.so.1" {print $NF; exit}')"
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu; do
    [ -z "$driver" ] && [ -e "$d/libcuda.so.1" ] && { driver="$d/libcuda.so.1"; cuda_ld="$cuda_ld:$d"; }
  done
  echo "  libcuda.so.1 (driver): ${driver:-not found (no NVIDIA driver)}"
  if [ -n "$python" ]; then
    echo "wheel versions: $("$python" -c '
import importlib.metadata as m
names = ["nvidia-cuda-runtime", "nvidia-cublas", "nvidia-cudnn-cu13", "nvidia-nccl-cu13", "torch"]
out = []
for n in names:
    try: out.append(n + " " + m.version(n))
    except Exception: out.append(n + " -")
print(", ".join(out))' 2>/dev/null || echo unknown)"
  fi
} >>"$env_log" 2>&1
[ -z "$missing_cuda" ] || echo "gpu_check: missing CUDA-side libraries:$missing_cuda" >>"$env_log"

export OPAL_PREFIX="$kit/ompi"
pmix_dir="$(find "$kit/ompi/lib" -maxdepth 3 -type d -name 'pmix2' 2>/dev/null | head -1)"
if [ -n "$pmix_dir" ]; then  # Debian's PMIx has absolute data/plugin folders: each one moved
  export PMIX_PREFIX="$pmix_dir" PMIX_LIBDIR="$pmix_dir/lib" PMIX_DATADIR="$pmix_dir/share"
  export PMIX_PKGLIBDIR="$pmix_dir/lib/pmix" PMIX_PKGDATADIR="$pmix_dir/share/pmix"
fi
export PATH="$kit/ompi/bin:$kit/bin:$orig_path"
export LD_LIBRARY_PATH="$kit/lib${cuda_ld:+:$cuda_ld}${orig_ld:+:$orig_ld}"
# The machine's libstdc++ serves unless it is older than the build's (then the kit's copy).
if ldd "$kit/bin/mirror-doctor" 2>&1 | grep -q -E "not found|GLIBCXX|CXXABI"; then
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$kit/lib/fallback"
  ldd "$kit/bin/mirror-doctor" 2>&1 | grep -q -E "GLIBCXX|CXXABI" &&
    export LD_LIBRARY_PATH="$kit/lib/fallback:$LD_LIBRARY_PATH"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The fixtures the gpu tests read (Note [Kit fixtures], tests/gpu/gpu_test_util.h).
export MIRROR_TEST_DATA="$kit/test-data"
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}" MIRROR_COMM_TIMEOUT="${MIRROR_COMM_TIMEOUT:-120}"
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"  # NCCL's own reason next to Mirror's message
{
  echo
  echo "OPAL_PREFIX=$OPAL_PREFIX"
  echo "PMIX_PREFIX=${PMIX_PREFIX:-}"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "ldd mirror-train:"
  ldd "$kit/bin/mirror-train" 2>&1
} >>"$env_log"

# What can run: a GPU (mirror-doctor's verdict), compute-sanitizer, torch with CUDA.
doctor_json="$logs/doctor.json"
gpu=0 gpu_why="mirror-doctor did not run"
if "$kit/bin/mirror-doctor" --json >"$doctor_json" 2>>"$env_log" && [ -z "$python" ]; then
  gpu_why="no python3 to read mirror-doctor --json"
  grep -q '"gpu": *true' "$doctor_json" && gpu=1
elif [ -s "$doctor_json" ]; then
  gpu_why="$("$python" -c '
import json, sys
v = json.load(open(sys.argv[1]))["verdict"]
print("yes" if v["gpu"] else v["text"])' "$doctor_json" 2>/dev/null || echo "cannot read mirror-doctor --json")"
  [ "$gpu_why" = yes ] && gpu=1
else
  gpu_why="mirror-doctor failed to start (see 00-environment.log: missing libraries?)"
fi
gpu_count="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
sanitizer="$(command -v compute-sanitizer || true)"
for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [ -z "$sanitizer" ] && [ -x "$c" ] && sanitizer="$c"
done
ncu="$(command -v ncu || true)"
for c in /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
  [ -z "$ncu" ] && [ -x "$c" ] && ncu="$c"
done
torch_why=""
if [ -z "$python" ]; then
  torch_why="no python3"
elif ! torch_cuda="$(PATH="$orig_path" LD_LIBRARY_PATH="$orig_ld" "$python" -c \
    'import torch; print(torch.__version__, torch.cuda.is_available())' 2>&1 | tail -1)"; then
  torch_why="python3 cannot import torch ($torch_cuda)"
elif [[ "$torch_cuda" != *True ]]; then
  torch_why="torch ($torch_cuda) sees no usable GPU"
fi

# ---------------------------------------------------------------- steps
passed=0 skipped=0 failed=0 n=0
declare -A step_status
mark() {  # mark NAME STATUS DETAIL
  step_status[$1]="$2"
  case "$2" in PASS) passed=$((passed + 1)) ;; SKIP) skipped=$((skipped + 1)) ;; *) failed=$((failed + 1)) ;; esac
  printf '%-5s %-26s %s\n' "$2" "$1" "$3" | tee -a "$summary"
  publish
}
# summary.txt and all.log under $OUT after every step, so a run cut short still leaves what it did.
publish() {
  cp "$summary" "$out/summary.txt"
  for f in "$logs"/*.log; do echo "==================== $(basename "$f")"; cat "$f"; done >"$out/all.log" 2>/dev/null
}
# GPU_CHECK_ONLY: an extended regular expression; only steps whose names match it run (a rerun
# of what a fix touched, inside a short lease).
selected() { [ -z "${GPU_CHECK_ONLY:-}" ] || [[ "$1" =~ ^(${GPU_CHECK_ONLY})$ ]]; }
# Seconds a step may take: its own limit, cut to what is left of the budget.
capped() {
  local left=$((budget - (SECONDS - start_s)))
  echo $(($1 < left ? $1 : left))
}
# step NAME NEEDS TIMEOUT CMD...: NEEDS is a space-separated list of gpu, sanitizer, ncu, torch.
step() {
  local name="$1" needs="$2" limit="$3" need rc t0
  shift 3
  n=$((n + 1))
  local log="$logs/$(printf '%02d' "$n")-$name.log"
  if ! selected "$name"; then mark "$name" SKIP "not selected (GPU_CHECK_ONLY)"; return 0; fi
  for need in $needs; do
    case "$need" in
      gpu) ((gpu)) || { mark "$name" SKIP "needs a GPU: none usable here (why: the GPU line above)"; return 0; } ;;
      sanitizer) [ -n "$sanitizer" ] || { mark "$name" SKIP "compute-sanitizer not found"; return 0; } ;;
      ncu) [ -n "$ncu" ] || { mark "$name" SKIP "Nsight Compute (ncu) not found"; return 0; } ;;
      torch) [ -z "$torch_why" ] || { mark "$name" SKIP "$torch_why"; return 0; } ;;
    esac
  done
  limit="$(capped "$limit")"
  if ((limit < 15)); then
    mark "$name" SKIP "time budget (GPU_CHECK_BUDGET=${budget} s) spent"
    return 0
  fi
  t0=$SECONDS
  echo "\$ $*" >"$log"
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  rc=$?
  echo "[exit $rc after $((SECONDS - t0)) s]" >>"$log"
  last_log="$log" last_rc=$rc
  if [ "$rc" = 0 ]; then
    mark "$name" PASS "($((SECONDS - t0)) s)"
  elif [ -n "${step_refusal:-}" ] && grep -q -E "$step_refusal" "$log"; then
    mark "$name" SKIP "refused as expected: $(grep -o -m1 -E "$step_refusal" "$log")"
  else
    mark "$name" FAIL "(exit $rc$([ "$rc" = 124 ] && echo ', timed out'), $((SECONDS - t0)) s): $(basename "$log")"
    echo "---- last lines of $(basename "$log"):"
    tail -n 40 "$log"
    echo "----"
  fi
  return 0
}

say "Mirror GPU check: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(hostname), kit $(sed -n 's/^mirror commit: //p' "$kit/BUILD_INFO.txt")"

# ---------------------------------------------------------------- versions, before anything runs
# Note [Kit version pinning] (scripts/gpu_kit.sh): a cuDNN or NCCL older than the one the kit was
# built against is not guaranteed to work, so that is checked first and stops the run.
loaded_version() {  # loaded_version cudnn|nccl: what Mirror itself loads (mirror-doctor's report)
  local code
  code="$(grep -o "\"$1_loaded\": *[0-9]*" "$doctor_json" 2>/dev/null | head -1 | grep -o '[0-9]*$')"
  [ -n "$code" ] && [ "$code" -gt 0 ] && echo "$((code / 10000)).$((code / 100 % 100)).$((code % 100))"
}
older() { [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$1" ]; }
say "built against vs loaded ($(sed -n 's/^pinned by: //p' "$kit/BUILD_INFO.txt"))"
too_old=""
for lib in cudnn:cuDNN:libcudnn.so.9 nccl:NCCL:libnccl.so.2; do
  IFS=: read -r key label soname <<<"$lib"
  built="$(sed -n "s/^$key compiled: //p" "$kit/BUILD_INFO.txt")"
  loaded="$(loaded_version "$key")"
  verdict="ok"
  if [ -z "$loaded" ]; then
    verdict="loaded version unknown (mirror-doctor did not report it; see 00-environment.log)"
  elif [ -n "$built" ] && older "$loaded" "$built"; then
    verdict="OLDER than built against"
    too_old+="${too_old:+; }$label $loaded is loaded (${found_lib[$soname]:-$soname}) but the kit was built against $built"
  fi
  say "  $(printf '%-6s' "$label") built against ${built:-unknown}, loaded ${loaded:-?} from ${found_lib[$soname]:-not found}: $verdict"
done
if [ -n "$too_old" ]; then
  if [ "${GPU_CHECK_ALLOW_OLDER:-0}" = 1 ]; then
    say "WARNING: $too_old; continuing because GPU_CHECK_ALLOW_OLDER=1"
  else
    say "STOP: $too_old. A library older than the one a binary was built against is not guaranteed to work (missing symbols, changed behaviour). Install the versions the kit was built against (pip install the pins above, as torch's own metadata requires), or rebuild the kit for this machine's torch (scripts/gpu_kit.sh --torch VERSION), or set GPU_CHECK_ALLOW_OLDER=1 to run anyway."
    cp "$summary" "$out/summary.txt"
    cp "$env_log" "$out/all.log" 2>/dev/null
    echo "gpu_check: stopped: $too_old (see $out/summary.txt)" >&2
    exit 3
  fi
fi

say "GPU: $([ "$gpu" = 1 ] && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 || echo "none usable: $gpu_why")"
say "compute-sanitizer: ${sanitizer:-not found}; ncu: ${ncu:-not found}; torch: ${torch_why:-$torch_cuda}"
say "$(grep -E '^SONAMEs' "$kit/BUILD_INFO.txt")"
[ -z "$missing_cuda" ] || say "MISSING CUDA-side libraries on this machine:$missing_cuda (the GPU binaries cannot load)"
say ""

train_args=(--data synthetic --train-limit 4096 --test-limit 512 --batch-size 64 --max-steps 40 --no-progress)
common_ar=(-b 8 -e 64M -f 4 -n 20 -w 5 -r 3)
nccl_loaded="$(loaded_version nccl)"

# ---------------------------------------------------------------- 1. smoke
say "== 1. smoke"
step doctor "" 60 mirror-doctor
# The kit's own Open MPI (relocated) and oneDNN, on the CPU: they must work on any machine.
step cpu-allreduce-mpi-2ranks "" 120 mpirun -np 2 --bind-to none mirror-bench allreduce --backend mpi -b 8 -e 1M -f 16 -n 5 -w 1 -r 1
step cpu-train-cnn "" 180 mirror-train --model cnn --devices cpu --data synthetic --train-limit 256 --test-limit 64 --batch-size 32 --max-steps 4 --no-progress
step gpu-one-step gpu 90 mirror-train --model cnn --devices gpu --require-gpu --data synthetic --train-limit 256 --test-limit 64 --batch-size 32 --max-steps 1 --no-progress

# ---------------------------------------------------------------- 2. numerics vs the CPU oracle
say "== 2. numerics vs the CPU oracle"
# gpu tests: each binary skips (never passes) without a GPU; count what gtest reports.
gpu_tests_log="$logs/gpu-tests.log"
: >"$gpu_tests_log"
t_pass=0 t_skip=0 t_fail=0 t_bin_fail=0
for t in "$kit"/tests/*; do
  [ -x "$t" ] && selected gpu-tests || continue
  tl="$logs/gpu-test-$(basename "$t").log"
  lim="$(capped 240)"
  timeout --kill-after=10 "$((lim < 15 ? 15 : lim))" "$t" >"$tl" 2>&1
  rc=$?
  cat "$tl" >>"$gpu_tests_log"
  p="$(grep -c '^\[       OK \]' "$tl")" s="$(grep -c '^\[  SKIPPED \] .*(' "$tl")" f="$(grep -c '^\[  FAILED  \] .*(' "$tl")"
  t_pass=$((t_pass + p)) t_skip=$((t_skip + s)) t_fail=$((t_fail + f))
  if [ "$rc" != 0 ]; then
    t_bin_fail=$((t_bin_fail + 1))
    echo "---- $(basename "$t") exited $rc; last lines:"
    tail -n 60 "$tl"
    echo "----"
  fi
done
tests_detail="$t_pass passed, $t_skip skipped, $t_fail failed test cases; $t_bin_fail binaries exited non-zero"
if ! selected gpu-tests; then
  mark gpu-tests SKIP "not selected (GPU_CHECK_ONLY)"
elif ((t_fail || t_bin_fail)); then
  mark gpu-tests FAIL "$tests_detail (gpu-test-*.log)"
elif ((t_pass == 0)); then
  mark gpu-tests SKIP "$tests_detail: $(grep -m1 -o 'no usable GPU.*' "$gpu_tests_log" || echo "$gpu_why")"
else
  mark gpu-tests PASS "$tests_detail"
fi

if ((!gpu)); then
  # Without a GPU the GPU flags must fail with a clear reason (exit 1..127, never a crash).
  refuse_log="$logs/gpu-flags-refused.log"
  : >"$refuse_log"
  refusals_ok=1
  expect_refusal() {
    echo "\$ $*" >>"$refuse_log"
    timeout --kill-after=10 120 "$@" >>"$refuse_log" 2>&1
    local rc=$?
    echo "[exit $rc]" >>"$refuse_log"
    if ((rc == 0 || rc >= 124)) || ! tail -n 5 "$refuse_log" | grep -q -i -E "GPU|CUDA|driver"; then
      refusals_ok=0
      echo "---- expected a clean refusal (exit 1..123 naming the reason) from: $*"
      tail -n 20 "$refuse_log"
    fi
  }
  expect_refusal mirror-train --model cnn --devices gpu "${train_args[@]}"
  expect_refusal mirror-bench allreduce --backend nccl -b 8 -e 1K -n 2 -w 0 -r 1
  expect_refusal mirror-bench train --devices gpu --replicas 1 --steps 2 --warmup 0 --rounds 1
  expect_refusal mirror-train --model cnn --devices gpu --require-gpu --comm mpi "${train_args[@]}"
  if ((refusals_ok)); then
    mark gpu-flags-refused PASS "mirror-train --devices gpu (also --comm mpi), mirror-bench allreduce --backend nccl and train --devices gpu fail with the reason"
  else
    mark gpu-flags-refused FAIL "a GPU flag did not fail cleanly: gpu-flags-refused.log"
  fi
fi

step gpu-train-cnn gpu 150 mirror-train --model cnn --devices gpu --require-gpu "${train_args[@]}" --log-jsonl "$logs/train-cnn.jsonl"
step gpu-train-gru-rows gpu 150 mirror-train --model gru-rows --devices gpu --require-gpu "${train_args[@]}" --log-jsonl "$logs/train-gru-rows.jsonl"

# ---------------------------------------------------------------- 3. two replicas on the one GPU
# docs/gpu-kit.md, "Two replicas on one GPU": every multi-replica path (the strategy, sync
# BN, buckets, overlap, compression, the watchdog and teardown) runs with 2 ranks on one GPU.
say "== 3. two replicas sharing the GPU"
share_args=(--data synthetic --train-limit 2048 --test-limit 256 --batch-size 64 --max-steps 24 --no-progress
            --devices gpu --require-gpu --allow-gpu-sharing --divergence-check-every 4 --bucket-mb 1)
if [ -n "$nccl_loaded" ] && ! older "$nccl_loaded" 2.30.0; then
  step share-nccl-resnet-syncbn gpu 150 env NCCL_MULTI_RANK_GPU_ENABLE=1 mpirun -np 2 --bind-to none \
    mirror-train --model resnet --sync-batchnorm --comm nccl "${share_args[@]}" --log-jsonl "$logs/share-nccl.jsonl"
elif ((!gpu)); then
  mark share-nccl-resnet-syncbn SKIP "needs a GPU: none usable here (why: the GPU line above)"
else
  mark share-nccl-resnet-syncbn SKIP "the loaded NCCL ${nccl_loaded:-(unknown)} refuses two ranks on one GPU (2.30+ with NCCL_MULTI_RANK_GPU_ENABLE=1 accepts it): --comm mpi below"
fi
step share-mpi-resnet-syncbn gpu 150 mpirun -np 2 --bind-to none \
  mirror-train --model resnet --sync-batchnorm --comm mpi "${share_args[@]}" --log-jsonl "$logs/share-mpi.jsonl"
step share-mpi-cnn-bf16-wire gpu 120 mpirun -np 2 --bind-to none \
  mirror-train --model cnn --comm mpi --compression bf16 --precision mixed_bfloat16 "${share_args[@]}"
# A peer killed mid-run: the survivor must end (its watchdog, or the staged communicator's MPI
# timeout, after --comm-timeout 20 s) with a non-zero exit, not hang and not crash; mpirun is
# asked to leave it running, so that it has to find out by itself.
cat >"$work/kill_peer.sh" <<'KILL'
comm="$1" out="$2"
mpirun -np 2 --bind-to none --mca orte_abort_on_non_zero_status 0 bash -c '
  if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then (sleep 15; kill -9 $$) & fi
  exec mirror-train --model cnn --comm '"$comm"' --comm-timeout 20 --epochs 1000 --data synthetic \
    --train-limit 2048 --batch-size 64 --no-progress --devices gpu --require-gpu --allow-gpu-sharing' \
  >"$out" 2>&1
rc=$?
cat "$out"
if grep -q -E "Segmentation fault|core dumped|SIGSEGV" "$out"; then echo "CRASH after the peer was killed"; exit 1; fi
if [ "$rc" = 0 ]; then echo "exit 0 although a peer was killed"; exit 1; fi
echo "survivor's own report: $(grep -m1 -o -E "aborted[^.]*|did not complete[^.]*|CommError[^.]*" "$out" || echo 'none (mpirun ended it)')"
exit 0
KILL
if [ -n "$nccl_loaded" ] && ! older "$nccl_loaded" 2.30.0; then
  step share-nccl-peer-killed gpu 120 env NCCL_MULTI_RANK_GPU_ENABLE=1 bash "$work/kill_peer.sh" nccl "$logs/kill-nccl.out"
fi
step share-mpi-peer-killed gpu 120 bash "$work/kill_peer.sh" mpi "$logs/kill-mpi.out"

# ---------------------------------------------------------------- 4. benchmarks
say "== 4. benchmarks"
step nccl-allreduce-1rank gpu 150 mpirun -np 1 --bind-to none mirror-bench allreduce --backend nccl "${common_ar[@]}"
if ((gpu_count >= 2)); then
  step nccl-allreduce-2ranks gpu 150 mpirun -np 2 --bind-to none mirror-bench allreduce --backend nccl "${common_ar[@]}"
fi
bench_common=(--devices gpu --replicas 1 --steps 30 --warmup 5 --rounds 2 --batch-per-replica 64 --threads 4)
step bench-train-gpu-cnn gpu 150 mirror-bench train --model cnn "${bench_common[@]}" --json "$logs/bench-cnn.json"
step bench-train-gpu-gru gpu 150 mirror-bench train --model gru-rows "${bench_common[@]}" --json "$logs/bench-gru.json"
step bench-train-gpu-resnet gpu 150 mirror-bench train --model resnet "${bench_common[@]}" --json "$logs/bench-resnet.json"
step bench-train-gpu-cnn-bf16 gpu 150 mirror-bench train --model cnn --precision mixed_bfloat16 "${bench_common[@]}" --json "$logs/bench-cnn-bf16.json"
step bench-train-gpu-resnet-bf16 gpu 150 mirror-bench train --model resnet --precision mixed_bfloat16 "${bench_common[@]}" --json "$logs/bench-resnet-bf16.json"
# Where the step's host time goes: step-bench times each layer's host calls (what queuing its
# work costs), then each layer between two waits for the device (its cost with nothing
# overlapping), against the step's median and the time the host took to queue the whole step.
host_profile_logs=()
# MIRROR_CUDNN_LOG=1: each convolution shape's choice (graph-API plan or legacy algorithm).
step host-profile-gpu-resnet gpu 120 env MIRROR_CUDNN_LOG=1 step-bench --device gpu --model resnet --batch 64 --steps 20 --warmup 5 --threads 4 --profile --profile-gpu both
[ "${step_status[host-profile-gpu-resnet]}" = PASS ] && host_profile_logs+=("$last_log")
# The same step through cuDNN's legacy convolution API (Note [Convolution plans]), for the ratio.
step step-gpu-resnet-legacy-api gpu 90 env MIRROR_CUDNN_LEGACY=1 step-bench --device gpu --model resnet --batch 64 --steps 20 --warmup 5 --threads 4
[ "${step_status[step-gpu-resnet-legacy-api]}" = PASS ] && host_profile_logs+=("$last_log")
step host-profile-gpu-cnn gpu 90 step-bench --device gpu --model cnn --batch 64 --steps 20 --warmup 5 --threads 4 --profile --profile-gpu both
[ "${step_status[host-profile-gpu-cnn]}" = PASS ] && host_profile_logs+=("$last_log")
torch_logs=()
# PyTorch runs in the machine's own environment, not the kit's library path.
step torch-step-gpu "gpu torch" 180 env PATH="$orig_path" LD_LIBRARY_PATH="$orig_ld" \
  "$python" "$kit/bench/step_torch.py" --device cuda --model cnn,gru-rows,resnet --batch 64 --steps 30 --warmup 5 --threads 4
[ "${step_status[torch-step-gpu]}" = PASS ] && torch_logs+=("$last_log")
step torch-step-gpu-bf16 "gpu torch" 180 env PATH="$orig_path" LD_LIBRARY_PATH="$orig_ld" \
  "$python" "$kit/bench/step_torch.py" --device cuda --model cnn,resnet --precision mixed_bfloat16 --batch 64 --steps 30 --warmup 5 --threads 4
[ "${step_status[torch-step-gpu-bf16]}" = PASS ] && torch_logs+=("$last_log")
# Where the GPU step's time goes: every kernel's duration (Nsight Compute, one metric, clocks
# left alone) over one step (about 0.2 s of profiling per launch: the ResNet's 3 steps outran
# 150 s), summed by kernel against the step's wall time
# (scripts/gpu_kernel_times.py).
cat >"$work/profile_step.sh" <<'PROFILE'
# profile_step.sh NCU PYTHON KIT CSV BENCH_JSON mirror-bench-train-args...
ncu="$1" python="$2" kit="$3" csv="$4" json="$5"
shift 5
"$ncu" --csv --metrics gpu__time_duration.sum --print-units base --clock-control none \
  --log-file "$csv" mirror-bench train "$@" --devices gpu --replicas 1 --steps 1 --warmup 0 \
  --rounds 1 --batch-per-replica 64 --threads 4 >/dev/null || exit
step_ms="$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))[0]["step_ms"])' "$json" 2>/dev/null)"
"$python" "$kit/scripts/gpu_kernel_times.py" "$csv" --steps 1 ${step_ms:+--step-ms "$step_ms"}
PROFILE
profile=(bash "$work/profile_step.sh" "$ncu" "$python" "$kit")
profile_logs=()
step profile-gpu-resnet "gpu ncu" 150 "${profile[@]}" "$logs/ncu-resnet.csv" "$logs/bench-resnet.json" --model resnet
[ "${step_status[profile-gpu-resnet]}" = PASS ] && profile_logs+=("$last_log")
step profile-gpu-cnn-bf16 "gpu ncu" 150 "${profile[@]}" "$logs/ncu-cnn-bf16.csv" "$logs/bench-cnn-bf16.json" \
  --model cnn --precision mixed_bfloat16
[ "${step_status[profile-gpu-cnn-bf16]}" = PASS ] && profile_logs+=("$last_log")
san_args=(--tool memcheck --error-exitcode 9 --print-limit 50)
small_train=(--devices gpu --require-gpu --data synthetic --train-limit 128 --test-limit 32 --batch-size 16 --max-steps 2 --no-progress)
step memcheck-train-gru-rows "gpu sanitizer" 200 "$sanitizer" "${san_args[@]}" mirror-train --model gru-rows "${small_train[@]}"
step memcheck-train-cnn "gpu sanitizer" 200 "$sanitizer" "${san_args[@]}" mirror-train --model cnn "${small_train[@]}"
# The ResNet: BatchNorm's device path and the graph-API convolution plans.
step memcheck-train-resnet "gpu sanitizer" 200 "$sanitizer" "${san_args[@]}" mirror-train --model resnet "${small_train[@]}"

# ---------------------------------------------------------------- side by side
if [ "${step_status[bench-train-gpu-cnn]}" = PASS ] || ((${#torch_logs[@]})); then
  say ""
  say "one training step on this GPU, batch 64 (median ms; Mirror: mirror-bench train --devices gpu --replicas 1; PyTorch: bench/step_torch.py --device cuda, autocast for mixed_bfloat16):"
  "$python" - "$logs" "${torch_logs[@]}" <<'PY' | tee -a "$summary"
import json, os, re, sys
logs = sys.argv[1]
def mirror(name):
    try: return json.load(open(os.path.join(logs, f"bench-{name}.json")))[0]["step_ms"]
    except Exception: return None
torch = {}
for path in sys.argv[2:]:
    for line in open(path):
        m = re.match(r"torch (\S+) (\S+) .*median ([0-9.]+) ms/step", line)
        if m: torch[(m.group(1), m.group(2))] = float(m.group(3))
rows = (("cnn", "cnn", "cnn", "float32"), ("gru-rows", "gru", "gru-rows", "float32"),
        ("resnet", "resnet", "resnet", "float32"),
        ("cnn bf16", "cnn-bf16", "cnn", "mixed_bfloat16"),
        ("resnet bf16", "resnet-bf16", "resnet", "mixed_bfloat16"))
fmt = lambda v: f"{v:8.3f}" if v is not None else "       -"
for label, bench, model, precision in rows:
    m, t = mirror(bench), torch.get((model, precision))
    ratio = f"{m / t:6.2f}" if m and t else "     -"
    print(f"  {label:12s} Mirror {fmt(m)}  PyTorch {fmt(t)}  ratio {ratio}")
PY
fi
for f in "${profile_logs[@]}"; do
  say ""
  say "kernel time by kernel, $(basename "$f" .log | sed 's/^[0-9]*-//') (ncu gpu__time_duration; scripts/gpu_kernel_times.py):"
  grep -v -E '^\$ |^\[exit ' "$f" | tee -a "$summary"
done
for f in "${host_profile_logs[@]}"; do
  say ""
  say "step-bench on the GPU, $(basename "$f" .log | sed 's/^[0-9]*-//') (with --profile --profile-gpu both: host and device time by layer):"
  grep -v -E '^\$ |^\[exit ' "$f" | tee -a "$summary"
done
if [ "${step_status[nccl-allreduce-1rank]}" = PASS ]; then
  say ""
  say "NCCL all-reduce, 1 rank (first and last rows):"
  grep -E '^ +[0-9]' "$logs"/*-nccl-allreduce-1rank.log | sed -n '1p;$p' | tee -a "$summary"
fi

# ---------------------------------------------------------------- outputs
say ""
say "totals: $passed passed, $skipped skipped, $failed failed ($((SECONDS - start_s)) s)"
publish
tar -C "$work" -czf "$out/logs.tar.gz" logs
echo "gpu_check: $out/summary.txt, all.log, logs.tar.gz"
((failed == 0))
