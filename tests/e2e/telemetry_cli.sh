#!/usr/bin/env bash
# mirror-train's telemetry from the command line: --log-jsonl and --trace refuse an existing file
# unless --overwrite, and append with --resume (the trace after a marker); a 2-rank traced run has no badly nested spans on any
# (rank, track) row; the console, the log and the trace number epochs and steps alike.
set -euo pipefail
build="$1"
train="$build/bin/mirror-train"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
common=(--model gru-rows --data synthetic --train-limit 128 --test-limit 32 --batch-size 32
        --threads 1 --devices cpu --no-progress --seed 3 --epochs 2)
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== an existing --log-jsonl file is refused, --overwrite replaces it, --resume appends"
"$train" "${common[@]}" --log-jsonl "$work/log.jsonl" --checkpoint-dir "$work/ck" --max-steps 3 \
  >"$work/a.out" 2>&1 || { cat "$work/a.out"; fail "first run"; }
[ "$(grep -c '"type":"step"' "$work/log.jsonl")" = 3 ] || fail "3 step records expected"
if "$train" "${common[@]}" --log-jsonl "$work/log.jsonl" >"$work/b.out" 2>&1; then
  fail "an existing log was overwritten without --overwrite"
fi
grep -q -- "already exists; pass --overwrite" "$work/b.out" || { cat "$work/b.out"; fail "no clear refusal"; }
[ "$(grep -c '"type":"step"' "$work/log.jsonl")" = 3 ] || fail "the refused log was changed"
"$train" "${common[@]}" --log-jsonl "$work/log.jsonl" --resume "$work/ck" >"$work/c.out" 2>&1 ||
  { cat "$work/c.out"; fail "resumed run"; }
python3 - "$work/log.jsonl" <<'PY'
import json, sys
steps = [r["step"] for r in map(json.loads, open(sys.argv[1])) if r["type"] == "step"]
assert steps == list(range(1, 9)), steps  # 3 steps, then the resumed run's 4..8 appended
PY
"$train" "${common[@]}" --log-jsonl "$work/log.jsonl" --overwrite >"$work/d.out" 2>&1 ||
  { cat "$work/d.out"; fail "--overwrite run"; }
[ "$(grep -c '"type":"step"' "$work/log.jsonl")" = 8 ] || fail "--overwrite did not replace the log"

echo "== a restarted run logs each step once: the records past the resumed checkpoint are cut"
# As if killed after step 6 with its newest checkpoint at step 4: the log holds steps 1..6, the
# (partial) epoch 2 and the summary, both at step 6; the resumed run runs 5 and 6 again and
# cuts those 4 records first (Note [Resumed logs]).
"$train" "${common[@]}" --log-jsonl "$work/cut.jsonl" --checkpoint-dir "$work/cut-ck" --max-steps 6 \
  --checkpoint-every 4 --keep 0 >"$work/cut1.out" 2>&1 || { cat "$work/cut1.out"; fail "run to be cut"; }
rm "$work/cut-ck/ckpt-000000000006.safetensors"
"$train" "${common[@]}" --log-jsonl "$work/cut.jsonl" --resume "$work/cut-ck" >"$work/cut2.out" 2>&1 ||
  { cat "$work/cut2.out"; fail "restarted run"; }
grep -q "removed 4 record(s) past step 4" "$work/cut2.out" || { cat "$work/cut2.out"; fail "no line about the cut records"; }
python3 - "$work/cut.jsonl" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
steps = [r["step"] for r in records if r["type"] == "step"]
assert steps == list(range(1, 9)), steps  # each step once: 1..4 of the first run, 5..8 resumed
epochs = [r["step"] for r in records if r["type"] == "epoch"]
assert epochs == [4, 8], epochs
assert [r["final_step"] for r in records if r["type"] == "summary"] == [8], records[-1]
PY

echo "== --trace: an existing file is refused, --resume appends after a marker"
"$train" "${common[@]}" --trace "$work/run.trace" --checkpoint-dir "$work/tk" --max-steps 3 \
  >"$work/f.out" 2>&1 || { cat "$work/f.out"; fail "first traced run"; }
if "$train" "${common[@]}" --trace "$work/run.trace" >"$work/g.out" 2>&1; then
  fail "an existing trace was overwritten without --overwrite"
fi
grep -q -- "the trace '$work/run.trace' already exists; pass --overwrite" "$work/g.out" ||
  { cat "$work/g.out"; fail "no clear refusal of the trace"; }
"$train" "${common[@]}" --trace "$work/run.trace" --resume "$work/tk" >"$work/h.out" 2>&1 ||
  { cat "$work/h.out"; fail "resumed traced run"; }
python3 - "$work/run.trace" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
steps = [e["args"]["step"] for e in events if e.get("ph") == "X" and e["name"].startswith("step ")]
assert steps == list(range(1, 9)), steps  # 3 steps, then the resumed run's 4..8 after them
marks = [e for e in events if e.get("ph") == "i"]
assert [m["name"] for m in marks] == ["resumed after step 3"], marks
step = {e["args"]["step"]: e for e in events if e.get("ph") == "X" and e["name"].startswith("step ")}
assert step[3]["ts"] + step[3]["dur"] < marks[0]["ts"] <= step[4]["ts"], (step[3], marks, step[4])
PY
echo "not a trace" >"$work/junk.trace"
if "$train" "${common[@]}" --trace "$work/junk.trace" --resume "$work/tk" --max-steps 9 >"$work/i.out" 2>&1; then
  fail "a resumed run appended to a file that is not a trace"
fi
grep -q "is not valid JSON.*a resumed run appends to its --trace: name another file" "$work/i.out" ||
  { cat "$work/i.out"; fail "no clear refusal of a foreign --trace file"; }
[ "$(cat "$work/junk.trace")" = "not a trace" ] || fail "the foreign file was changed"

echo "== 2 ranks, traced: spans nest on every row; console, log and trace count alike"
mpirun --oversubscribe --bind-to none -np 2 "$train" "${common[@]}" --bucket-mb 0.001 \
  --first-bucket-mb 0.001 --log-jsonl "$work/log2.jsonl" --trace "$work/trace.json" \
  >"$work/e.out" 2>&1 || { cat "$work/e.out"; fail "2-rank traced run"; }
python3 - "$work/log2.jsonl" "$work/trace.json" "$work/e.out" <<'PY'
import collections, json, re, sys
log = [json.loads(l) for l in open(sys.argv[1])]
events = json.load(open(sys.argv[2]))["traceEvents"]
console = open(sys.argv[3]).read()
rows = collections.defaultdict(list)
for e in events:
    if e.get("ph") == "X":
        rows[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
bad = {}
for row, spans in rows.items():
    spans.sort(key=lambda s: (s[0], -s[1]))
    n = 0
    for i, (b, end) in enumerate(spans):
        for b2, e2 in spans[i + 1:]:
            if b2 >= end - 1e-3: break
            n += e2 > end + 1e-3
    bad[row] = n
print("badly nested pairs per (rank, track):", bad)
assert all(n == 0 for n in bad.values()), bad
assert {p for p, _ in rows} == {0, 1}
assert any(t != 0 for _, t in rows), "all-reduce spans on tracks of their own"
log_steps = {(r["epoch"], r["step"]) for r in log if r["type"] == "step"}
trace_steps = {(e["args"]["epoch"], e["args"]["step"]) for e in events
               if e.get("ph") == "X" and e["name"].startswith("step ") and e["pid"] == 0}
assert log_steps == trace_steps, (sorted(log_steps), sorted(trace_steps))
assert sorted(log_steps) == [(1 + (s - 1) // 4, s) for s in range(1, 9)], sorted(log_steps)
epochs = [r["epoch"] for r in log if r["type"] == "epoch"]
assert epochs == [int(m) for m in re.findall(r"^epoch (\d+)/2:", console, re.M)] == [1, 2], epochs
PY
echo "telemetry_cli: ok"
