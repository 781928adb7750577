#!/usr/bin/env bash
# Keras tutorial models trained unchanged from their to_json() (tests/data/keras/tutorials/,
# written by make_tutorials.py with Keras 3): rescaling, resizing/cropping and normalization
# inside the model, a fully convolutional time-series model and a Dense on every step over
# Fashion-MNIST rows (the built-in data, read in the form each model's input takes), and sigmoid
# heads on token sequences labelled 0/1 (bidirectional LSTMs, Conv1D text classification, the
# masked bidirectional GRU + LSTM of issue 30, an LSTM whose outputs past the mask feed a max).
# Each trains one short epoch with mirror-train, then mirror-predict gives logits and
# probabilities (a softmax, or the sigmoid of a sigmoid head, in [0, 1]), and, with onnxruntime
# installed, the exported ONNX graph gives the same outputs within 1e-5. The sigmoid head then
# trains at 1, 2 and 3 ranks with the same global batch to the same weights within 1e-5.
# Usage: keras_tutorials.sh <build dir>. Exit 77 = skipped.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
tutorials="$root/tests/data/keras/tutorials"
predict="$build/bin/mirror-predict"
export_="$build/bin/mirror-export"
command -v python3 >/dev/null || { echo "skip: python3 not found"; exit 77; }
e2e_need_mpirun
onnx=0
python3 -c "import onnxruntime, numpy" 2>/dev/null && onnx=1
[ "$onnx" = 1 ] || echo "note: onnxruntime/numpy not installed: the ONNX comparison is skipped"

images=(--data synthetic)
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && images=(--data real)

# Token sequences labelled 1 when most of their ids are below 32 (lengths 3..20, ids 1..63).
python3 - <<'PY'
import random
rng = random.Random(5)
for name, n in (("train.txt", 1200), ("test.txt", 240)):
    with open(name, "w") as f:
        for _ in range(n):
            ids = [rng.randint(1, 63) for _ in range(rng.randint(3, 20))]
            label = int(2 * sum(i < 32 for i in ids) > len(ids))
            f.write(" ".join(map(str, [label] + ids)) + "\n")
with open("predict.txt", "w") as f:  # ids only, different lengths: padded rows to predict
    for _ in range(10):
        f.write(" ".join(str(rng.randint(1, 63)) for _ in range(rng.randint(3, 20))) + "\n")
PY

triples=()
# run NAME DATA-FLAGS...: one epoch, predict (logits and probabilities), export.
run() {
  local name="$1" spec="$tutorials/$1.json" before=$failures
  shift
  if ! "$train" --model-spec "$spec" "$@" --epochs 1 --batch-size 32 --lr 0.003 --seed 3 \
       --devices cpu --threads 1 --no-progress --checkpoint-dir "ck-$name" >"$name.out" 2>&1; then
    fail "$name: training"; tail -5 "$name.out"; return
  fi
  grep -E "test loss [0-9.]+ accuracy [0-9.]+" "$name.out" >/dev/null ||
    fail "$name: no test accuracy: $(tail -2 "$name.out")"
  "$predict" --checkpoint "ck-$name" "${PREDICT_INPUT[@]}" --output "$name.y.npy" --devices cpu \
    2>"$name.predict" || { cat "$name.predict"; fail "$name: mirror-predict"; return; }
  "$predict" --checkpoint "ck-$name" "${PREDICT_INPUT[@]}" --output "$name.p.npy" --devices cpu \
    --output-kind probabilities 2>>"$name.predict" || { fail "$name: probabilities"; return; }
  python3 - "$name.y.npy" "$name.p.npy" "$SIGMOID" <<'PY' || fail "$name: probabilities"
import sys, numpy as np
y, p, sigmoid = np.load(sys.argv[1]), np.load(sys.argv[2]), sys.argv[3] == "1"
assert np.all((p >= 0) & (p <= 1)), p
if sigmoid:
    assert y.shape[1] == 1, y.shape
    assert np.allclose(p, 1 / (1 + np.exp(-y)), atol=1e-6)
else:
    assert np.allclose(p.sum(1), 1, atol=1e-5)
PY
  if [ "$onnx" = 1 ]; then
    "$export_" --checkpoint "ck-$name" --onnx "$name.onnx" 2>"$name.export" ||
      { cat "$name.export"; fail "$name: mirror-export"; return; }
    "$export_" --checkpoint "ck-$name" --onnx "$name.p.onnx" --output-kind probabilities \
      2>>"$name.export" || { fail "$name: mirror-export probabilities"; return; }
    triples+=("$name.onnx" "$PREDICT_NPY" "$name.y.npy" "$name.p.onnx" "$PREDICT_NPY" "$name.p.npy")
  fi
  [ "$failures" -ne "$before" ] || echo "ok   $name: $(grep -oE 'test loss [0-9.]+ accuracy [0-9.]+' "$name.out" | tail -1)"
}

# Images: float32 inputs (mirror-predict reads them as they are; the tutorials rescale 0..255).
python3 -c "
import numpy as np
rng = np.random.default_rng(1)
np.save('images.npy', rng.integers(0, 256, (12, 28, 28, 1)).astype(np.float32).transpose(0, 3, 1, 2).copy())
np.save('rows.npy', rng.integers(0, 256, (12, 28, 28)).astype(np.float32) / 255)"
PREDICT_INPUT=(--input images.npy) PREDICT_NPY=images.npy SIGMOID=0
for name in image_classification_from_scratch resizing_and_center_crop; do
  run "$name" "${images[@]}" --train-limit 1024 --test-limit 256
done
# The rows models: the GRU behind a Normalization reads pixels 0..255, the others 0..1.
python3 -c "
import numpy as np; np.save('raw_rows.npy', np.load('rows.npy') * 255)"
PREDICT_INPUT=(--input raw_rows.npy) PREDICT_NPY=raw_rows.npy
run gru_behind_normalization "${images[@]}" --train-limit 1024 --test-limit 256
PREDICT_INPUT=(--input rows.npy) PREDICT_NPY=rows.npy
for name in timeseries_fcn dense_per_step; do
  run "$name" "${images[@]}" --train-limit 1024 --test-limit 256
done
# Sigmoid heads on labels 0/1 (binary cross-entropy; accuracy at 0.5).
python3 -c "
import numpy as np
rows = [list(map(int, l.split())) for l in open('predict.txt')]
x = np.zeros((len(rows), 20), np.int32)  # the models' length: what mirror-predict pads to
for i, r in enumerate(rows): x[i, :len(r)] = r
np.save('tokens.npy', x)"
PREDICT_INPUT=(--input-tokens predict.txt) PREDICT_NPY=tokens.npy SIGMOID=1
for name in imdb_bidirectional_lstm text_classification_conv1d masked_bigru_lstm \
  masked_lstm_max_pool; do
  run "$name" --train-tokens train.txt --test-tokens test.txt
done
grep -q "loss binary-cross-entropy" masked_bigru_lstm.out ||
  fail "the sigmoid head did not train with binary cross-entropy: $(grep -m1 'loss' masked_bigru_lstm.out)"

if [ "$onnx" = 1 ] && [ ${#triples[@]} -gt 0 ]; then
  python3 "$root/tests/e2e/onnx_compare.py" 1e-5 "${triples[@]}" ||
    fail "onnxruntime disagrees with mirror-predict"
fi

echo "== the sigmoid head at 1, 2 and 3 ranks: the same weights"
for np in 1 2 3; do
  mpirun --oversubscribe --bind-to none -np "$np" "$train" \
    --model-spec "$tutorials/masked_bigru_lstm.json" --train-tokens train.txt --max-steps 3 \
    --batch-size 24 --optimizer sgd --lr 0.1 --seed 4 --devices cpu --threads 1 --no-progress \
    --checkpoint-dir "np$np" >"np$np.out" 2>&1 || { fail "$np ranks"; tail -5 "np$np.out"; }
done
for np in 2 3; do
  python3 "$root/tests/e2e/compare_checkpoints.py" np1 "np$np" 1e-5 ||
    fail "$np ranks differ from 1 rank"
done

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all Keras tutorial models trained, predicted and exported"
