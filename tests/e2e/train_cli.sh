#!/usr/bin/env bash
# End-to-end runs of mirror-train on a small synthetic slice: 1 and 2 ranks, interrupted and
# resumed runs (bitwise identical to uninterrupted ones, with --epochs and --max-steps), resume at
# another world size, --resume without a valid checkpoint, --resume-or-start, a fresh run refusing
# another run's checkpoints, the JSON-lines log and trace, and clear errors for bad flags/configs.
set -euo pipefail
build="$1"
train="$build/bin/mirror-train"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun_() { mpirun --oversubscribe --bind-to none -np "$@"; }
common=(--model gru-rows --data synthetic --train-limit 192 --test-limit 64 --batch-size 32
        --threads 1 --devices cpu --no-progress --seed 7)
fail() { echo "FAIL: $*" >&2; exit 1; }
fingerprint() { grep -o 'weights fingerprint: [0-9a-f]*' "$1" | awk '{print $3}'; }

echo "== 1 rank, 2 epochs, log and trace"
"$train" "${common[@]}" --epochs 2 --log-jsonl "$work/log.jsonl" --trace "$work/trace.json" >"$work/a.out" 2>&1 ||
  { cat "$work/a.out"; fail "1-rank run"; }
grep -q '^test accuracy: 0\.[0-9]\{4\}$' "$work/a.out" || fail "no test accuracy line"
grep -q '^epoch 2/2: ' "$work/a.out" || fail "no per-epoch line"
fa=$(fingerprint "$work/a.out")
python3 - "$work/log.jsonl" "$work/trace.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if r["type"] == "step"]
assert len(steps) == 12, len(steps)                      # 192 / 32 = 6 steps x 2 epochs
for k in ("loss", "accuracy", "lr", "samples_per_s", "data_wait_ms", "compute_ms", "exposed_comm_ms"):
    assert k in steps[0], k
assert [r["type"] for r in rows].count("epoch") == 2
assert rows[-1]["type"] == "summary"
trace = json.load(open(sys.argv[2]))
names = {e["name"] for e in trace["traceEvents"]}
assert {"forward", "backward", "optimizer", "data wait"} <= names, names
PY
mpirun_ 2 "$train" "${common[@]}" --epochs 1 --trace "$work/trace2.json" >"$work/t2.out" 2>&1 ||
  { cat "$work/t2.out"; fail "2-rank traced run"; }
python3 - "$work/trace2.json" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
spans = [e for e in events if e.get("ph") == "X"]
assert {e["pid"] for e in spans} == {0, 1}, "both ranks' spans are merged"
buckets = [e for e in spans if e["name"].startswith("all-reduce bucket")]
assert buckets and all(e["dur"] >= 0 for e in buckets), "bucket all-reduce spans"
PY

echo "== interrupted after 4 steps, then resumed: bitwise identical to the uninterrupted run"
"$train" "${common[@]}" --epochs 2 --max-steps 4 --checkpoint-dir "$work/ck" >"$work/b1.out" 2>&1 ||
  { cat "$work/b1.out"; fail "interrupted run"; }
ls "$work/ck"/ckpt-*.safetensors >/dev/null || fail "no checkpoint written"
"$train" "${common[@]}" --epochs 2 --resume "$work/ck" --checkpoint-dir "$work/ck" >"$work/b2.out" 2>&1 ||
  { cat "$work/b2.out"; fail "resumed run"; }
grep -q 'resumed from .*ckpt-0*4.safetensors' "$work/b2.out" || { cat "$work/b2.out"; fail "did not resume at step 4"; }
fb=$(fingerprint "$work/b2.out")
[ "$fa" = "$fb" ] || fail "resumed weights $fb differ from uninterrupted $fa"

echo "== 2 ranks: uninterrupted vs interrupted+resumed, bitwise"
mpirun_ 2 "$train" "${common[@]}" --epochs 2 >"$work/c.out" 2>&1 || { cat "$work/c.out"; fail "2-rank run"; }
fc=$(fingerprint "$work/c.out")
mpirun_ 2 "$train" "${common[@]}" --epochs 2 --max-steps 5 --checkpoint-dir "$work/ck2" >"$work/d1.out" 2>&1 ||
  { cat "$work/d1.out"; fail "2-rank interrupted run"; }
mpirun_ 2 "$train" "${common[@]}" --epochs 2 --resume "$work/ck2" >"$work/d2.out" 2>&1 ||
  { cat "$work/d2.out"; fail "2-rank resumed run"; }
fd=$(fingerprint "$work/d2.out")
[ "$fc" = "$fd" ] || fail "2-rank resumed weights $fd differ from uninterrupted $fc"

echo "== resume at another world size (1 rank -> 2 ranks, same global batch)"
mpirun_ 2 "$train" "${common[@]}" --epochs 2 --resume "$work/ck" >"$work/e.out" 2>&1 ||
  { cat "$work/e.out"; fail "resume at world size 2"; }
grep -q 'resumed from' "$work/e.out" || fail "world-size change did not resume"

echo "== a corrupt newest checkpoint is skipped with a warning"
newest=$(ls "$work/ck"/ckpt-*.safetensors | tail -1)
printf 'garbage' | dd of="$newest" bs=1 seek=200 conv=notrunc status=none
"$train" "${common[@]}" --epochs 2 --resume "$work/ck" >"$work/f.out" 2>&1 || { cat "$work/f.out"; fail "resume past corrupt"; }
grep -qi "$(basename "$newest")" "$work/f.out" || { cat "$work/f.out"; fail "corrupt checkpoint not named"; }

echo "== --max-steps is the global step: the same command resumed ends at the same step and weights"
ms=(--epochs 2 --max-steps 9 --checkpoint-every 3 --keep 0 --checkpoint-dir "$work/ck3")
"$train" "${common[@]}" "${ms[@]}" >"$work/m1.out" 2>&1 || { cat "$work/m1.out"; fail "max-steps run"; }
[ "$(ls "$work/ck3" | wc -l)" -eq 3 ] || { ls "$work/ck3"; fail "--keep 0 did not keep checkpoints 3, 6, 9"; }
rm "$work/ck3"/ckpt-00000000000[69].safetensors        # as if killed at step 7
"$train" "${common[@]}" "${ms[@]}" --resume "$work/ck3" >"$work/m2.out" 2>&1 || { cat "$work/m2.out"; fail "max-steps resume"; }
grep -q ', 6 steps$' "$work/m2.out" || { cat "$work/m2.out"; fail "the resumed run did not stop at global step 9"; }
[ "$(fingerprint "$work/m1.out")" = "$(fingerprint "$work/m2.out")" ] || fail "max-steps resume differs"

echo "== --resume with no valid checkpoint fails naming each file; --resume-or-start starts fresh"
mkdir "$work/bad"
echo garbage >"$work/bad/ckpt-000000000004.safetensors"
echo garbage >"$work/bad/ckpt-000000000008.safetensors"
set +e; "$train" "${common[@]}" --resume "$work/bad" >"$work/n.out" 2>&1; rc=$?; set -e
[ $rc -ne 0 ] || fail "--resume of only corrupt checkpoints exited 0"
grep -q 'ckpt-000000000004.safetensors' "$work/n.out" && grep -q 'ckpt-000000000008.safetensors' "$work/n.out" ||
  { cat "$work/n.out"; fail "the error does not name every corrupt file"; }
"$train" "${common[@]}" --resume-or-start "$work/bad" >"$work/o.out" 2>&1 || { cat "$work/o.out"; fail "--resume-or-start"; }
grep -q 'STARTING FRESH' "$work/o.out" || { cat "$work/o.out"; fail "--resume-or-start did not say it starts fresh"; }

echo "== a fresh run refuses a checkpoint dir holding another run's checkpoints"
set +e; "$train" "${common[@]}" --checkpoint-dir "$work/ck3" >"$work/p.out" 2>&1; rc=$?; set -e
[ $rc -ne 0 ] && grep -q 'already holds 3 checkpoint(s)' "$work/p.out" || { cat "$work/p.out"; fail "fresh run into ck3"; }
[ -f "$work/ck3/ckpt-000000000009.safetensors" ] || fail "the refused run deleted a checkpoint"
"$train" "${common[@]}" --checkpoint-dir "$work/ck3" --overwrite-checkpoints >"$work/q.out" 2>&1 || { cat "$work/q.out"; fail "--overwrite-checkpoints"; }
[ ! -f "$work/ck3/ckpt-000000000009.safetensors" ] || fail "--overwrite-checkpoints kept the old run's checkpoint"

echo "== bad flags and configs are clear errors"
expect_error() {  # expect_error PATTERN CMD...
  local pattern="$1"; shift
  set +e; "$@" >"$work/err.out" 2>&1; local rc=$?; set -e
  [ $rc -ne 0 ] || fail "expected failure: $*"
  grep -q -- "$pattern" "$work/err.out" || { cat "$work/err.out"; fail "message lacks '$pattern': $*"; }
}
expect_error "unrecognised option '--bogus'" "$train" --bogus
expect_error "--epochs must be >= 1" "$train" "${common[@]}" --epochs 0
expect_error "--model must be one of bigru-words, cnn-stride2, cnn, conv1d-words, gru-rows, gru-words, inception, lstm-rows, resnet" "$train" --model lstm
# A spec ending in softmax (as Keras classifiers do) is folded into the softmax-cross-entropy loss,
# so any other loss is refused.
echo '{"layers": [{"type": "flatten"}, {"type": "dense", "activation": "softmax"}]}' >"$work/sm.json"
expect_error "ends in a softmax" "$train" --model-spec "$work/sm.json" --data synthetic --loss mse
echo '{"epochs": 1, "bogus_key": 3}' >"$work/bad.json"
expect_error "unknown config key 'bogus_key'" "$train" --config "$work/bad.json"
echo '{"epochs": "many"}' >"$work/bad2.json"
expect_error "config key 'epochs' must be an integer, got \"many\"" "$train" --config "$work/bad2.json"
echo '{"epochs": ' >"$work/bad3.json"
expect_error "is not valid JSON" "$train" --config "$work/bad3.json"
expect_error "--resume $work/nowhere: no such folder" "$train" "${common[@]}" --resume "$work/nowhere"
expect_error "bad memory policy" "$train" "${common[@]}" --memory lots
expect_error "must be a multiple of the 2 replicas: use --batch-size 32 or 34, or --batch-per-replica 16" mpirun_ 2 "$train" --model gru-rows --data synthetic \
  --train-limit 64 --devices cpu --batch-size 33
echo '{"model": "gru-rows", "epochs": 3}' >"$work/ok.json"
"$train" --config "$work/ok.json" --epochs 1 --data synthetic --train-limit 64 --test-limit 32 --devices cpu \
  --no-progress >"$work/g.out" 2>&1 || { cat "$work/g.out"; fail "config + flag override"; }
grep -q '^epoch 1/1: ' "$work/g.out" || fail "--epochs flag did not override the config"
# Every built-in name trains on its own data: *-rows on image rows, *-words on word tokens.
for m in cnn-stride2 lstm-rows bigru-words conv1d-words; do
  "$train" --model "$m" --data synthetic --train-limit 64 --test-limit 32 --batch-size 32 --epochs 1 \
    --devices cpu --no-progress >"$work/$m.out" 2>&1 || { cat "$work/$m.out"; fail "--model $m"; }
  grep -q '^test accuracy: ' "$work/$m.out" || fail "--model $m printed no test accuracy"
done
echo "all train_cli checks passed"
