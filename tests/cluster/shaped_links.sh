#!/usr/bin/env bash
# mirror-bench across 2 emulated nodes x 1 rank whose link is shaped with tc tbf (Note [Emulated
# cluster] in cluster.bash), and `mirror-bench predict` checked against it:
#  - per rate: an all-reduce sweep across the nodes (fitted to alpha-beta by predict), then
#    mirror-bench train (CNN) with overlap on/off, fp16 compression and one big bucket;
#  - each measured step next to the step predict gives for 2 x 1 from a profile recorded on one
#    node (shared memory) and the sweep: the table docs/scaling.md quotes.
# It asserts what does not depend on timing: every run completes with identical replicas, the
# bytes on the link halve with fp16, and predict reads every profile and sweep. The error
# column is reported, not asserted (this machine is shared; times are noisy).
# Usage: shaped_links.sh <build dir> [rates...] (default: 1gbit 200mbit 10gbit). Exit 77 = skipped.
source "$(dirname "${BASH_SOURCE[0]}")/cluster.bash" "$1"
shift
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(1gbit 200mbit 10gbit)
[ -x "$bench" ] || { echo "skip: $bench is not built"; exit 77; }
cluster_up 2 1
cd "$cluster_dir" || exit 1
launcher=$(cluster_write_launcher)
tx_bytes() { ip netns exec "$(cluster_ns 1)" cat /sys/class/net/eth0/statistics/tx_bytes; }
steps=(--model cnn --steps 5 --warmup 1 --rounds 1 --batch-per-replica 64)
one_bucket=(--first-bucket-bytes 64M --bucket-bytes 64M)

# The single-replica profiles (2 ranks on this machine over shared memory: the bucket ready
# times need a second replica), one per bucket layout.
"$bench" train "${steps[@]}" --replicas 2 --launcher mpirun --json prof-default.json >prof.log 2>&1 ||
  fail "profile run exited $?"
"$bench" train "${steps[@]}" "${one_bucket[@]}" --replicas 2 --launcher mpirun \
  --json prof-onebucket.json >>prof.log 2>&1 || fail "one-bucket profile run exited $?"

json_field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[0][sys.argv[2]])" "$@"; }
table="                        measured        | predicted, profile compute  | predicted, the run's compute
rate      config       step ms (exposed) | step ms (exposed)  error    | step ms (exposed)  error"
# measure RATE NAME PROFILE OVERLAP COMPRESSION [EXTRA...]: one shaped run and its prediction.
measure() {
  local rate="$1" name="$2" prof="$3" overlap="$4" comp="$5" out before
  shift 5
  out="$rate-$name"
  before=$(tx_bytes)
  "$bench" train "${steps[@]}" --replicas 2 --launcher "$launcher" --overlap "$overlap" \
    --compression "$comp" "$@" --json "$out.json" >"$out.log" 2>&1 || { fail "$out: exited $?"; return; }
  echo $(( $(tx_bytes) - before )) >"$out.bytes"
  [ "$(json_field "$out.json" replicas_identical)" = "True" ] || fail "$out: replicas differ"
  # Predicted twice: from the profile as recorded, and rescaled to this run's own compute
  # (forward + backward + optimizer), which leaves only the communication model to judge on a
  # machine whose load changes between runs.
  local scale sweep="sweep-$rate.txt"
  # Compressed buckets are reduced in their 16-bit type, whose sum costs more per byte on a CPU
  # than float32's: their link is fitted to a float16 sweep.
  [ "$comp" = none ] || sweep="sweep-$rate-fp16.txt"
  scale=$(python3 -c "import json,sys
f = lambda p: (lambda r: r['forward_ms'] + r['backward_ms'] + r['optimizer_ms'])(json.load(open(p))[0])
print(f(sys.argv[1]) / f(sys.argv[2]))" "$out.json" "$prof")
  for kind in profile run; do
    "$bench" predict --profile "$prof" --inter-sweep "$sweep" --intra 1:1000 \
      --gpus-per-node 1 --nodes 2 --overlap "$overlap" --compression "$comp" \
      --compute-scale "$([ $kind = run ] && echo "$scale" || echo 1)" --json "$out.pred-$kind.json" \
      >"$out.pred" 2>&1 || { fail "$out: predict exited $?"; cat "$out.pred"; return; }
  done
  table+=$'\n'$(python3 - "$out" "$rate" "$name" <<'PY'
import json, sys
out = sys.argv[1]
m = json.load(open(out + ".json"))[0]
cells = ["%-9s %-11s %8.1f (%6.1f)" % (sys.argv[2], sys.argv[3], m["step_ms"], m["exposed_comm_ms"])]
for kind in ("profile", "run"):
    p = [r for r in json.load(open("%s.pred-%s.json" % (out, kind))) if r["nodes"] == 2][0]
    err = 100.0 * (p["ring_step_ms"] - m["step_ms"]) / m["step_ms"]
    cells.append("%8.1f (%6.1f) %+6.1f%%" % (p["ring_step_ms"], p["ring_exposed_ms"], err))
print("  | ".join(cells))
PY
)
}

for rate in "${rates[@]}"; do
  cluster_shape "$rate"
  cluster_mpirun -np 2 "$bench" allreduce -b 256K -e 16M -f 4 -n 3 -w 1 -r 1 >"sweep-$rate.txt" 2>"sweep-$rate.err" ||
    fail "sweep at $rate exited $?"
  if [ "$rate" != 10gbit ]; then
    cluster_mpirun -np 2 "$bench" allreduce -b 256K -e 16M -f 4 -n 3 -w 1 -r 1 --dtype float16 \
      >"sweep-$rate-fp16.txt" 2>"sweep-$rate-fp16.err" || fail "float16 sweep at $rate exited $?"
  fi
  measure "$rate" overlap prof-default.json 1 none
  [ "$rate" = 10gbit ] && continue  # not the bottleneck here (the CPUs are): one row suffices
  measure "$rate" no-overlap prof-default.json 0 none
  measure "$rate" fp16 prof-default.json 1 fp16
  measure "$rate" one-bucket prof-onebucket.json 1 none "${one_bucket[@]}"
  # fp16 puts half the gradient bytes on the link (same steps, same model).
  full=$(cat "$rate-overlap.bytes" 2>/dev/null || echo 0) half=$(cat "$rate-fp16.bytes" 2>/dev/null || echo 0)
  ratio=$(awk -v a="$half" -v b="$full" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
  awk -v r="$ratio" 'BEGIN { exit !(r >= 0.4 && r <= 0.65) }' ||
    fail "$rate: fp16 sent $half bytes vs $full without compression (ratio $ratio, expected ~0.5)"
done

echo "$table"
for rate in "${rates[@]}"; do
  grep -h "^# inter-node" "$rate-overlap.pred" "$rate-fp16.pred" 2>/dev/null | sed "s/^# /$rate: /"
done
if [ "$failures" -ne 0 ]; then
  for f in *.log *.err; do echo "== $f"; grep -v setpgid "$f" | tail -15; done
  exit 1
fi
echo "shaped_links: all runs completed; fp16 halves the link bytes"
