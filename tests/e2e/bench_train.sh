#!/usr/bin/env bash
# mirror-bench train end to end: the parent relaunches itself for 1 and 2 ranks, prints one table
# row per count, writes a JSON list with the documented fields (replicas identical at the end,
# efficiency 1 for the smallest count, buckets all-reduced only with 2 replicas), and rejects bad
# options. Timings are not asserted (shared machine). Usage: bench_train.sh BUILD_DIR
set -euo pipefail
build="${1:?usage: bench_train.sh BUILD_DIR}"
bench="$build/bin/mirror-bench"
[[ -x "$bench" ]] || { echo "SKIP: $bench not built"; exit 77; }
command -v mpirun >/dev/null || { echo "SKIP: mpirun not installed"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$bench" train --help >"$work/help.txt"
grep -q -- "--batch-per-replica" "$work/help.txt" || fail "--help does not list --batch-per-replica"
if "$bench" train --model lstm 2>"$work/bad.txt"; then fail "--model lstm was accepted"; fi
grep -q "resnet, inception or gru-rows" "$work/bad.txt" || fail "bad --model message: $(cat "$work/bad.txt")"

for model in cnn gru-rows; do
  "$bench" train --model "$model" --replicas 1,2 --steps 2 --warmup 1 --rounds 1 \
    --batch-per-replica 8 --json "$work/$model.json" >"$work/$model.txt"
  cat "$work/$model.txt"
  python3 - "$work/$model.json" "$model" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
assert [r["replicas"] for r in rows] == [1, 2], rows
for r in rows:
    for key in ("step_ms", "mean_step_ms", "samples_per_s", "scaling_efficiency",
                "exposed_comm_ms", "peak_bytes"):
        assert key in r, (key, r)
    assert r["model"] == sys.argv[2]
    assert r["replicas_identical"] is True, r
    assert r["step_ms"] > 0 and r["samples_per_s"] > 0 and r["peak_bytes"] > 0, r
assert rows[0]["scaling_efficiency"] == 1.0, rows[0]
assert rows[0]["buckets"] == 0 and rows[1]["buckets"] >= 1, rows
PY
  if command -v gnuplot >/dev/null; then
    [[ -s "$work/$model.png" ]] || fail "no plot $work/$model.png although gnuplot is installed"
  fi
done

# --precision reaches the workers: mixed_float16 (emulated on any CPU) is named in the table and
# the rows; a bad policy is refused before any job starts.
"$bench" train --model cnn --replicas 2 --steps 2 --warmup 1 --rounds 1 --batch-per-replica 8 \
  --precision mixed_float16 --json "$work/fp16.json" >"$work/fp16.txt" ||
  fail "--precision mixed_float16: $(tail -3 "$work/fp16.txt")"
grep -q "precision mixed_float16" "$work/fp16.txt" || fail "the table does not name the precision"
python3 -c 'import json, sys; rows = json.load(open(sys.argv[1])); assert [r["precision"] for r in rows] == ["mixed_float16"] and rows[0]["replicas_identical"], rows' "$work/fp16.json" ||
  fail "fp16 rows"
if "$bench" train --precision fp8 2>"$work/badp.txt"; then fail "--precision fp8 was accepted"; fi
grep -q -- "--precision: " "$work/badp.txt" || fail "bad --precision message: $(cat "$work/badp.txt")"
# --model-spec: the user's own model (a Keras functional JSON here) is what the workers train;
# the table and the rows name it; a spec that cannot be read is refused before any job starts.
spec="$(cd "$(dirname "${BASH_SOURCE[0]}")/../data/keras" && pwd)/residual.keras.json"
"$bench" train --model-spec "$spec" --replicas 1,2 --steps 2 --warmup 1 --rounds 1 \
  --batch-per-replica 4 --json "$work/spec.json" >"$work/spec.txt" ||
  fail "--model-spec: $(tail -3 "$work/spec.txt")"
grep -q "model residual ($spec)" "$work/spec.txt" || fail "the table does not name the spec: $(head -3 "$work/spec.txt")"
python3 -c 'import json, sys; rows = json.load(open(sys.argv[1])); assert [r["model"].split()[0] for r in rows] == ["residual"] * 2 and all(r["replicas_identical"] for r in rows), rows' "$work/spec.json" ||
  fail "spec rows"
echo '{"layers": [{"type": "dense", "units": -3}]}' >"$work/bad-spec.json"
if "$bench" train --model-spec "$work/bad-spec.json" 2>"$work/bads.txt"; then fail "a bad spec was accepted"; fi
grep -q "bad-spec.json" "$work/bads.txt" || fail "bad spec message: $(cat "$work/bads.txt")"
# step-bench times the same spec (and says what it timed).
"$build/bin/step-bench" --model-spec "$spec" --steps 1 --warmup 0 --batch 4 >"$work/step.txt" ||
  fail "step-bench --model-spec: $(cat "$work/step.txt")"
grep -q "^mirror residual ($spec) float32 batch=4" "$work/step.txt" || fail "step-bench line: $(cat "$work/step.txt")"
# step-bench --profile: one row per layer of the model (the CNN's eight), the loss, the optimizer
# and the line comparing their sum with the timed median.
"$build/bin/step-bench" --model cnn --steps 1 --warmup 0 --batch 4 --profile >"$work/profile.txt" ||
  fail "step-bench --profile: $(cat "$work/profile.txt")"
for row in conv2d_1 max_pooling2d_1 conv2d_2 max_pooling2d_2 flatten_1 dense_1 dropout_1 dense_2 loss optimizer; do
  grep -q "^$row " "$work/profile.txt" || fail "the profile has no row $row: $(cat "$work/profile.txt")"
done
grep -q "^sum of the rows [0-9.]* ms; the timed steps' median [0-9.]* ms" "$work/profile.txt" ||
  fail "the profile has no sum line"
# step-bench --device / --profile-gpu: bad values are refused (exit 2) naming the flag; a GPU
# where none can be used is an error with the reason (exit 1), never a silent CPU run.
for args in "--device tpu" "--profile-gpu sometimes"; do
  rc=0
  "$build/bin/step-bench" --model cnn --steps 1 $args >"$work/bad-step.txt" 2>&1 || rc=$?
  [ "$rc" = 2 ] && grep -q -- "${args%% *}" "$work/bad-step.txt" ||
    fail "step-bench $args: exit $rc, $(cat "$work/bad-step.txt")"
done
"$build/bin/mirror-doctor" --json >"$work/doctor.json" 2>/dev/null || true
if ! grep -q '"usable": *true' "$work/doctor.json"; then
  rc=0
  "$build/bin/step-bench" --model cnn --steps 1 --warmup 0 --batch 4 --device gpu >"$work/nogpu.txt" 2>&1 || rc=$?
  [ "$rc" = 1 ] && grep -q "GPU" "$work/nogpu.txt" ||
    fail "step-bench --device gpu without a GPU: exit $rc, $(cat "$work/nogpu.txt")"
fi
echo "PASS"
