#!/usr/bin/env bash
# mirror-predict end to end: a model with BatchNorm and Dropout and a token GRU are trained a few
# epochs; their predictions on the test split give exactly the accuracy the training run reported
# (the evaluation path), as .npy, CSV (with and without the label column) and token text inputs
# agree bit for bit; 2 and 3 ranks write the same file as 1 rank with the same --batch-size (input
# order); probabilities are
# the softmax of the logits; bad input is refused with exit code 2 and a message naming what was
# expected and found. Skipped (exit 77) without numpy.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
e2e_need_mpirun
predict="$build/bin/mirror-predict"
here="$root/tests/e2e"
python3 -c "import numpy" 2>/dev/null || { echo "SKIP: python module numpy not installed"; exit 77; }
mpirun_() { mpirun --oversubscribe --bind-to none -np "$@"; }
common=(--devices cpu --threads 1 --no-progress --seed 3 --batch-size 24 --lr 0.01)

python3 - <<'PY'
import json
import numpy as np
rng = np.random.default_rng(7)
def blobs(n):
    y = rng.integers(0, 3, n)
    x = rng.normal(0, 0.7, (n, 8)).astype(np.float32)
    for i in range(n):
        x[i, np.arange(8) % 3 == y[i]] += 1.5
    return x, y.astype(np.int64)
for split, n in (("train", 240), ("test", 61)):
    x, y = blobs(n)
    np.save(split + "_x.npy", x)
    np.save(split + "_y.npy", y)
x, y = np.load("test_x.npy"), np.load("test_y.npy")
with open("test.csv", "w") as f:  # %.9g: float32 values survive the text exactly
    f.write(",".join(["f%d" % i for i in range(8)] + ["label"]) + "\n")
    for row, label in zip(x, y):
        f.write(",".join("%.9g" % v for v in row) + ",%d\n" % label)
with open("features.csv", "w") as f:
    for row in x:
        f.write(",".join("%.9g" % v for v in row) + "\n")
json.dump({"name": "mlp", "layers": [
    {"type": "dense", "units": 16, "activation": "relu"}, {"type": "batch_normalization"},
    {"type": "dropout", "rate": 0.3}, {"type": "dense"}]}, open("mlp.json", "w"))
json.dump({"name": "words", "layers": [{"type": "embedding", "output_dim": 8, "mask_zero": True},
    {"type": "gru", "units": 8}, {"type": "dense"}]}, open("words.json", "w"))
PY
python3 "$here/onnx_inputs.py" --train words wtrain 96 3
python3 "$here/onnx_inputs.py" --train words wtest 37 4
python3 - <<'PY'
import numpy as np
x, y = np.load("wtest_x.npy"), np.load("wtest_y.npy")
with open("wtest.txt", "w") as f, open("wtest_labeled.txt", "w") as g:
    for row, label in zip(x, y):
        ids = " ".join(str(v) for v in row[row != 0])
        f.write(ids + "\n")
        g.write("%d %s\n" % (label, ids))
PY

# accuracy_matches RUN_LOG PREDICTIONS LABELS: the argmax accuracy is the reported test accuracy.
accuracy_matches() {
  local reported
  reported="$(sed -n 's/^test accuracy: //p' "$1")"
  python3 -c "
import numpy as np, sys
p, y = np.load('$2'), np.load('$3')
got = '%.4f' % (p.argmax(1) == y).mean()
print('predicted accuracy', got, 'reported', '$reported')
sys.exit(0 if got == '$reported' else 1)"
}

echo "== dense + batchnorm + dropout on .npy"
"$train" "${common[@]}" --epochs 3 --model-spec mlp.json --train-x train_x.npy --train-y train_y.npy \
  --test-x test_x.npy --test-y test_y.npy --checkpoint-dir ck >train.out 2>&1 || { cat train.out; fail "training"; }
"$predict" --checkpoint ck --input test_x.npy --output p1.npy --devices cpu --batch-size 10 2>p1.err ||
  { cat p1.err; fail "predict"; }
grep -q "61 samples -> p1.npy (logits \[61,3\]" p1.err || { cat p1.err; fail "summary line"; }
accuracy_matches train.out p1.npy test_y.npy || fail "predictions do not give the evaluation's accuracy"
"$predict" --checkpoint ck/ckpt-000000000030.safetensors --input-csv test.csv --label-column label \
  --output csv.npy --devices cpu --batch-size 10 2>/dev/null || fail "predict --input-csv --label-column"
cmp -s p1.npy csv.npy || fail "CSV with its label column predicts differently from .npy"
"$predict" --checkpoint ck --input-csv features.csv --output feat.npy --devices cpu --batch-size 10 2>/dev/null ||
  fail "predict --input-csv (features only)"
cmp -s p1.npy feat.npy || fail "a features-only CSV predicts differently from .npy"
for np in 2 3; do
  mpirun_ "$np" "$predict" --checkpoint ck --input test_x.npy --output "np$np.npy" --devices cpu \
    --batch-size 10 >"np$np.err" 2>&1 || { cat "np$np.err"; fail "predict under $np ranks"; }
  cmp -s p1.npy "np$np.npy" || fail "$np ranks wrote another file than 1 rank"
done
"$predict" --checkpoint ck --input test_x.npy --output prob.npy --output-kind probabilities \
  --devices cpu 2>/dev/null || fail "probabilities"
python3 -c "
import numpy as np
l, p = np.load('p1.npy').astype(np.float64), np.load('prob.npy')
e = np.exp(l - l.max(1, keepdims=True)); e /= e.sum(1, keepdims=True)
assert np.abs(p - e).max() < 1e-6, np.abs(p - e).max()" || fail "probabilities are not the softmax"

echo "== a token GRU: .npy ids, token text, labeled token text"
"$train" "${common[@]}" --epochs 2 --model-spec words.json --train-x wtrain_x.npy --train-y wtrain_y.npy \
  --test-x wtest_x.npy --test-y wtest_y.npy --checkpoint-dir wck >wtrain.out 2>&1 || { cat wtrain.out; fail "token training"; }
"$predict" --checkpoint wck --input wtest_x.npy --output w1.npy --devices cpu --batch-size 5 2>/dev/null ||
  fail "token predict"
accuracy_matches wtrain.out w1.npy wtest_y.npy || fail "token predictions do not give the evaluation's accuracy"
"$predict" --checkpoint wck --input-tokens wtest.txt --output w2.npy --devices cpu --batch-size 5 2>/dev/null || fail "--input-tokens"
cmp -s w1.npy w2.npy || fail "token text predicts differently from .npy ids"
"$predict" --checkpoint wck --input-tokens wtest_labeled.txt --tokens-labeled --output w3.npy --batch-size 5 \
  --devices cpu 2>/dev/null || fail "--tokens-labeled"
cmp -s w1.npy w3.npy || fail "labeled token text predicts differently"
mpirun_ 2 "$predict" --checkpoint wck --input wtest_x.npy --output w4.npy --devices cpu --batch-size 5 >/dev/null 2>&1 ||
  fail "token predict under 2 ranks"
cmp -s w1.npy w4.npy || fail "2 ranks wrote other token predictions"

echo "== bad input: exit code 2 and a message naming expected and found"
# expect_error WHAT PATTERN COMMAND...: exits 2 and prints PATTERN once.
expect_error() {
  local what="$1" pattern="$2"; shift 2
  "$@" >err.out 2>&1
  local rc=$?
  [ "$rc" -eq 2 ] || { cat err.out; fail "$what: exit code $rc, expected 2"; return; }
  [ "$(grep -c -- "$pattern" err.out)" -eq 1 ] || { cat err.out; fail "$what: no single '$pattern'"; }
}
python3 -c "
import numpy as np
np.save('short.npy', np.zeros((4, 5), np.float32))
x = np.load('wtest_x.npy'); x[2, 0] = 57; np.save('oov.npy', x)"
expect_error "sample shape" "expects samples of shape \[8\] but found \[5\] (4 samples)" \
  "$predict" --checkpoint ck --input short.npy --output x.npy --devices cpu
expect_error "ids for a float model" "holds integer token ids but the checkpoint's model reads float samples \[8\]" \
  "$predict" --checkpoint ck --input wtest_x.npy --output x.npy --devices cpu
expect_error "out of vocabulary" "token id 57 of sample 2, step 0 is outside the checkpoint's vocabulary \[0, 40)" \
  "$predict" --checkpoint wck --input oov.npy --output x.npy --devices cpu
expect_error "missing input" "cannot open nope.npy: No such file or directory" \
  "$predict" --checkpoint ck --input nope.npy --output x.npy --devices cpu
expect_error "missing checkpoint" "cannot open checkpoint nope: No such file or directory" \
  "$predict" --checkpoint nope --input test_x.npy --output x.npy --devices cpu
python3 "$here/strip_model_spec.py" ck/ckpt-000000000030.safetensors nospec.safetensors
expect_error "no spec" "nospec.safetensors has no model spec (metadata 'mirror.model')" \
  "$predict" --checkpoint nospec.safetensors --input test_x.npy --output x.npy --devices cpu
expect_error "2 ranks, one message" "expects samples of shape \[8\] but found \[5\]" \
  mpirun_ 2 "$predict" --checkpoint ck --input short.npy --output x.npy --devices cpu
[ ! -e x.npy ] || fail "a failed prediction wrote its output"
[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all predict_cli checks passed"
