#!/usr/bin/env bash
# Preemption (SIGTERM/SIGINT, as Slurm sends them): a signal to ONE rank of a 2-rank job makes
# every rank stop after the same step; rank 0 checkpoints that step and the job exits with code
# 5 ("preempted"); resuming from the checkpoint finishes with the uninterrupted run's weights
# fingerprint. Also through launch/mirrorrun: SIGTERM to mirrorrun stops the job the same way.
# And a run resumed without --checkpoint-dir saves into the folder it resumed from.
# Usage: preempt.sh <build dir>. Exit 77 = skipped.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
e2e_need_mpirun
fingerprint() { grep -o 'weights fingerprint: [0-9a-f]*' "$1" | tail -1 | awk '{print $3}'; }
mpirun_() { timeout -k 10 300 mpirun --oversubscribe --bind-to none -np 2 "$@"; }

args=(--model gru-rows --data synthetic --train-limit 512 --test-limit 64 --batch-size 32
      --epochs 6 --devices cpu --threads 1 --no-progress --seed 4)

mpirun_ "$train" "${args[@]}" >plain.out 2>plain.err || fail "plain run exited $?"
want=$(fingerprint plain.out)
[ -n "$want" ] || fail "plain run printed no fingerprint"

# signal_once NAME SIGNAL TARGET LAUNCH...: runs LAUNCH in the background, and once 8 steps are
# logged sends SIGNAL to TARGET (rank1 | mirrorrun); leaves NAME.rc, NAME.out, NAME.err. LAUNCH
# logs to $PWD/NAME.jsonl: the absolute path (this test's own work dir) is how the target is
# found, so a test running beside this one never receives the signal.
signal_once() {
  local name="$1" sig="$2" target="$3"
  shift 3
  ("$@" >"$name.out" 2>"$name.err"; echo $? >"$name.rc") &
  local bg=$!
  for _ in $(seq 1 1200); do
    [ "$(cat "$name.jsonl" 2>/dev/null | wc -l)" -ge 8 ] && break
    sleep 0.05
  done
  local victim
  if [ "$target" = mirrorrun ]; then
    victim=$(pgrep -o -f -- "--log-jsonl $PWD/$name.jsonl")  # mirrorrun, or the mpirun it became
  else
    victim=$(pgrep -f "^$train .*--log-jsonl $PWD/$name.jsonl" | tail -1)
  fi
  if [ -z "$victim" ]; then fail "$name: nothing to signal (did the run end early?)"; else kill -"$sig" "$victim"; fi
  wait "$bg"
}

# 1. SIGTERM to one rank.
signal_once term TERM rank1 mpirun_ "$train" "${args[@]}" --checkpoint-dir ck --log-jsonl "$PWD/term.jsonl"
rc=$(cat term.rc)
[ "$rc" -eq 5 ] || fail "a SIGTERMed job exited $rc, not 5 (preempted)"
stop=$(grep -o 'every rank stopped after step [0-9]*' term.out | awk '{print $NF}')
[ -n "$stop" ] || fail "no 'every rank stopped after step N' line: $(tail -3 term.out term.err)"
if [ -n "$stop" ]; then
  [ "$stop" -lt 96 ] || fail "stopped at step $stop: the run was not interrupted"
  ls ck | grep -q "ckpt-$(printf %012d "$stop").safetensors" || fail "no checkpoint at step $stop: $(ls ck)"
fi
# The summary tells the part of the epoch that ran, not zeros.
grep -q '^stopped before evaluation; this epoch so far: loss [0-9.]* accuracy [0-9.]*$' term.out ||
  fail "no partial-epoch summary: $(grep -A1 'stopped after step' term.out)"
grep -q ' 0 samples/s' term.out && fail "the summary says 0 samples/s after a stop"
mpirun_ "$train" "${args[@]}" --checkpoint-dir ck --resume ck >resume.out 2>resume.err ||
  fail "resume exited $?: $(tail -3 resume.err)"
got=$(fingerprint resume.out)
[ "$got" = "$want" ] || fail "fingerprint after preemption + resume $got != uninterrupted $want"
[ "$failures" -eq 0 ] && echo "ok   SIGTERM to one rank: exit 5 at step $stop, resumed fingerprint $got"

# 2. SIGTERM to launch/mirrorrun (which runs mpirun): the same stop, exit code 5.
signal_once viarun TERM mirrorrun "$mirrorrun" -np 2 "$train" "${args[@]}" --checkpoint-dir ck2 \
  --log-jsonl "$PWD/viarun.jsonl"
rc=$(cat viarun.rc)
[ "$rc" -eq 5 ] || fail "SIGTERM to mirrorrun: exit $rc, not 5: $(tail -5 viarun.err)"
grep -q 'every rank stopped after step' viarun.out || fail "mirrorrun: no stop line"
ls ck2 | grep -q safetensors || fail "mirrorrun: no checkpoint"
[ "$failures" -eq 0 ] && echo "ok   SIGTERM to mirrorrun: exit 5, checkpoint written"

# 3. Resumed as a preempted user types it, the same command with --resume added and no
#    --checkpoint-dir (Note [Saving where it resumed], train_resume.cpp): --checkpoint-every is
#    accepted and the run saves into the folder it resumed from, on that schedule and when it is
#    stopped again; resumed once more, it ends with the uninterrupted run's weights.
signal_once first TERM rank1 mpirun_ "$train" "${args[@]}" --checkpoint-dir "$PWD/ck3" \
  --log-jsonl "$PWD/first.jsonl"
first=$(grep -o 'every rank stopped after step [0-9]*' first.out | awk '{print $NF}')
[ "$(cat first.rc)" -eq 5 ] && [ -n "$first" ] || fail "the first stop: exit $(cat first.rc): $(tail -2 first.err)"
signal_once again TERM rank1 mpirun_ "$train" "${args[@]}" --resume "$PWD/ck3" --checkpoint-every 4 \
  --keep 0 --log-jsonl "$PWD/again.jsonl"
again=$(grep -o 'every rank stopped after step [0-9]*' again.out | awk '{print $NF}')
if [ "$(cat again.rc)" -ne 5 ] || [ -z "$again" ]; then
  fail "--resume ck3 --checkpoint-every 4: exit $(cat again.rc), not 5: $(grep -h 'error\|fatal' again.out again.err | tail -2)"
else
  ls ck3 | grep -q "ckpt-$(printf %012d "$again").safetensors" ||
    fail "the resumed run did not save its stop at step $again into the folder it resumed from: $(ls ck3)"
  every=""
  for ((s = first + 1; s < again; s++)); do
    [ $((s % 4)) -eq 0 ] && [ -f "ck3/ckpt-$(printf %012d "$s").safetensors" ] && every="$every $s"
  done
  [ -n "$every" ] || fail "no --checkpoint-every 4 checkpoint between steps $first and $again: $(ls ck3)"
  mpirun_ "$train" "${args[@]}" --resume "$PWD/ck3" >last.out 2>last.err || fail "the last resume exited $?"
  [ "$(fingerprint last.out)" = "$want" ] ||
    fail "stopped at $first and $again, resumed without --checkpoint-dir: fingerprint $(fingerprint last.out) != $want"
  [ "$failures" -eq 0 ] &&
    echo "ok   --resume ck3 --checkpoint-every 4 saved into ck3 (steps$every and the stop at $again); resumed fingerprint equal"
fi

if [ "$failures" -ne 0 ]; then
  for f in *.err; do echo "== $f"; tail -8 "$f"; done
  exit 1
fi
echo "preempt: all cases passed"
