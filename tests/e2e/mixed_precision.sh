#!/usr/bin/env bash
# mirror-train --precision end to end (docs/mixed_precision.md): an fp16 overflow (the
# MIRROR_TEST_FP16_OVERFLOW hook) skips its step and halves the loss scale, which the checkpoint
# keeps, so an interrupted and resumed run is bitwise identical to the uninterrupted one and goes
# on at the halved scale; resuming under another policy is refused; the policy as a --config key;
# a bad policy name and a CPU without AVX-512 BF16 (ONEDNN_MAX_CPU_ISA caps oneDNN's) are clear
# errors; the log states the policy and the fp16 emulation.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
fingerprint() { grep -o 'weights fingerprint: [0-9a-f]*' "$1" | awk '{print $3}'; }
common=(--model cnn --data synthetic --train-limit 256 --test-limit 32 --batch-size 32 --threads 1
        --devices cpu --no-progress --seed 7 --epochs 1)
fp16=("${common[@]}" --precision mixed_float16)
# "step skipped loss_scale" per step record of a JSON-lines log.
steps() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["type"] == "step": print(r["step"], int(r["skipped"]), int(r.get("loss_scale", 0)))
' "$1"
}

echo "== mixed_float16: an overflow at step 3 skips it and halves the scale"
MIRROR_TEST_FP16_OVERFLOW=0:2 "$train" "${fp16[@]}" --log-jsonl a.jsonl >a.out 2>&1 || { cat a.out; fail "fp16 run"; }
grep -q 'precision mixed_float16: .*dynamic loss scale 32768' a.out || { cat a.out; fail "no precision line"; }
grep -q 'WARNING: .*mixed_float16 is EMULATED' a.out || fail "the CPU fp16 emulation is not announced"
grep -q 'step 2: fp16 overflow.*loss scale 32768 -> 16384' a.out || { cat a.out; fail "no overflow message"; }
steps a.jsonl >a.steps
[ "$(head -4 a.steps | tr '\n' ' ')" = "1 0 32768 2 0 32768 3 1 32768 4 0 16384 " ] ||
  { cat a.steps; fail "steps 1-4 should be: finite, finite, skipped, then scale 16384"; }

echo "== interrupted after the overflow, resumed: same weights, the scale carried over"
MIRROR_TEST_FP16_OVERFLOW=0:2 "$train" "${fp16[@]}" --max-steps 5 --checkpoint-dir ck >b1.out 2>&1 ||
  { cat b1.out; fail "interrupted fp16 run"; }
python3 - ck/ckpt-000000000005.safetensors <<'PY' || fail "checkpoint metadata lacks the loss scale"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
meta = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])["__metadata__"]
assert meta["mirror.precision"] == "mixed_float16", meta.get("mirror.precision")
assert float(meta["mirror.loss_scale"]) == 16384, meta["mirror.loss_scale"]
assert meta["mirror.loss_scale_good_steps"] == "2", meta["mirror.loss_scale_good_steps"]
PY
# No hook now: the resumed strategy counts its steps from 0 again.
"$train" "${fp16[@]}" --resume ck --checkpoint-dir ck --log-jsonl b2.jsonl >b2.out 2>&1 ||
  { cat b2.out; fail "resumed fp16 run"; }
[ "$(fingerprint a.out)" = "$(fingerprint b2.out)" ] ||
  fail "resumed weights $(fingerprint b2.out) differ from uninterrupted $(fingerprint a.out)"
steps b2.jsonl >b2.steps
[ "$(head -1 b2.steps)" = "6 0 16384" ] || { cat b2.steps; fail "resume did not go on at scale 16384"; }

echo "== resuming under another policy is refused, naming it"
if "$train" "${common[@]}" --resume ck >c.out 2>&1; then fail "float32 resumed a mixed_float16 checkpoint"; fi
grep -q 'precision mixed_float16 -> float32' c.out || { cat c.out; fail "the refusal does not name the policies"; }

echo "== the policy as a --config key; a bad name is refused with the choices"
echo '{"precision": "mixed_float16", "model": "cnn", "data": "synthetic", "train_limit": 64,
       "test_limit": 32, "batch_size": 32, "devices": "cpu"}' >cfg.json
"$train" --config cfg.json --no-progress --threads 1 >d.out 2>&1 || { cat d.out; fail "--config precision"; }
grep -q 'precision mixed_float16' d.out || fail "--config precision was not applied"
if "$train" "${common[@]}" --precision bfloat16 >e.out 2>&1; then fail "--precision bfloat16 accepted"; fi
grep -q "expected float32, mixed_bfloat16 or mixed_float16" e.out || { cat e.out; fail "bad policy message"; }

echo "== mixed_bfloat16 needs AVX-512 BF16: an error naming it where oneDNN may not use it"
if ONEDNN_MAX_CPU_ISA=AVX512_CORE "$train" "${common[@]}" --precision mixed_bfloat16 >f.out 2>&1; then
  fail "mixed_bfloat16 ran without AVX-512 BF16"
else
  [ $? -eq 3 ] || fail "exit code $? (expected 3, a set-up failure)"
fi
grep -q 'needs AVX-512 BF16' f.out || { cat f.out; fail "the error does not name AVX-512 BF16"; }
if e2e_cpu_bf16; then
  "$train" "${common[@]}" --precision mixed_bfloat16 >g.out 2>&1 || { cat g.out; fail "mixed_bfloat16 run"; }
  grep -q 'precision mixed_bfloat16: .* in bfloat16' g.out || fail "no bfloat16 precision line"
  grep -q '^test accuracy: ' g.out || fail "mixed_bfloat16 printed no test accuracy"
else
  echo "skip: a mixed_bfloat16 run (this CPU, or ONEDNN_MAX_CPU_ISA, has no AVX-512 BF16)"
fi
[ "$failures" -eq 0 ] && echo "all mixed_precision checks passed"
exit "$failures"
