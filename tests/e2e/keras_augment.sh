#!/usr/bin/env bash
# Keras's augmentation layers inside the model (nn/random_augment.h):
#  1. keras.io's "image classification from scratch" model (tests/data/keras/
#     augment_cnn.keras.json: RandomFlip("horizontal") and RandomRotation(0.1) in a nested
#     Sequential, the Xception-like blocks narrowed), read unchanged, trains on NHWC images at 1
#     rank and at 2 and 3 ranks (mpirun -np 2, -np 3) with the same per-step losses (within 1e-5: the draws
#     follow each sample's id, not its rank); a 2-rank run stopped at step 3 and resumed ends bit
#     for bit where the uninterrupted one does (the same draws again); and the augmentation
#     acts: RandomRotation(0) instead of 0.1 changes the losses.
#  2. With Keras installed: tests/data/keras/make_augment.py writes the layers' outputs for
#     pinned draws with this Keras, and nn_random_augment_test's Keras case compares Mirror's
#     pixels with them; and outside training the layers are the identity everywhere: Keras's
#     predict with mirror-export's weights and onnxruntime on its ONNX file give mirror-predict's
#     logits (1e-5), and a RandomCrop model's ONNX file (the centred box resized) gives its
#     mirror-predict logits. Skipped when Keras is missing; part 1 still runs.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
e2e_need_mpirun

# 96 RGB images 32x32 in [0, 255] (NHWC, as a Keras user's arrays are) and labels 0..2, as .npy
# written without NumPy: the colour means carry the label, so the loss falls.
python3 - <<'PY' || { echo "FAIL data"; exit 1; }
import random, struct
def npy(path, descr, shape, fmt, values):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d, " % d for d in shape))
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))
rng = random.Random(3)
labels = [i % 3 for i in range(96)]
pixels = []
for y in labels:
    for _ in range(32 * 32):
        pixels += [min(255.0, max(0.0, rng.gauss(60 + 60 * ((y + c) % 3), 40))) for c in range(3)]
npy("x.npy", "<f4", (96, 32, 32, 3), "f", pixels)
npy("y.npy", "<i4", (96,), "i", labels)
PY

spec="$root/tests/data/keras/augment_cnn.keras.json"
args=(--model-spec "$spec" --train-x x.npy --train-y y.npy --batch-size 24 --epochs 2
      --seed 9 --threads 1 --no-progress --devices cpu --optimizer sgd --momentum 0.9 --lr 0.02
      --sync-batchnorm --checkpoint-every 3 --keep 0 --comm-timeout 120)
np2=(mpirun --oversubscribe --bind-to none -np 2 "$train")
np3=(mpirun --oversubscribe --bind-to none -np 3 "$train")

# losses LOG: the per-step training losses of a --log-jsonl file, one per line.
losses() {
  python3 -c "import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get('type') == 'step': print(r['step'], r['loss'])" "$1"
}
run() {  # run NAME CMD...: trains, keeps the log and the last fingerprint line
  local name="$1"; shift
  timeout -k 10 300 "$@" --checkpoint-dir "$PWD/ck-$name" --log-jsonl "$PWD/$name.jsonl" \
    >"$name.out" 2>"$name.err" || { tail -5 "$name.err"; fail "$name: training"; return; }
  grep -o 'weights fingerprint: [0-9a-f]*' "$name.out" | tail -1 >"$name.fp"
}

run one "$train" "${args[@]}"
run two "${np2[@]}" "${args[@]}"
run three "${np3[@]}" "${args[@]}"
for name in one two three; do losses $name.jsonl >$name.losses; done
[ "$(wc -l <one.losses)" -eq 8 ] || fail "expected 8 steps of losses, got: $(cat one.losses)"
for ranks in 2 3; do
  name=$([ $ranks = 2 ] && echo two || echo three)
  python3 - one.losses $name.losses $ranks <<'PY' || fail "1 rank and $ranks ranks give different losses"
import sys
a = [l.split() for l in open(sys.argv[1])]
b = [l.split() for l in open(sys.argv[2])]
assert len(a) == len(b) and a, (a, b)
worst = max(abs(float(x[1]) - float(y[1])) / max(abs(float(x[1])), 1e-12) for x, y in zip(a, b))
print("ok   1 and %s ranks: %d steps, largest relative loss difference %.2g" % (sys.argv[3], len(a), worst))
assert worst <= 1e-5
PY
done
python3 -c "import sys
l = [float(x.split()[1]) for x in open(sys.argv[1])]
print('     losses', ' '.join('%.4f' % v for v in l))" one.losses

# A 2-rank run stopped at step 3 and resumed: the same weights bit for bit.
run part "${np2[@]}" "${args[@]}" --max-steps 3
run resumed "${np2[@]}" "${args[@]}" --resume "$PWD/ck-part"
if [ -s two.fp ] && [ "$(cat two.fp)" = "$(cat resumed.fp)" ]; then
  echo "ok   stopped at step 3 and resumed: $(cat resumed.fp)"
else
  fail "resumed run: '$(cat resumed.fp 2>/dev/null)', uninterrupted '$(cat two.fp 2>/dev/null)'"
fi

# The augmentation acts in training: RandomRotation(0) gives other losses.
python3 - "$spec" still.keras.json <<'PY'
import json, sys
text = open(sys.argv[1]).read()
model = json.loads(text)
def walk(node):
    if isinstance(node, dict):
        if node.get("class_name") == "RandomRotation": node["config"]["factor"] = [0.0, 0.0]
        for v in node.values(): walk(v)
    elif isinstance(node, list):
        for v in node: walk(v)
walk(model)
json.dump(model, open(sys.argv[2], "w"))
PY
run still "$train" "${args[@]/$spec/$PWD/still.keras.json}" --max-steps 3
losses still.jsonl >still.losses
if [ -s still.losses ] && [ "$(head -3 one.losses | tail -1)" != "$(tail -1 still.losses)" ]; then
  echo "ok   RandomRotation(0) trains differently: step 3 loss $(tail -1 still.losses | cut -d' ' -f2) vs $(sed -n 3p one.losses | cut -d' ' -f2)"
else
  fail "RandomRotation(0) and RandomRotation(0.1) gave the same losses"
fi

# 2. Mirror's pixels against this Keras's, for pinned draws.
if PATH="${MIRROR_KERAS_PYTHON_BIN:-$PATH}" KERAS_BACKEND=jax JAX_PLATFORMS=cpu \
    python3 -c "import keras, numpy" 2>/dev/null; then
  KERAS_BACKEND=jax JAX_PLATFORMS=cpu python3 "$root/tests/data/keras/make_augment.py" augment.json \
    >make_augment.out 2>&1 || { tail -5 make_augment.out; fail "make_augment.py"; }
  MIRROR_KERAS_AUGMENT="$PWD/augment.json" "$build/tests/nn_random_augment_test" \
    --gtest_filter='RandomAugmentKeras.*' >keras.out 2>&1 || { tail -20 keras.out; fail "pixels differ from Keras's"; }
  grep "largest difference" keras.out | sed 's/^/ok   /'
  # Outside training the layers are the identity in Mirror, in Keras and in the ONNX export:
  # mirror-predict of the 1-rank run's model = Keras's predict with its exported weights = the
  # ONNX graph's (which takes NCHW).
  "$build/bin/mirror-predict" --checkpoint ck-one --input x.npy --output pred.npy --devices cpu \
    2>predict.err || { tail -3 predict.err; fail "mirror-predict"; }
  "$build/bin/mirror-export" --checkpoint ck-one --keras-weights m.weights.h5 --onnx m.onnx \
    2>export.err || { tail -3 export.err; fail "mirror-export"; }
  KERAS_BACKEND=jax JAX_PLATFORMS=cpu python3 - "$spec" <<'PY' || fail "Keras's predict differs from mirror-predict"
import sys
import keras, numpy as np
model = keras.models.model_from_json(open(sys.argv[1]).read())
model.load_weights("m.weights.h5")
x, want = np.load("x.npy"), np.load("pred.npy")
err = float(np.abs(model.predict(x, verbose=0) - want).max() / np.abs(want).max())
print("ok   Keras's predict with the exported weights: relative error %.2g" % err)
np.save("x_nchw.npy", np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
assert err <= 1e-5
PY
  # RandomCrop: outside training Keras's centred box resized, which the ONNX file resizes too.
  KERAS_BACKEND=jax JAX_PLATFORMS=cpu python3 -c "import keras
from keras import layers
m = keras.Sequential([keras.Input((32, 32, 3)), layers.RandomCrop(24, 20), layers.Rescaling(1 / 255),
                      layers.Conv2D(4, 3, activation='relu'), layers.GlobalAveragePooling2D(),
                      layers.Dense(3)])
open('crop.keras.json', 'w').write(m.to_json())" || fail "the RandomCrop model"
  run crop "$train" "${args[@]/$spec/$PWD/crop.keras.json}" --max-steps 2
  "$build/bin/mirror-predict" --checkpoint ck-crop --input x.npy --output crop.pred.npy \
    --devices cpu 2>crop.predict.err || { tail -3 crop.predict.err; fail "mirror-predict crop"; }
  "$build/bin/mirror-export" --checkpoint ck-crop --onnx crop.onnx 2>crop.export.err ||
    { tail -3 crop.export.err; fail "mirror-export crop"; }
  if python3 -c "import onnxruntime" 2>/dev/null; then
    python3 "$root/tests/e2e/onnx_compare.py" 1e-5 m.onnx x_nchw.npy pred.npy \
      crop.onnx x_nchw.npy crop.pred.npy || fail "onnxruntime disagrees with mirror-predict"
  else
    echo "skip the ONNX check: onnxruntime is not installed"
  fi
else
  echo "skip part 2: python modules keras/numpy not installed (pip install keras jax)"
fi

[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all keras_augment checks passed"
