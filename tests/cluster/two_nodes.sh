#!/usr/bin/env bash
# Two emulated nodes x 2 ranks (Note [Emulated cluster] in cluster.bash), started by
# launch/mirrorrun --hostfile: each node's ranks report their own host and local ranks 0/2 and
# 1/2; the ranks on one node talk over shared memory and across nodes over TCP (the bytes on the
# node links are counted); the final weights equal, bit for bit, those of 1 node x 4 ranks
# (the same fingerprint, and the same checkpoint tensors); and 2 x 2 with mpirun directly.
# Usage: two_nodes.sh <build dir>. Exit 77 = skipped (no namespaces here).
source "$(dirname "${BASH_SOURCE[0]}")/cluster.bash" "$@"
cluster_up 2 2
cd "$cluster_dir" || exit 1
fingerprint() { grep -o 'weights fingerprint: [0-9a-f]*' "$1" | tail -1 | awk '{print $3}'; }
tx_bytes() { ip netns exec "$(cluster_ns "$1")" cat /sys/class/net/eth0/statistics/tx_bytes; }

args=(--model gru-rows --data synthetic --train-limit 512 --test-limit 64 --batch-size 32
      --epochs 1 --devices cpu --no-progress --checkpoint-every 8)

# 1 node x 4 ranks: plain mirrorrun on this machine.
timeout -k 10 300 "$mirrorrun" -np 4 --bind-to none --mpirun-arg --oversubscribe "$train" \
  "${args[@]}" --checkpoint-dir one >one.out 2>one.err || fail "1 x 4 exited $?"
want=$(fingerprint one.out)
[ -n "$want" ] || fail "1 x 4 printed no fingerprint"

# 2 nodes x 2 ranks through mirrorrun --hostfile.
before=$(tx_bytes 1)
cluster_mirrorrun -np 4 "$train" "${args[@]}" --checkpoint-dir two >two.out 2>two.err ||
  fail "2 x 2 (mirrorrun --hostfile) exited $?"
sent=$(( $(tx_bytes 1) - before ))
for r in 0 1 2 3; do
  node=$((r / 2)) local=$((r % 2))
  grep -q "^\[mirror\] rank $r/4 local $local/2 host $(cluster_host $node) " two.err ||
    fail "rank $r did not report local $local/2 on $(cluster_host $node)"
done
grep -q "mirrorrun: .*--hostfile $cluster_dir/hostfile" two.err || fail "mirrorrun did not use the hostfile"
# The gradients of ranks 2 and 3 must cross node 1's link: 8 steps x 18698 float32 gradients
# x 2 (a ring sends about twice the buffer), more than 0.5 MB; TCP control traffic alone is far
# less.
[ "$sent" -gt 500000 ] || fail "node 1 sent only $sent bytes over its link: the ranks did not use it"
got=$(fingerprint two.out)
[ "$got" = "$want" ] || fail "2 x 2 fingerprint '$got' != 1 x 4 '$want'"
python3 "$root/tests/e2e/compare_checkpoints.py" one two 0 || fail "2 x 2 checkpoint differs from 1 x 4"

# 2 nodes x 2 ranks with mpirun itself (what launch/README.md shows for several nodes).
cluster_mpirun -np 4 "$train" "${args[@]}" --checkpoint-dir three >mpirun.out 2>mpirun.err || fail "2 x 2 (mpirun) exited $?"
[ "$(fingerprint mpirun.out)" = "$want" ] || fail "2 x 2 with mpirun: fingerprint differs"

if [ "$failures" -ne 0 ]; then
  for f in *.err; do echo "== $f"; tail -20 "$f"; done
  exit 1
fi
echo "two_nodes: 2 x 2 across emulated nodes ($sent bytes over node 1's link) = 1 x 4, fingerprint $got"
