#!/usr/bin/env bash
# launch/mirrorrun --max-restarts after a node is lost (Note [Relaunch on fewer nodes] in
# launch/mirrorrun): 2 emulated nodes x 2 ranks train with checkpoints; once one exists, node 1
#   lost       has every process killed and accepts no new daemon (cluster_lose_node), or
#   partition  has its link cut, its ranks alive but unreachable (cluster_partition): node 0's
#              ranks end by --comm-timeout, the cut-off ones by theirs.
# Each time mirrorrun names the cause, probes the hosts with the cluster's rsh agent, drops mircn1
# into a copy of the hostfile and relaunches with -np 2 instead of 4 on node 0 alone, which
# resumes from the newest checkpoint (same global batch on fewer ranks) and finishes: exit 0, the
# final checkpoint written, no rank left on either node.
# Usage: lost_node_restart.sh <build dir>. Exit 77 = skipped (no namespaces here).
source "$(dirname "${BASH_SOURCE[0]}")/cluster.bash" "$@"
cluster_up 2 2
cluster_limit=150
cd "$cluster_dir" || exit 1
export MIRRORRUN_BACKOFF_S=1
timeout_s=5

# 160 steps of 32 samples (4 epochs), a checkpoint every 5. The fault comes after the first
# checkpoint and must land mid-run: with 40 steps a loaded machine let the whole run end first
# (its exit then hung in MPI_Finalize across the partition).
args=(--model gru-rows --data synthetic --train-limit 1280 --test-limit 64 --batch-size 32
      --epochs 4 --devices cpu --no-progress --checkpoint-every 5 --comm-timeout "$timeout_s")
final_step=160

# run_case NAME FAULT CAUSE: FAULT (a command given the node) after the first checkpoint; CAUSE
# (grep -E) must be in mirrorrun's restart line.
run_case() {
  local name="$1" fault="$2" cause="$3" job rc before="" drop relaunch last r
  cluster_mirrorrun --max-restarts 1 -np 4 "$train" "${args[@]}" --checkpoint-dir "ck-$name" \
    >"$name.out" 2>"$name.err" &
  job=$!
  for _ in $(seq 1 1200); do
    ls "ck-$name" 2>/dev/null | grep -q safetensors && break
    sleep 0.05
  done
  [ "$(cluster_pids_of "$train" 1 | wc -l)" -eq 2 ] || fail "$name: node 1 runs no 2 ranks before the fault"
  $fault 1
  # The checkpoints the failed job left: listed when mirrorrun announces the relaunch (the
  # resumed job needs its start-up and 5 steps before it writes one of its own).
  for _ in $(seq 1 2400); do
    if grep -q "mirrorrun: dropping host" "$name.err" 2>/dev/null; then
      before=$(ls "ck-$name" | grep -E '^ckpt-[0-9]+\.safetensors$' | sort | tail -1)
      break
    fi
    kill -0 "$job" 2>/dev/null || break
    sleep 0.05
  done
  wait "$job"
  rc=$?
  [ "$rc" -eq 0 ] || fail "$name: mirrorrun exited $rc (want 0: relaunched on node 0)"

  # The first run: 4 ranks on 2 nodes; then the cause.
  grep -q "^\[mirror\] rank 3/4 local 1/2 host mircn1 " "$name.err" || fail "$name: the first run had no rank 3 on mircn1"
  grep -Eq "mirrorrun: the job ended with exit code [0-9]+ \(.*($cause).*\); restart 1 of 1" "$name.err" ||
    fail "$name: no restart line with /$cause/: $(grep 'mirrorrun: the job ended' "$name.err")"
  # The relaunch: mircn1 dropped, -np lowered, 2 ranks on mircn0 only.
  drop=$(grep "mirrorrun: dropping host" "$name.err")
  [[ "$drop" == *"dropping host(s) mircn1: no answer to \`$cluster_dir/rsh-agent HOST true\` (ssh: connect to host mircn1 port 22: "*"); relaunching on 1 of 2 hosts with -np 2 instead of 4 (hostfile "* ]] ||
    fail "$name: no (or a wrong) line about dropping mircn1: '$drop'"
  relaunch=$(sed -n '/mirrorrun: dropping host/,$p' "$name.err")
  for r in 0 1; do
    echo "$relaunch" | grep -q "^\[mirror\] rank $r/2 local $r/2 host mircn0 " ||
      fail "$name: the relaunch had no rank $r/2 on mircn0"
  done
  echo "$relaunch" | grep -q "^\[mirror\] rank .* host mircn1 " && fail "$name: the relaunch still used mircn1"
  # It resumed from the newest checkpoint of the failed job and finished the epoch.
  if [ -z "$before" ]; then
    fail "$name: no checkpoint when the relaunch was announced"
  else
    grep -q "resumed from ck-$name/$before" "$name.out" "$name.err" ||
      fail "$name: the relaunch did not resume from ck-$name/$before"
  fi
  last=$(ls "ck-$name" | grep -E '^ckpt-[0-9]+\.safetensors$' | sort | tail -1)
  [ "$((10#$(echo "$last" | tr -dc 0-9)))" -eq "$final_step" ] ||
    fail "$name: the newest checkpoint is $last, not step $final_step"
  grep -q "weights fingerprint" "$name.out" || fail "$name: the resumed job printed no final fingerprint"
  [ -z "$(ip netns pids "$(cluster_ns 0)")" ] || fail "$name: processes left on node 0"
  # The cut-off ranks end by their own --comm-timeout (a hang limit, not a measurement).
  for ((r = 0; r < (timeout_s + 15) * 5; r++)); do
    [ -z "$(cluster_pids_of "$train" 1)" ] && break
    sleep 0.2
  done
  [ -z "$(cluster_pids_of "$train" 1)" ] || fail "$name: ranks left on node 1"
  echo "     $name: relaunched on mircn0 with 2 ranks after $before, finished at $last;"
  grep -o 'the job ended with exit code .*; restart' "$name.err" | sed 's/^/       /'
  echo "       $drop"
  # The next case starts from a whole cluster.
  rm -f "$cluster_dir"/lost-*
  cluster_kill_ns "$(cluster_ns 1)"
  cluster_heal 1
}

# Open MPI 4 says "ORTE has lost communication with a remote daemon" and names the node on a
# line of its own (mirrorrun appends it); after a partition node 0's ranks time out first and
# name the silent ranks (Note [Liveness probe] in distributed/runtime.cpp).
run_case lost cluster_lose_node "lost communication with a remote daemon on node mircn1"
run_case partition cluster_partition "did not complete within ${timeout_s}s.*no answer from ranks 2,3 on node mircn1"

if [ "$failures" -ne 0 ]; then
  for f in *.err; do echo "== $f"; grep -v setpgid "$f" | tail -30; done
  exit 1
fi
echo "lost_node_restart: after a lost and a partitioned node, mirrorrun relaunched on the other with 2 ranks, resumed and finished"
