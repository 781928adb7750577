#!/usr/bin/env bash
# launch/mirrorrun --max-restarts: a rank killed (SIGKILL) mid-run makes the job fail; mirrorrun
# relaunches it with --resume-or-start from the checkpoint dir, and the final weights equal the
# uninterrupted run's bit for bit (same fingerprint), also when the rank dies before the first
# checkpoint (the restart starts fresh), and when it started from another run's checkpoints (the
# restart resumes its own). Also: giving up after N restarts with the last cause
# (a run-time failure), a host that does not answer dropped from the hostfile (or giving up when
# none answers), and the flag's errors.
# Usage: restart.sh <build dir>. Exit 77 = skipped.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
e2e_need_mpirun
export MIRRORRUN_BACKOFF_S=1
fingerprint() { grep -o 'weights fingerprint: [0-9a-f]*' "$1" | tail -1 | awk '{print $3}'; }

args=(--model gru-rows --data synthetic --train-limit 512 --test-limit 64 --batch-size 32
      --epochs 3 --devices cpu --no-progress)

# 1. The uninterrupted run.
timeout -k 10 300 "$mirrorrun" -np 2 "$train" "${args[@]}" >plain.out 2>plain.err || fail "plain run exited $?"
want=$(fingerprint plain.out)
[ -n "$want" ] || fail "plain run printed no fingerprint"

# 2. The same run, rank 1 killed once a checkpoint exists and steps past it are logged;
#    mirrorrun restarts it. Its JSON lines hold each step once: the restarted run cut the
#    records of the steps it runs again (Note [Resumed logs]).
(timeout -k 10 300 "$mirrorrun" --max-restarts 2 -np 2 "$train" "${args[@]}" --checkpoint-dir "$PWD/ck" \
   --checkpoint-every 4 --log-jsonl "$PWD/restart.jsonl" >restart.out 2>restart.err; echo $? >restart.rc) &
for _ in $(seq 1 600); do
  ls ck 2>/dev/null | grep -q safetensors && [ "$(cat restart.jsonl 2>/dev/null | wc -l)" -ge 6 ] && break
  sleep 0.02
done
# A rank of this job, not mpirun, and not a job of a test running beside this one: the absolute
# checkpoint path is this test's own work dir.
victim=$(pgrep -f "^$train .*--checkpoint-dir $PWD/ck " | tail -1)
if [ -z "$victim" ]; then
  fail "no rank to kill (the run ended before its first checkpoint?)"
else
  kill -9 "$victim"
fi
wait
rc=$(cat restart.rc)
[ "$rc" -eq 0 ] || fail "restarted job exited $rc"
grep -q "restart 1 of 2" restart.err || fail "mirrorrun did not say why it restarted"
grep -q "resumed from $PWD/ck/" restart.out || fail "the restarted job did not resume from ck/"
got=$(fingerprint restart.out)
[ "$got" = "$want" ] || fail "fingerprint after restart $got != uninterrupted $want"
steps=$(python3 -c 'import json, sys; print(" ".join(str(r["step"]) for r in map(json.loads, open(sys.argv[1])) if r["type"] == "step"))' restart.jsonl)
[ "$steps" = "$(seq -s ' ' 1 48)" ] || fail "the restarted run's JSON lines do not hold steps 1..48 once each: $steps"
cut=$(grep -o 'removed [0-9]* record(s) past step [0-9]*' restart.out)
echo "     JSON lines: steps 1..48 once each (the restart: ${cut:-nothing to remove})"
[ "$failures" -eq 0 ] && echo "ok   killed rank + restart: fingerprint $got equals the uninterrupted run"

# 2b. A rank killed before the first checkpoint: the restart finds none and starts fresh
#     (--resume-or-start; a plain --resume would fail on the empty folder).
(timeout -k 10 300 "$mirrorrun" --max-restarts 1 -np 2 "$train" "${args[@]}" --checkpoint-dir "$PWD/early" \
   >early.out 2>early.err; echo $? >early.rc) &
victim=""
for _ in $(seq 1 600); do
  victim=$(pgrep -f "^$train .*--checkpoint-dir $PWD/early" | tail -1)
  [ -n "$victim" ] && break
  sleep 0.05
done
if [ -z "$victim" ]; then fail "no rank to kill early"; else kill -9 "$victim"; fi
wait
[ "$(cat early.rc)" -eq 0 ] || fail "early-killed job exited $(cat early.rc)"
grep -q "STARTING FRESH" early.out || fail "the restart after an early kill did not start fresh"
[ "$(fingerprint early.out)" = "$want" ] || fail "fingerprint after an early kill differs"

# 2c. A job started from another run's checkpoints (--resume old --checkpoint-dir new), killed
#     once new/ holds its own: the restart resumes new/, not old/ (which new/ would refuse as
#     another run's checkpoints), and still ends at the uninterrupted run's weights.
timeout -k 10 300 "$mirrorrun" -np 2 "$train" "${args[@]}" --checkpoint-dir "$PWD/old" --max-steps 8 \
  --checkpoint-every 4 >old.out 2>old.err || fail "the first part exited $?"
(timeout -k 10 300 "$mirrorrun" --max-restarts 1 -np 2 "$train" "${args[@]}" --resume "$PWD/old" \
   --checkpoint-dir "$PWD/new" --checkpoint-every 4 >from_old.out 2>from_old.err; echo $? >from_old.rc) &
for _ in $(seq 1 600); do
  ls new 2>/dev/null | grep -q safetensors && break
  sleep 0.05
done
victim=$(pgrep -f "^$train .*--checkpoint-dir $PWD/new " | tail -1)
if [ -z "$victim" ]; then fail "no rank of the job from old/ to kill"; else kill -9 "$victim"; fi
wait
[ "$(cat from_old.rc)" -eq 0 ] || fail "the job from old/ exited $(cat from_old.rc): $(tail -3 from_old.err)"
grep -q "resumed from $PWD/new/" from_old.out || fail "the restart did not resume from new/"
[ "$(fingerprint from_old.out)" = "$want" ] || fail "fingerprint after a restart from new/ differs"

# 3. A job that fails at run time every time (--lr 1e30: its steps are skipped for non-finite
#    gradients until --max-skipped-steps stops it): N restarts, then it gives up with the last
#    cause. (A set-up error, exit code 3, is not restarted: tests/e2e/mirrorrun_stop.sh.)
timeout -k 10 120 "$mirrorrun" --max-restarts 1 -np 2 "$train" --model cnn --data synthetic \
  --train-limit 256 --test-limit 32 --batch-size 16 --devices cpu --no-progress --lr 1e30 \
  --force-lr --max-skipped-steps 2 --checkpoint-dir ck2 >giveup.out 2>giveup.err
rc=$?
[ "$rc" -eq 1 ] || fail "a failing job exited $rc, not 1"
grep -q "restart 1 of 1" giveup.err || fail "no restart before giving up"
grep -q "giving up after 1 restart(s).*2 steps in a row were skipped" giveup.err ||
  fail "no 'giving up' line naming the cause: $(tail -3 giveup.err)"

# 4. A rejected command line (exit code 2) is not restarted.
timeout -k 10 120 "$mirrorrun" --max-restarts 3 -np 2 "$train" "${args[@]}" --checkpoint-dir ck3 \
  --epochs zero >usage.out 2>usage.err
rc=$?
[ "$rc" -eq 2 ] || fail "a bad flag gave exit code $rc, not 2"
grep -q "restart 1" usage.err && fail "a bad flag was restarted"
grep -q "rejected its command line" usage.err || fail "no 'rejected' line: $(tail -3 usage.err)"

# 5. A host that is gone (Note [Relaunch on fewer nodes] in launch/mirrorrun; with real nodes:
#    tests/cluster/lost_node_restart.sh): hostfile "localhost + ghost", where the rsh agent
#    cannot reach ghost. The first run cannot start its daemon there; mirrorrun probes the hosts
#    with the same agent, drops ghost, relaunches with -np 2 instead of 4 on localhost (which
#    needs no agent), and the job ends as the plain 2-rank run (nothing was checkpointed).
cat >agent <<'AGENT'
#!/usr/bin/env bash
while [[ "${1:-}" == -* ]]; do shift; done
echo "ssh: connect to host $1 port 22: No route to host" >&2
exit 255
AGENT
chmod +x agent
printf 'localhost slots=2\nghost slots=2\n' >hosts
timeout -k 10 300 "$mirrorrun" --max-restarts 1 --hostfile hosts -np 4 --mca plm_rsh_agent "$PWD/agent" \
  "$train" "${args[@]}" --checkpoint-dir ck6 >ghost.out 2>ghost.err
rc=$?
[ "$rc" -eq 0 ] || fail "a job with an unreachable host exited $rc, not 0 after dropping it"
grep -q "mirrorrun: the job ended with exit code [0-9]* (.*No route to host); restart 1 of 1" ghost.err ||
  fail "the restart line does not give the agent's error: $(grep 'job ended' ghost.err)"
grep -q "mirrorrun: dropping host(s) ghost: no answer to \`$PWD/agent HOST true\` (ssh: connect to host ghost port 22: No route to host); relaunching on 1 of 2 hosts with -np 2 instead of 4" ghost.err ||
  fail "no line about dropping ghost: $(grep dropping ghost.err)"
[ "$(fingerprint ghost.out)" = "$want" ] || fail "the job relaunched without ghost differs from the plain 2-rank run"

# 5b. No host answers: mirrorrun says so and gives up (no relaunch).
printf 'ghost slots=2\nghost2 slots=2\n' >hosts2
timeout -k 10 120 "$mirrorrun" --max-restarts 3 --hostfile hosts2 -np 4 --mca plm_rsh_agent "$PWD/agent" \
  "$train" "${args[@]}" --checkpoint-dir ck7 >none.out 2>none.err
rc=$?
[ "$rc" -ne 0 ] || fail "a job without any reachable host exited 0"
grep -q "mirrorrun: no host of hosts2 answers (ghost,ghost2: .*No route to host); nothing to relaunch on, giving up" none.err ||
  fail "no 'no host answers' line: $(tail -2 none.err)"
grep -q "restart 2 of 3" none.err && fail "restarted again without any host"

# 6. mirrorrun's own flag errors.
"$mirrorrun" --max-restarts x -np 2 "$train" >/dev/null 2>flag.err && fail "--max-restarts x accepted"
grep -q "not a number" flag.err || fail "bad --max-restarts message: $(cat flag.err)"
"$mirrorrun" --max-restarts 1 -np 2 "$train" "${args[@]}" >/dev/null 2>flag2.err &&
  fail "--max-restarts without --checkpoint-dir accepted"
grep -q "needs mirror-train's --checkpoint-dir (or --resume DIR" flag2.err || fail "message: $(cat flag2.err)"

if [ "$failures" -ne 0 ]; then
  for f in *.err; do echo "== $f"; tail -15 "$f"; done
  exit 1
fi
echo "restart: all cases passed"
