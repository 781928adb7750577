#!/usr/bin/env bash
# Local ranks and device selection per node across 2 emulated nodes (Note [Per-rank GPU binding]
# in distributed/device_selection.h):
#  - tests/mpi/node_gpus_test (every rank fakes one GPU of its own) on 2 nodes x 2 ranks: each
#    node's local ranks see each other's GPUs in local-rank order, `--devices auto` gives each
#    its cuda:0, and one GPU shared by a node's 2 local ranks is refused; on 2 + 1 ranks (local
#    sizes 2 and 1) the views still follow the nodes;
#  - mirror-train --devices auto via mirrorrun --hostfile: every rank reports its node and
#    local rank and the device auto chose: cuda:<local rank> on a node with GPUs, else the
#    CPU with the loud fallback warning, printed once by rank 0 naming the ranks by node.
# mirror-train cannot be handed fake GPUs (they come from the CUDA runtime), hence the MPI test.
# Usage: node_devices.sh <build dir>. Exit 77 = skipped (no namespaces here).
source "$(dirname "${BASH_SOURCE[0]}")/cluster.bash" "$@"
gpus_test="$build/tests/node_gpus_test"
[ -x "$gpus_test" ] || { echo "skip: $gpus_test is not built"; exit 77; }
cluster_up 2 2
cluster_limit=120
cd "$cluster_dir" || exit 1

cluster_mpirun -np 4 "$gpus_test" --gtest_color=no >gpus4.out 2>gpus4.err || fail "node_gpus_test on 2 x 2 exited $?"
grep -q "^\[  PASSED  \] 2 tests" gpus4.out || fail "node_gpus_test on 2 x 2 did not pass its 2 tests"
cluster_mpirun -np 3 "$gpus_test" --gtest_color=no --gtest_filter=NodeGpuViews.EveryLocalRankSeesWhatEachOtherSees \
  >gpus3.out 2>gpus3.err || fail "node_gpus_test views on 2 + 1 exited $?"
grep -q "^\[  PASSED  \] 1 test" gpus3.out || fail "node_gpus_test views on 2 + 1 did not pass"

cluster_mirrorrun -np 4 "$train" --model gru-rows --data synthetic --train-limit 256 --test-limit 64 \
  --batch-size 32 --epochs 1 --no-progress --devices auto >auto.out 2>auto.err ||
  fail "mirror-train --devices auto on 2 x 2 exited $?"
for r in 0 1 2 3; do
  node=$((r / 2)) local=$((r % 2))
  line=$(grep "^\[mirror\] rank $r/4 local $local/2 host $(cluster_host $node) " auto.err)
  case "$line" in
    *" devices cuda:$local "*) ;;
    *" devices cpu:0 "*"CPU fallback")
      # One banner (Note [One fallback banner]) names every rank that fell back, by host.
      grep -q "^\[mirror\] WARNING: NO USABLE GPU" auto.err &&
        grep "^\[mirror\]   ranks\{0,1\}: " auto.err | grep -qE "(: |, |; )$r(,| on host $(cluster_host $node))" ||
        fail "rank $r fell back to the CPU silently" ;;
    *) fail "rank $r: no line 'local $local/2 host $(cluster_host $node)' with cuda:$local or the CPU fallback: '$line'" ;;
  esac
done

if [ "$failures" -ne 0 ]; then
  for f in *.err; do echo "== $f"; grep -v setpgid "$f" | tail -20; done
  exit 1
fi
echo "node_devices: per-node GPU views and auto selection on 2 x 2 and 2 + 1 ranks; mirror-train auto: $(grep -c 'CPU fallback' auto.err) CPU fallbacks"
