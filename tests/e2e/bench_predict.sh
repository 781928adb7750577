#!/usr/bin/env bash
# mirror-bench predict from the command line: a profile (as mirror-bench train --json writes it)
# and a saved all-reduce table give the 1 x 1 ... 128 x 8 table with its closed-form values,
# the JSON rows and, with gnuplot, the plot; bad input is refused with exit code 2 and a
# message saying what was expected. (The cluster tests check it against measurements.)
# Usage: bench_predict.sh <build dir>. Exit 77 = skipped.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
bench="$build/bin/mirror-bench"
[ -x "$bench" ] || { echo "skip: $bench is not built"; exit 77; }

# compute 100 ms; backward ends at 90 ms; buckets of 1 MB ready at 40 ms and 90 ms.
cat >prof.json <<'EOF'
[{"replicas": 1, "step_ms": 100},
 {"replicas": 2, "model": "cnn", "batch_per_replica": 64, "devices": "cpu", "overlap": true,
  "step_ms": 101, "exposed_comm_ms": 1, "forward_ms": 30, "backward_ms": 60,
  "bucket_timings": [{"bytes": 1000000, "launch_ms": 40, "done_ms": 41},
                     {"bytes": 1000000, "launch_ms": 90, "done_ms": 91}]}]
EOF
"$bench" predict --profile prof.json --json rows.json >table.txt 2>err.txt || fail "predict exited $?"
grep -q "^ *128 x 8 *1024 |" table.txt || fail "no 128 x 8 row: $(cat table.txt)"
grep -q "^ *1 x 1 *1 | *100.00 *0.00 1.000" table.txt || fail "1 x 1 is not the compute alone"
# 2 nodes x 1 GPU over 8 Gbit/s without latency: each bucket takes 1 ms, the last is exposed.
"$bench" predict --profile prof.json --inter 0:8 --intra 0:1000 --gpus-per-node 1 --nodes 2 \
  >two.txt || fail "predict 2 x 1 exited $?"
grep -Eq "^ *2 x 1 +2 \| +101.00 +1.00 0.990" two.txt || fail "2 x 1 is not 101 ms: $(cat two.txt)"
"$bench" predict --profile prof.json --inter 0:8 --intra 0:1000 --gpus-per-node 1 --nodes 2 \
  --overlap 0 --compression fp16 >fp16.txt || fail "predict fp16 exited $?"
grep -Eq "^ *2 x 1 +2 \| +101.00 +1.00" fp16.txt || fail "fp16 without overlap is not 101 ms: $(cat fp16.txt)"
python3 -c "import json; r = json.load(open('rows.json')); assert len(r) == 9 and r[-1]['nodes'] == 128" ||
  fail "rows.json does not hold the 9 rows"
if command -v gnuplot >/dev/null; then
  "$bench" predict --profile prof.json --plot p.png >/dev/null && [ -s p.png ] || fail "no plot"
fi

# refused (exit 2) with what to do
expect_refusal() {  # expect_refusal TEXT ARGS...
  local text="$1"
  shift
  "$bench" predict "$@" >out.txt 2>msg.txt
  local rc=$?
  [ "$rc" -eq 2 ] || fail "predict $* exited $rc, not 2"
  grep -q -- "$text" msg.txt || fail "predict $*: message lacks '$text': $(cat msg.txt)"
}
expect_refusal "--profile FILE is required" --nodes 2
expect_refusal "unknown link 'infiniband': expected a preset (nvlink4" --profile prof.json --inter infiniband
expect_refusal "cannot be read" --profile missing.json
echo '[{"replicas": 1, "step_ms": 100}]' >one.json
expect_refusal "no row with 2 or more replicas" --profile one.json
echo 'not a sweep' >sweep.txt
expect_refusal "not a saved .mirror-bench allreduce. table" --profile prof.json --inter-sweep sweep.txt
expect_refusal "expects numbers separated by commas" --profile prof.json --nodes 2,x

[ "$failures" -eq 0 ] || exit 1
echo "bench_predict: table, closed forms, JSON and refusals as expected"
