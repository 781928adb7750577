#!/usr/bin/env bash
# launch/mirrorrun and a stop that comes while the job starts (issue 42, Note [Stop hand-off] in
# distributed/preemption.cpp): SIGTERM to mirrorrun 0, 0.1, 0.2 and 0.5 s after it started (5
# times each; 0 s: as soon as mirrorrun has its traps, see wait_for_traps), at the moment mpirun
# exists and at the moment the first rank process exists (5 times each: the window in which
# mpirun's forwarded SIGUSR1 used to kill a rank, "exited on signal 10", exit code 138). Every
# one must end with exit code 5, either before the job starts ("not starting it") or with every
# rank stopped after a step, and leave no process behind.
# Usage: mirrorrun_early_stop.sh <build dir>. Exit 77 = skipped.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
e2e_need_mpirun

args=(--model gru-rows --data synthetic --train-limit 512 --test-limit 64 --batch-size 32
      --epochs 1 --devices cpu --threads 1 --no-progress --seed 4)

# Waits until process $1 runs mirrorrun and catches SIGTERM (bit 15 of SigCgt): the earliest
# moment mirrorrun can answer a signal at all. Before it, a signal ends a shell that has not yet
# read mirrorrun's first line (exit code 143), or the forked test shell before its exec, which
# then runs this script's EXIT trap.
wait_for_traps() {
  local cgt
  for _ in $(seq 1 5000); do
    cgt=$(awk '/^SigCgt:/ {print $2}' "/proc/$1/status" 2>/dev/null)
    if [ -n "$cgt" ] && (( (16#$cgt >> 14) & 1 )) && grep -q mirrorrun "/proc/$1/cmdline" 2>/dev/null; then
      return 0
    fi
    sleep 0.001
  done
}

# stop_at WHEN NAME: starts mirrorrun -np 2 in the background and sends it SIGTERM WHEN (seconds
# after the start, but not before mirrorrun has its traps; or "rank": once a rank process
# exists); checks the exit code and the output.
stop_at() {
  local when="$1" name="$2" dir="$PWD/held-$2" launcher rc left start
  start=$(date +%s%N)
  "$mirrorrun" -np 2 "$train" "${args[@]}" --checkpoint-dir "$dir" >"$name.out" 2>"$name.err" &
  launcher=$!
  wait_for_traps "$launcher"
  if [ "$when" = mpirun ] || [ "$when" = rank ]; then
    local pattern="^$train .*--checkpoint-dir $dir"
    [ "$when" = rank ] || pattern="^mpirun -np 2 .*--checkpoint-dir $dir"
    for _ in $(seq 1 5000); do
      pgrep -f -- "$pattern" >/dev/null && break
      sleep 0.002
    done
  else
    sleep "$(awk -v w="$when" -v ns=$(($(date +%s%N) - start)) 'BEGIN { r = w - ns / 1e9; print (r > 0 ? r : 0) }')"
  fi
  kill -TERM "$launcher"
  wait "$launcher"
  rc=$?
  left=$(pgrep -f -- "--checkpoint-dir $dir" || true)  # this job's mpirun and ranks only
  if [ -n "$left" ]; then
    fail "stop at $when ($name): processes of the job outlived mirrorrun: $(ps -o pid,args -p "${left//$'\n'/,}" | tail -n +2)"
    kill -KILL $left 2>/dev/null
  fi
  if [ "$rc" -ne 5 ]; then
    fail "stop at $when ($name): exit code $rc, not 5: $(grep -h 'signal\|fatal' "$name.err" "$name.out" | tail -3)"
    return
  fi
  if grep -q 'exited on signal' "$name.err"; then
    fail "stop at $when ($name): a rank was killed by the signal: $(grep 'exited on signal' "$name.err")"
    return
  fi
  if grep -q 'not starting it' "$name.err"; then
    before=$((before + 1))
  elif grep -q 'every rank stopped after step' "$name.out"; then
    stopped=$((stopped + 1))
  else
    fail "stop at $when ($name): exit 5 without a stop line: $(tail -2 "$name.err")"
  fi
}

before=0 stopped=0 runs=0
for when in 0 0.1 0.2 0.5 mpirun rank; do
  for i in 1 2 3 4 5; do
    stop_at "$when" "$when-$i"
    runs=$((runs + 1))
  done
done
echo "stops: $runs sent, $((before + stopped)) ended with exit code 5 ($before before the job started, $stopped with every rank stopped after a step)"

if [ "$failures" -ne 0 ]; then
  for f in *.err; do echo "== $f"; tail -5 "$f"; done
  exit 1
fi
echo "mirrorrun_early_stop: all $runs stops ended with exit code 5"
