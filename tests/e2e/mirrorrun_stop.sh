#!/usr/bin/env bash
# launch/mirrorrun (issue 17, items 2 and 6): SIGUSR1, SIGTERM and SIGINT to mirrorrun each stop
# every rank cleanly (exit code 5, a checkpoint), and mirrorrun exits only after mpirun and the
# ranks have; --max-restarts does not restart a set-up error (exit code 3) and caps its back-off.
# Folder names avoid ck* and early*: restart.sh, which may run at the same time (ctest -j), finds
# its ranks by "--checkpoint-dir ck".
# Usage: mirrorrun_stop.sh <build dir>. Exit 77 = skipped.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
e2e_need_mpirun
set -m  # background jobs keep SIGINT (a non-interactive shell would ignore it for them)

args=(--model gru-rows --data synthetic --train-limit 2048 --test-limit 64 --batch-size 16
      --epochs 4 --devices cpu --threads 1 --no-progress --seed 4)

# stop_with SIGNAL: starts mirrorrun -np 2 in the background, sends SIGNAL to mirrorrun once 5
# steps are logged, and checks the exit code, the checkpoint and that no rank outlives it.
stop_with() {
  local sig="$1" name="stop-$1"
  "$mirrorrun" -np 2 "$train" "${args[@]}" --checkpoint-dir "stopped-$sig" --log-jsonl "$PWD/$name.jsonl" \
    >"$name.out" 2>"$name.err" &
  local launcher=$!
  for _ in $(seq 1 1200); do
    [ "$(cat "$name.jsonl" 2>/dev/null | wc -l)" -ge 5 ] && break
    sleep 0.05
  done
  kill -"$sig" "$launcher"
  wait "$launcher"
  local rc=$?
  # Whatever mirrorrun started must be gone once it has exited.
  local left
  left=$(pgrep -f -- "--log-jsonl $PWD/$name.jsonl" || true)  # this test's job only
  if [ -n "$left" ]; then
    fail "SIG$sig: processes of the job outlived mirrorrun: $(ps -o pid,args -p "${left//$'\n'/,}" | tail -n +2)"
    kill -KILL $left 2>/dev/null
  fi
  [ "$rc" -eq 5 ] || { fail "SIG$sig to mirrorrun: exit code $rc, not 5: $(tail -3 "$name.err")"; return; }
  grep -q 'every rank stopped after step' "$name.out" || { fail "SIG$sig: no stop line"; return; }
  ls "stopped-$sig" | grep -q safetensors || { fail "SIG$sig: no checkpoint"; return; }
  echo "ok   SIG$sig to mirrorrun: exit 5, checkpoint written, nothing left running"
}
stop_with USR1
stop_with TERM
stop_with INT

# A set-up error is not restarted (exit code 3), however many restarts are allowed.
start=$SECONDS
MIRRORRUN_BACKOFF_S=1 "$mirrorrun" -np 2 --max-restarts 3 "$train" --model-spec missing.json \
  --data synthetic --devices cpu --no-progress --checkpoint-dir stopped-setup >setup.out 2>&1
rc=$?
[ "$rc" -eq 3 ] || fail "set-up error under --max-restarts: exit code $rc, not 3: $(tail -3 setup.out)"
grep -q 'restart 1 of 3' setup.out && fail "set-up error: mirrorrun restarted it"
grep -q "set-up failed (exit code 3: .*missing.json" setup.out || fail "set-up error: no reason given: $(tail -2 setup.out)"
[ "$failures" -eq 0 ] && echo "ok   set-up error: exit 3, not restarted"

# Back-off is capped (MIRRORRUN_MAX_BACKOFF_S): a failing program waits 1, 1, 1 s, not 1, 2, 4.
cat >fails.sh <<'EOS'
#!/usr/bin/env bash
echo "fatal: this run fails" >&2
exit 1
EOS
chmod +x fails.sh
MIRRORRUN_BACKOFF_S=1 MIRRORRUN_MAX_BACKOFF_S=1 "$mirrorrun" -np 1 --max-restarts 3 ./fails.sh \
  --checkpoint-dir stopped-fail >fails.out 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "failing program: exit code $rc, not 1"
waits=$(grep -o 'restart [0-9] of 3 in [0-9]* s' fails.out | awk '{print $6}' | tr '\n' ' ')
[ "$waits" = "1 1 1 " ] || fail "back-off not capped at 1 s: waits '$waits': $(grep restart fails.out)"
[ "$failures" -eq 0 ] && echo "ok   back-off capped: waits $waits"

if [ "$failures" -ne 0 ]; then
  for f in *.err; do echo "== $f"; tail -5 "$f"; done
  exit 1
fi
echo "mirrorrun_stop: all cases passed"
