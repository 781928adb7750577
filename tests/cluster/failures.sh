#!/usr/bin/env bash
# Failures of a node while 2 emulated nodes x 2 ranks train (Note [Emulated cluster] in
# cluster.bash), each injected once a checkpoint exists:
#   lost       every process of node 1 killed (its kernel still answers, so TCP peers see the
#              connections close): Open MPI notices at once and names the node;
#   crashed    every process of node 1 killed and its link down (a power loss: nothing answers);
#   partition  node 1's link set down, its processes alive but cut off.
# In every case the job exits non-zero naming node mircn1 (crashed / partition: also its ranks
# 2 and 3, from the ranks' --comm-timeout and liveness probe, Note [Liveness probe] in
# distributed/runtime.cpp), node 0's ranks are gone within --comm-timeout + 15 s, no rank is
# left on any node (the partitioned ranks time out by themselves), and the newest checkpoint
# resumes on the remaining node with 2 ranks instead of 4.
# Usage: failures.sh <build dir>. Exit 77 = skipped (no namespaces here).
source "$(dirname "${BASH_SOURCE[0]}")/cluster.bash" "$@"
cluster_up 2 2
cluster_limit=120
cd "$cluster_dir" || exit 1
timeout_s=5
limit=$((timeout_s + 15))

args=(--model gru-rows --data synthetic --train-limit 2048 --test-limit 64 --batch-size 32
      --epochs 100 --devices cpu --no-progress --checkpoint-every 5 --comm-timeout "$timeout_s")

# run_case NAME FAULT EXPECT...: trains, injects FAULT (a command) after the first checkpoint,
# checks the job's end; every EXPECT (grep -E) must be in its output.
run_case() {
  local name="$1" fault="$2" start now left newest i rc
  shift 2
  rm -rf "ck-$name"
  cluster_mpirun -np 4 "$train" "${args[@]}" --checkpoint-dir "ck-$name" >"$name.out" 2>"$name.err" &
  local job=$!
  for _ in $(seq 1 600); do
    ls "ck-$name" 2>/dev/null | grep -q safetensors && break
    sleep 0.05
  done
  sleep 0.5
  [ "$(cluster_pids_of "$train" 0 | wc -l)" -eq 2 ] || { fail "$name: node 0 runs no 2 ranks before the fault"; wait $job; return; }
  $fault 1
  start=$(date +%s)
  # Node 0's ranks must end within the limit (a hang detector, not a measurement).
  while left=$(cluster_pids_of "$train" 0) && [ -n "$left" ]; do
    now=$(date +%s)
    if [ $((now - start)) -gt "$limit" ]; then
      fail "$name: node 0's ranks ($left) still run ${limit}s after the fault"
      break
    fi
    sleep 0.2
  done
  echo "     $name: node 0's ranks ended $(( $(date +%s) - start ))s after the fault"
  wait $job
  rc=$?
  [ "$rc" -ne 0 ] || fail "$name: the job exited 0"
  [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "$name: mpirun hung (ended by the test's limit)"
  for expect in "$@"; do
    grep -Eq "$expect" "$name.err" || fail "$name: the output lacks /$expect/"
  done
  # No orphans: wait the same limit for the cut-off node's ranks (they time out themselves).
  for ((i = 0; i < limit * 5; i++)); do
    [ -z "$(cluster_pids_of "$train" 0; cluster_pids_of "$train" 1)" ] && break
    sleep 0.2
  done
  [ -z "$(cluster_pids_of "$train" 0; cluster_pids_of "$train" 1)" ] || fail "$name: ranks left behind"
  [ -z "$(ip netns pids "$(cluster_ns 0)")" ] || fail "$name: processes left on node 0"
  # The newest checkpoint resumes on the remaining node, 2 ranks instead of 4.
  newest=$(ls "ck-$name" | grep -E '^ckpt-[0-9]+\.safetensors$' | sort | tail -1)
  if [ -z "$newest" ]; then
    fail "$name: no checkpoint"
  else
    local step=$((10#$(echo "$newest" | tr -dc 0-9)))
    cluster_hostfile=$(cluster_hostfile_without 1) cluster_mpirun -np 2 "$train" "${args[@]}" \
      --resume "ck-$name" --checkpoint-dir "ck-$name" --max-steps $((step + 3)) \
      >"$name-resume.out" 2>"$name-resume.err" || fail "$name: resuming on node 0 exited $?"
    grep -q "resumed from ck-$name/$newest" "$name-resume.err" "$name-resume.out" ||
      fail "$name: the resumed job did not start from $newest"
  fi
  # The next case starts from a whole cluster.
  rm -f "$cluster_dir"/lost-*
  cluster_kill_ns "$(cluster_ns 1)"
  cluster_heal 1
}

lose() { cluster_lose_node "$1"; }
crash() { cluster_partition "$1"; cluster_lose_node "$1"; }  # link first: no RST escapes

run_case lost lose "lost communication with a remote daemon|unexpectedly disconnected" \
  "(node|Peer host:) +mircn1"
probe="no answer from ranks 2,3 on node mircn1 \(all its ranks: node mircn1 is down or unreachable, or they hang\)"
run_case crashed crash "did not complete within ${timeout_s}s" "$probe"
run_case partition cluster_partition "did not complete within ${timeout_s}s" "$probe"

if [ "$failures" -ne 0 ]; then
  for f in *.err; do echo "== $f"; grep -v setpgid "$f" | tail -25; done
  exit 1
fi
echo "failures: node loss, crash and partition each ended the job naming node mircn1; checkpoints resumed on 1 node"
