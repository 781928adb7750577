#!/usr/bin/env bash
# Note [Dense labels] (include/mirror/data/dataset.h): Keras models that predict per step or per
# pixel, from the fixtures tests/data/keras/make_dense.py wrote with Keras:
#  - a tagger (Embedding(mask_zero) -> Bidirectional(LSTM) -> TimeDistributed(Dense(4, softmax)))
#    on per-step labels [N, T] with padding: the same per-step losses and weights at 1 and 2 ranks
#    (within 1e-5), labels on padding steps change nothing (masked), mirror-predict writes
#    [N, T, K] probabilities; labels of more classes than the head has are refused naming shapes,
#    of fewer train with a warning;
#  - an autoencoder on float image targets [N, 8, 8, 2] (Keras's NHWC, read as NCHW like the
#    inputs): NHWC and NCHW arrays train to the same weights; a target of another shape is refused
#    naming both shapes;
#  - a segmentation (last Conv2D with softmax) on per-pixel labels [N, 8, 8]: 1 and 2 ranks agree,
#    mirror-predict writes [N, 8, 8, 3] ([N, 3, 8, 8] for the same model as a Mirror spec);
#  - with Keras (and h5py): from Keras's initial weights, the first step's loss and accuracy at 2
#    ranks equal Keras's own evaluate within 1e-5 (the tagger with its mask and without one, the
#    segmentation, the autoencoder).
# Exit 77 (skipped) without numpy or mpirun.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
python3 -c "import numpy" 2>/dev/null || { echo "SKIP: numpy is not installed"; exit 77; }
e2e_need_mpirun
keras="$root/tests/data/keras"
predict="$build/bin/mirror-predict"
python3 - <<'PY' || fail "data"
import numpy as np
rng = np.random.default_rng(3)
N, T, V, K = 24, 6, 12, 4
x = np.zeros((N, T), np.int32); y = np.zeros((N, T), np.int32)
for i in range(N):
    n = rng.integers(2, T + 1)
    x[i, :n] = rng.integers(1, V, n)
    y[i, :n] = x[i, :n] % K                    # the tag is the id mod 4
    y[i, n:] = rng.integers(0, K, T - n)       # anything on padding
np.save("tag_x.npy", x); np.save("tag_y.npy", y)
y2 = y.copy(); y2[x == 0] = (y2[x == 0] + 1) % K   # other labels on the padding only
np.save("tag_y_pad.npy", y2)
y5 = y.copy(); y5[0, 0] = 4; np.save("tag_y5.npy", y5)  # a fifth class
img = rng.random((16, 8, 8, 2)).astype(np.float32)
np.save("ae_nhwc.npy", img); np.save("ae_nchw.npy", np.ascontiguousarray(img.transpose(0, 3, 1, 2)))
np.save("ae_flat.npy", img.reshape(16, -1)[:, :100].copy())
s = rng.standard_normal((16, 8, 8, 2)).astype(np.float32)
np.save("seg_x.npy", s)
np.save("seg_y.npy", ((s[..., 0] > 0).astype(np.int32) + (s[..., 1] > 1).astype(np.int32)))
PY
common=(--devices cpu --threads 1 --no-progress --seed 5 --lr 0.05)
run() {  # run NAME [mpirun -np 2] mirror-train ARGS...: output in NAME.out
  local name=$1; shift
  "$@" >"$name.out" 2>&1 || { cat "$name.out"; fail "$name"; }
}
fingerprint() { grep -o 'weights fingerprint: [0-9a-f]*' "$1"; }
same_losses() {  # two JSON-lines logs give the same per-step losses within 1e-5
  python3 - "$1" "$2" <<'PY'
import json, sys
def losses(p):
    return [r["loss"] for r in map(json.loads, open(p)) if r.get("type") == "step"]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
ok = len(a) == len(b) > 0 and all(abs(u - v) <= 1e-5 * max(1, abs(v)) for u, v in zip(a, b))
print("steps", len(a), "largest difference", max((abs(u - v) for u, v in zip(a, b)), default=None))
sys.exit(0 if ok else 1)
PY
}

# ---- the tagger: per-step labels with padding, 1 and 2 ranks
tag=(--model-spec "$keras/dense_tagger.keras.json" --train-x tag_x.npy --batch-size 8 --epochs 3)
run tag1 "$train" "${common[@]}" "${tag[@]}" --train-y tag_y.npy --log-jsonl tag1.jsonl --checkpoint-dir ck-tag1
run tag2 mpirun --oversubscribe -np 2 "$train" "${common[@]}" "${tag[@]}" --train-y tag_y.npy \
  --log-jsonl tag2.jsonl --checkpoint-dir ck-tag2
same_losses tag1.jsonl tag2.jsonl || fail "the tagger's losses differ between 1 and 2 ranks"
python3 "$root/tests/e2e/compare_checkpoints.py" ck-tag1 ck-tag2 1e-5 l2 ||
  fail "the tagger's weights differ between 1 and 2 ranks"
grep -q 'labels \[6\] per sample' tag1.out || fail "the start-up line does not name the per-step labels"
run tagpad "$train" "${common[@]}" "${tag[@]}" --train-y tag_y_pad.npy
[ -n "$(fingerprint tag1.out)" ] && [ "$(fingerprint tag1.out)" = "$(fingerprint tagpad.out)" ] ||
  fail "labels on padding steps changed training: $(fingerprint tag1.out) vs $(fingerprint tagpad.out)"
python3 -c "import sys; a = [l for l in open('tag1.out') if l.startswith('epoch')]
sys.exit(0 if float(a[-1].split('loss ')[1].split()[0]) < float(a[0].split('loss ')[1].split()[0]) else 1)" ||
  fail "the tagger did not learn: $(grep ^epoch tag1.out)"
"$predict" --checkpoint ck-tag1 --input tag_x.npy --output tag_p.npy --output-kind probabilities \
  2>tag_p.err || { cat tag_p.err; fail "predict (tagger)"; }
python3 -c "import numpy as np, sys; p = np.load('tag_p.npy')
sys.exit(0 if p.shape == (24, 6, 4) and np.allclose(p.sum(-1), 1, atol=1e-5) else 1)" ||
  fail "mirror-predict did not write [24, 6, 4] probabilities per step"
"$train" "${common[@]}" "${tag[@]}" --train-y tag_y5.npy >tag5.out 2>&1 && fail "5 classes trained a 4-wide head"
grep -q '\[6,4\].*\[6,5\]' tag5.out || fail "the refusal does not name both shapes: $(tail -1 tag5.out)"
# Labels of 3 of the head's 4 classes train, as in Keras, with a warning naming the unused one.
python3 -c "import numpy as np; np.save('tag_y3.npy', np.minimum(np.load('tag_y.npy'), 2))"
run tag3 "$train" "${common[@]}" "${tag[@]}" --train-y tag_y3.npy
grep -q 'class 3 is never a label' tag3.out || fail "no warning for the unused class: $(grep -i warn tag3.out)"

# ---- the autoencoder: float image targets in Keras's layout
ae=(--model-spec "$keras/dense_autoencoder.keras.json" --batch-size 8 --epochs 2 --loss mse)
run ae_nhwc "$train" "${common[@]}" "${ae[@]}" --train-x ae_nhwc.npy --train-y ae_nhwc.npy
run ae_nchw "$train" "${common[@]}" "${ae[@]}" --train-x ae_nchw.npy --train-y ae_nchw.npy
grep -q '\[H, W, C\] targets read as \[C, H, W\]' ae_nhwc.out ||
  fail "the start-up line does not say the targets are transposed: $(grep model ae_nhwc.out)"
[ -n "$(fingerprint ae_nhwc.out)" ] && [ "$(fingerprint ae_nhwc.out)" = "$(fingerprint ae_nchw.out)" ] ||
  fail "NHWC and NCHW autoencoder data differ: $(fingerprint ae_nhwc.out) vs $(fingerprint ae_nchw.out)"
"$train" "${common[@]}" "${ae[@]}" --train-x ae_nhwc.npy --train-y ae_flat.npy >ae_bad.out 2>&1 &&
  fail "targets of another shape trained"
grep -q '\[2,8,8\].*\[100\]' ae_bad.out || fail "the refusal does not name both shapes: $(tail -1 ae_bad.out)"

# ---- the segmentation: per-pixel labels, 1 and 2 ranks
seg=(--model-spec "$keras/dense_segmentation.keras.json" --train-x seg_x.npy --train-y seg_y.npy
     --batch-size 8 --epochs 2)
run seg1 "$train" "${common[@]}" "${seg[@]}" --log-jsonl seg1.jsonl --checkpoint-dir ck-seg1
run seg2 mpirun --oversubscribe -np 2 "$train" "${common[@]}" "${seg[@]}" --log-jsonl seg2.jsonl \
  --checkpoint-dir ck-seg2
same_losses seg1.jsonl seg2.jsonl || fail "the segmentation's losses differ between 1 and 2 ranks"
"$predict" --checkpoint ck-seg1 --input seg_x.npy --output seg_p.npy --output-kind probabilities \
  2>seg_p.err || { cat seg_p.err; fail "predict (segmentation)"; }
python3 -c "import numpy as np, sys; p = np.load('seg_p.npy')
sys.exit(0 if p.shape == (16, 8, 8, 3) and np.allclose(p.sum(-1), 1, atol=1e-5) else 1)" ||
  fail "mirror-predict did not write [16, 8, 8, 3] probabilities per pixel"
# A Mirror spec keeps NCHW: its per-pixel probabilities are written [N, K, H, W].
python3 -c "import numpy as np; np.save('seg_nchw.npy', np.ascontiguousarray(np.load('seg_x.npy').transpose(0, 3, 1, 2)))"
echo '{"input_shape": [2, 8, 8], "layers": [{"type": "conv2d", "filters": 4, "kernel": 3, "padding": "same",
       "activation": "relu"}, {"type": "conv2d", "filters": 3, "kernel": 1, "activation": "softmax"}]}' >seg.json
run segm "$train" "${common[@]}" --model-spec seg.json --train-x seg_nchw.npy --train-y seg_y.npy \
  --batch-size 8 --epochs 1 --checkpoint-dir ck-segm
"$predict" --checkpoint ck-segm --input seg_nchw.npy --output segm_p.npy --output-kind probabilities \
  2>segm_p.err || { cat segm_p.err; fail "predict (Mirror segmentation)"; }
python3 -c "import numpy as np, sys; p = np.load('segm_p.npy')
sys.exit(0 if p.shape == (16, 3, 8, 8) and np.allclose(p.sum(1), 1, atol=1e-5) else 1)" ||
  fail "mirror-predict did not write [16, 3, 8, 8] probabilities per pixel for a Mirror spec"

# ---- against Keras's own evaluate on the same (Keras-initialised) weights, at 2 ranks: the
# first step's loss and accuracy are those of the initial weights on the whole batch.
export KERAS_BACKEND="${KERAS_BACKEND:-jax}" JAX_PLATFORMS=cpu
if python3 -c "import keras, h5py" 2>/dev/null; then
  keras_eval() {  # keras_eval SPEC X Y LOSS OUT.weights.h5 > {"loss": ..., "accuracy": ...}
    python3 - "$@" <<'PY'
import json, sys
import numpy as np, keras
spec, x, y, loss, out = sys.argv[1:6]
keras.utils.set_random_seed(1)
m = keras.models.model_from_json(open(spec).read())
m.compile(loss=loss, metrics=["accuracy"] if loss != "mse" else [])
m.save_weights(out)
X, Y = np.load(x), np.load(y)
r = m.evaluate(X, Y, batch_size=len(X), verbose=0, return_dict=True)
print(json.dumps({"loss": r["loss"], "accuracy": r.get("accuracy")}))
PY
  }
  twin_check() {  # twin_check NAME SPEC X Y LOSS MIRROR_FLAGS...
    local name=$1 spec=$2 x=$3 y=$4 loss=$5; shift 5
    keras_eval "$spec" "$x" "$y" "$loss" "k_$name.weights.h5" >"k_$name.json" 2>"k_$name.err" ||
      { tail -3 "k_$name.err"; fail "$name: Keras"; return; }
    run "m_$name" mpirun --oversubscribe -np 2 "$train" "${common[@]}" --model-spec "$spec" \
      --train-x "$x" --train-y "$y" --batch-size 16 --max-steps 1 --init-weights "k_$name.weights.h5" \
      --log-jsonl "m_$name.jsonl" "$@"
    python3 - "k_$name.json" "m_$name.jsonl" "$name" <<'PY' || fail "$name: Mirror's first step is not Keras's evaluate"
import json, sys
k = json.load(open(sys.argv[1])); m = json.loads(open(sys.argv[2]).readline())
d = abs(m["loss"] - k["loss"]) / max(1, abs(k["loss"]))
a = 0 if k["accuracy"] is None else abs(m["accuracy"] - k["accuracy"])
print(sys.argv[3], "Keras", k, "Mirror loss", m["loss"], "accuracy", m.get("accuracy"), "relative", d)
sys.exit(0 if d <= 1e-5 and a <= 1e-5 else 1)
PY
  }
  python3 -c "import numpy as np; np.save('tag16_x.npy', np.load('tag_x.npy')[:16]); np.save('tag16_y.npy', np.load('tag_y.npy')[:16])"
  twin_check tagger "$keras/dense_tagger.keras.json" tag16_x.npy tag16_y.npy sparse_categorical_crossentropy
  # Without mask_zero Keras has no mask: every step's label counts, padding included.
  sed 's/"mask_zero": true/"mask_zero": false/' "$keras/dense_tagger.keras.json" >unmasked.json
  twin_check unmasked unmasked.json tag16_x.npy tag16_y.npy sparse_categorical_crossentropy
  twin_check segmentation "$keras/dense_segmentation.keras.json" seg_x.npy seg_y.npy \
    sparse_categorical_crossentropy
  twin_check autoencoder "$keras/dense_autoencoder.keras.json" ae_nhwc.npy ae_nhwc.npy mse --loss mse
else
  echo "note: keras/h5py not installed: the comparison with Keras's evaluate is skipped"
fi
[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "dense_prediction: per-step and per-pixel labels and image targets train alike at 1 and 2 ranks"
