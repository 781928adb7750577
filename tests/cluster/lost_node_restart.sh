#!/usr/bin/env bash
# launch/mirrorrun --max-restarts after a node loss (Note [Relaunch on fewer nodes] in
# launch/mirrorrun): 2 emulated nodes x 2 ranks train with checkpoints; once one exists, node 1
# is lost (every process killed, no new daemon accepted: cluster_lose_node). mirrorrun names the
# cause, probes the hosts with the cluster's rsh agent, drops mircn1 into a copy of the hostfile,
# relaunches with -np 2 instead of 4 on node 0 alone, which resumes from the newest checkpoint
# (same global batch on fewer ranks) and finishes: exit 0, the final checkpoint written, nothing
# left running on either node.
# Usage: lost_node_restart.sh <build dir>. Exit 77 = skipped (no namespaces here).
source "$(dirname "${BASH_SOURCE[0]}")/cluster.bash" "$@"
cluster_up 2 2
cluster_limit=150
cd "$cluster_dir" || exit 1
export MIRRORRUN_BACKOFF_S=1

# 40 steps of 32 samples (1 epoch), a checkpoint every 5.
args=(--model gru-rows --data synthetic --train-limit 1280 --test-limit 64 --batch-size 32
      --epochs 1 --devices cpu --no-progress --checkpoint-every 5 --comm-timeout 10)
cluster_mirrorrun --max-restarts 1 -np 4 "$train" "${args[@]}" --checkpoint-dir ck \
  >job.out 2>job.err &
job=$!
for _ in $(seq 1 1200); do
  ls ck 2>/dev/null | grep -q safetensors && break
  sleep 0.05
done
[ "$(cluster_pids_of "$train" 1 | wc -l)" -eq 2 ] || fail "node 1 runs no 2 ranks before the loss"
cluster_lose_node 1

# The checkpoints the lost job left: listed when mirrorrun announces the relaunch (the resumed
# job needs its start-up and 5 steps before it writes one of its own).
before=""
for _ in $(seq 1 2400); do
  if grep -q "mirrorrun: dropping host" job.err 2>/dev/null; then
    before=$(ls ck | grep -E '^ckpt-[0-9]+\.safetensors$' | sort | tail -1)
    break
  fi
  kill -0 "$job" 2>/dev/null || break
  sleep 0.05
done
wait "$job"
rc=$?
[ "$rc" -eq 0 ] || fail "mirrorrun exited $rc after the node loss (want 0: relaunched on node 0)"

# The first run: 4 ranks on 2 nodes; then the cause, naming the lost node (Open MPI 4 says "ORTE
# has lost communication with a remote daemon" and names the node on another line).
grep -q "^\[mirror\] rank 3/4 local 1/2 host mircn1 " job.err || fail "the first run had no rank 3 on mircn1"
grep -Eq "mirrorrun: the job ended with exit code [0-9]+ \(.*mircn1.*\); restart 1 of 1" job.err ||
  fail "no restart line naming node mircn1 as the cause: $(grep 'mirrorrun: the job ended' job.err)"
# The relaunch: mircn1 dropped, -np lowered, the reduced hostfile used.
drop=$(grep "mirrorrun: dropping host" job.err)
[[ "$drop" == *"dropping host(s) mircn1: no answer to \`$cluster_dir/rsh-agent HOST true\`"*"No route to host"*"relaunching on 1 of 2 hosts with -np 2 instead of 4 (hostfile "* ]] ||
  fail "no (or a wrong) line about dropping mircn1: '$drop'"
relaunch=$(sed -n '/mirrorrun: dropping host/,$p' job.err)
for r in 0 1; do
  echo "$relaunch" | grep -q "^\[mirror\] rank $r/2 local $r/2 host mircn0 " ||
    fail "the relaunch had no rank $r/2 on mircn0"
done
echo "$relaunch" | grep -q "^\[mirror\] rank .* host mircn1 " && fail "the relaunch still used mircn1"
# It resumed from the newest checkpoint of the lost job and finished the epoch.
if [ -z "$before" ]; then
  fail "no checkpoint when the relaunch was announced"
else
  grep -q "resumed from ck/$before" job.out job.err || fail "the relaunch did not resume from ck/$before"
fi
last=$(ls ck | grep -E '^ckpt-[0-9]+\.safetensors$' | sort | tail -1)
[ "$((10#$(echo "$last" | tr -dc 0-9)))" -eq 40 ] || fail "the newest checkpoint is $last, not step 40"
grep -q "weights fingerprint" job.out || fail "the resumed job printed no final fingerprint"
[ -z "$(cluster_pids_of "$train" 0; cluster_pids_of "$train" 1)" ] || fail "ranks left behind"
[ -z "$(ip netns pids "$(cluster_ns 0)")" ] || fail "processes left on node 0"

if [ "$failures" -ne 0 ]; then
  grep -v setpgid job.err | tail -40
  exit 1
fi
echo "lost_node_restart: mircn1 lost after $before; relaunched on mircn0 with 2 ranks, resumed and finished at $last"
