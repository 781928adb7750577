#!/usr/bin/env bash
# Note [Finalize watchdog] (distributed/runtime.cpp): a rank that stops answering at the end of
# a run (cut off by a partition; here the test hook MIRROR_TEST_HANG_BEFORE_FINALIZE=1 stops
# rank 1 right before MPI_Finalize) kept every other rank in MPI_Finalize forever. Now each rank
# gives MPI_Finalize --comm-timeout seconds, then says why and exits with the run's own code:
# the job, whose last checkpoint and summary are written, ends within --comm-timeout + 15 s of
# the injection, and leaves no process behind.
# Usage: finalize_watchdog.sh <build dir>. Exit 77 = skipped.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
e2e_need_mpirun
timeout_s=3
limit=$((timeout_s + 15))
ck="$PWD/ck"
args=(--model gru-rows --data synthetic --train-limit 256 --test-limit 64 --batch-size 32
      --epochs 1 --devices cpu --threads 1 --no-progress --comm-timeout "$timeout_s"
      --checkpoint-dir "$ck")

# The outer timeout only detects a hang (124, or 137 after its -k).
MIRROR_TEST_HANG_BEFORE_FINALIZE=1 timeout -k 10 120 "$mirrorrun" -np 2 "$train" "${args[@]}" \
  >run.out 2>run.err &
job=$!
injected=""
for _ in $(seq 1 2400); do
  if grep -q 'MIRROR_TEST_HANG_BEFORE_FINALIZE: this rank stops' run.err; then
    injected=$(date +%s%N)
    break
  fi
  kill -0 "$job" 2>/dev/null || break
  sleep 0.05
done
wait "$job"
rc=$?
ended=$(date +%s%N)
if [ -z "$injected" ]; then
  fail "rank 1 never reached the hook before MPI_Finalize (exit code $rc)"
else
  took=$(( (ended - injected) / 1000000 ))
  echo "     the job ended ${took} ms after rank 1 stopped answering (exit code $rc; limit ${limit} s)"
  [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "the job hung in MPI_Finalize (ended by the test's timeout)"
  [ "$took" -le $((limit * 1000)) ] || fail "the job ended ${took} ms after the injection, beyond ${limit} s"
fi
for r in 0 1; do
  grep -q "\[mirror rank $r\] MPI_Finalize did not finish within ${timeout_s} s: .*this rank ends with exit code 0" run.err ||
    fail "rank $r did not say why it left MPI_Finalize: $(grep -v '^\[mirror\] rank' run.err | tail -3)"
done
grep -q 'weights fingerprint' run.out || fail "the run did not finish before finalizing: $(tail -3 run.out)"
[ -f "$ck/ckpt-000000000008.safetensors" ] || fail "no final checkpoint (step 8): $(ls "$ck")"
left=$(pgrep -f -- "--checkpoint-dir $ck" || true)
if [ -n "$left" ]; then
  fail "processes outlived the job: $(ps -o pid,args -p "${left//$'\n'/,}" | tail -n +2)"
  kill -KILL $left 2>/dev/null
fi

if [ "$failures" -ne 0 ]; then
  echo "== run.err"; grep -v '^\[mirror\] rank' run.err | tail -20
  exit 1
fi
echo "finalize_watchdog: a rank lost before MPI_Finalize ended the job within ${limit} s"
