#!/usr/bin/env bash
# DESIGN invariant 10, memory does not grow with the data: two ranks train a model on a uint8
# .npy three times larger than the memory limit of the cgroup they run in (cgroup v1, under
# /sys/fs/cgroup/memory). A rank that read the data into its memory would be killed by the
# kernel's OOM killer, and so fail this test; the control run, a process that reads the file
# whole inside the same cgroup, shows that the limit bites. Prints the cgroup's peak usage
# (page cache included, which the kernel reclaims at the limit). Exit 77 (skipped) with the
# reason where no writable cgroup v1 memory controller exists (not root, cgroup v2 only).
# Usage: data_memory.sh <build dir>; DATA_MEMORY_LIMIT_MB (default 384) sets the limit.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
e2e_need_mpirun
command -v python3 >/dev/null || { echo "skip: python3 not found"; exit 77; }
controller=/sys/fs/cgroup/memory
if [ ! -f "$controller/memory.limit_in_bytes" ] || [ ! -w "$controller" ]; then
  echo "skip: no writable cgroup v1 memory controller at $controller (needs root and cgroup v1)"
  exit 77
fi
limit_mb="${DATA_MEMORY_LIMIT_MB:-384}"
data_mb=$((3 * limit_mb))
cg="$controller/mirror-e2e-data-memory-$$"
mkdir "$cg" || { echo "skip: cannot create a cgroup under $controller"; exit 77; }
cleanup() {
  # Every process of the cgroup has exited once its subshell returned; remove the group.
  rmdir "$cg" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
echo $((limit_mb << 20)) >"$cg/memory.limit_in_bytes"
# No swap in the way: a process over the limit is killed, not paged out.
[ -f "$cg/memory.memsw.limit_in_bytes" ] && echo $((limit_mb << 20)) >"$cg/memory.memsw.limit_in_bytes" 2>/dev/null

# Written outside the cgroup: uint8 [N, 1, 28, 28] of noise, labels i % 10.
python3 "$root/tests/e2e/make_data_sources.py" --noise "$work" $((data_mb * 1048576 / 1000000)) ||
  { echo "FAIL: writing the data"; exit 1; }
# The written pages are cached and charged to this shell's cgroup, not the test's.

in_cgroup() { (echo "$BASHPID" >"$cg/cgroup.procs" && exec "$@"); }

# Control: reading the file whole inside the cgroup is killed.
if in_cgroup python3 -c "import sys; data = open(sys.argv[1], 'rb').read(); print(len(data))" \
     "$work/x.npy" >control.out 2>&1; then
  fail "a process read ${data_mb} MiB inside a ${limit_mb} MiB cgroup: the limit does not bite"
fi
echo 0 >"$cg/memory.max_usage_in_bytes" 2>/dev/null
oom_kills() { awk '/oom_kill /{print $2}' "$cg/memory.oom_control"; }
oom_before=$(oom_kills)

# A small model, so that what the ranks hold besides the data (the libraries, MPI, the model and
# its step: about 120 MiB of anonymous memory each) leaves room under the limit.
cat >tiny.json <<'JSON'
{"name": "tiny", "layers": [{"type": "flatten"}, {"type": "dense", "units": 32, "activation": "relu"},
                            {"type": "dense", "units": 10}]}
JSON
in_cgroup timeout -k 5 400 mpirun --oversubscribe --bind-to none -np 2 "$train" --model-spec tiny.json \
  --train-x "$work/x.npy" --train-y "$work/y.npy" --batch-size 256 --max-steps 400 --threads 1 \
  --devices cpu --no-progress --seed 1 >train.out 2>&1
status=$?
peak_mb=$(($(cat "$cg/memory.max_usage_in_bytes") >> 20))
oom=$(( $(oom_kills) - oom_before ))
echo "cgroup limit ${limit_mb} MiB, data ${data_mb} MiB: training exit ${status}, peak usage ${peak_mb} MiB (page cache included), OOM kills ${oom}"
[ "$status" -eq 0 ] && [ "$oom" -eq 0 ] ||
  fail "2 ranks on ${data_mb} MiB in a ${limit_mb} MiB cgroup failed (exit $status, OOM kills $oom): $(tail -5 train.out)"
grep -q 'mapped' train.out || fail "the start-up line does not say the data is mapped: $(grep 'model ' train.out)"
grep -q 'training loss' train.out || grep -q 'weights fingerprint' train.out || fail "no summary: $(tail -3 train.out)"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "data_memory: 2 ranks trained on ${data_mb} MiB of .npy within ${limit_mb} MiB"
