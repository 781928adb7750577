#!/usr/bin/env bash
# Weights both ways between Mirror and Keras 3 (tests/e2e/keras_twin.py is Keras's side, the steps
# are tests/e2e/keras_common.bash), for every shipped spec (examples/models/*.json, the ONNX
# coverage specs of tests/data/onnx/, the Flatten and normalization spec of tests/data/keras/, a
# Keras model with an adapted Normalization) and
# the residual and branching Keras fixtures (keras_models.sh: the models of Keras's other layers):
#  - out: a model trained one SGD step by mirror-train, exported with mirror-export
#    --keras-weights, loads with Keras's load_weights into the model the spec was read from (the
#    Keras JSON, or the Keras twin of a Mirror spec) and predicts what mirror-predict predicts
#    (within 1e-5 of the outputs' largest magnitude);
#  - in: Keras's own initial weights (save_weights), given to mirror-train --init-weights, train
#    one SGD step on the whole batch to the weights Keras's train_on_batch reaches (within 1e-4
#    per variable; models with dropout, whose masks differ, take a step of lr 1e-9 and keep
#    Keras's weights; an LSTM's bias is left out: Keras trains one bias, Mirror two, as cuDNN and
#    PyTorch do, so their sum moves twice as far); and 2 ranks reach what 1 rank does.
#    The ResNet and the Inception CNN take that step as smooth twins (ReLU -> tanh, max -> average
#    pooling; their own weights go out only: BatchNorm's statistics move even at lr 1e-9): 1e-4
#    bounds float32 rounding, but with ~10^5 activations per ReLU layer one of them can sit within
#    rounding of the kink, on either side, and flip between Keras and Mirror (or between CPUs): a
#    whole term of a channel's gradient changes (1.9e-2 of a BatchNormalization beta's step, seen
#    on two ISAs alike), which no rounding tolerance can bound.
# Skipped (exit 77) without Keras and h5py (scripts/test_python.sh installs them best-effort)
# or without HDF5 in the build: never reported as passed without running.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
source "$(dirname "${BASH_SOURCE[0]}")/keras_common.bash"

python3 "$twin" data images28 img28 24 1 && python3 "$twin" data rows28 rows28 24 2 &&
  python3 "$twin" data words words 24 3 && python3 "$twin" data words-full wfull 24 4 &&
  python3 "$twin" data images imgs 24 5 && python3 "$twin" data rows rows 24 6 &&
  python3 "$twin" data images345 img345 24 7 || fail "data"

model cnn img28 1e-9 --model cnn
model cnn-stride2 img28 1e-9 --model cnn-stride2
model resnet img28 out --model resnet
model inception img28 out --model inception
for m in resnet inception; do
  python3 -c "import json, sys
spec = json.load(open(sys.argv[1]))
for layer in spec['layers']:
    if layer.get('activation') == 'relu': layer['activation'] = 'tanh'
    if layer['type'] == 'maxpool2d': layer['type'] = 'average_pooling2d'
json.dump(spec, open(sys.argv[2], 'w'))" "$root/examples/models/$m.json" "$m-smooth.json"
  model "$m-smooth" img28 0.1 --model-spec "$m-smooth.json"
done
model gru-rows rows28 0.1 --model gru-rows
model lstm-rows rows28 0.1 --model lstm-rows
model gru-words words 0.1 --model gru-words
model bigru-words words 0.1 --model bigru-words
# Keras's Conv1D ignores masks (Mirror's 1-D layers honour lengths): full-length sequences.
model conv1d-words wfull 0.1 --model conv1d-words
# Without its Dropout, so that one step compares (BatchNorm's statistics move even at lr 1e-9).
python3 -c "import json, sys
spec = json.load(open(sys.argv[1])); spec['layers'] = [l for l in spec['layers'] if l['type'] != 'dropout']
json.dump(spec, open('coverage-images.json', 'w'))" "$root/tests/data/onnx/coverage-images.json"
model coverage-images imgs 0.1 --model-spec coverage-images.json
model coverage-seq rows 0.1 --model-spec "$root/tests/data/onnx/coverage-seq.json"
model coverage-words wfull 0.1 --model-spec "$root/tests/data/onnx/coverage-words.json"
model flatten-bn img345 0.1 --model-spec "$root/tests/data/keras/flatten-bn.mirror.json"
keras_model residual img28 0.1
keras_model branches img28 0.1
# Note [Adapted normalization]: a Keras model whose Normalization was adapted (to_json() writes
# "mean": null) trains from its saved weights and exports adapt()'s mean, variance and count
# again, which Keras's load_weights of that model requires.
python3 - <<'PY' || fail "Keras adapts a Normalization"
import numpy as np
import keras
x = np.load("imgs_x.npy").transpose(0, 2, 3, 1)
inputs = keras.Input((12, 12, 2))
norm = keras.layers.Normalization()
y = keras.layers.Conv2D(4, 3, activation="relu")(norm(inputs))
outputs = keras.layers.Dense(4)(keras.layers.GlobalAveragePooling2D()(y))
model = keras.Model(inputs, outputs)
norm.adapt(x * 3.0 + 1.0)
model.save_weights("adapted.weights.h5")
open("adapted.json", "w").write(model.to_json())
PY
model adapted imgs out --keras-json adapted.json --model-spec adapted.json \
  --init-weights adapted.weights.h5
[ ${#steps[@]} -eq 15 ] || fail "expected 15 models in both directions, got ${#steps[@]}"
keras_out
keras_in

echo "== 2 ranks from Keras's weights reach what 1 rank does"
e2e_need_mpirun
mpirun -np 2 --oversubscribe "$train" "${common[@]}" --model-spec resnet-smooth.json --sync-batchnorm \
  --train-x img28_x.npy --train-y img28_y.npy --max-steps 1 --batch-size 24 --lr 0.1 \
  --init-weights resnet-smooth.k0.weights.h5 --checkpoint-dir ck3-resnet >resnet.train3 2>&1 ||
  { cat resnet.train3; fail "resnet at 2 ranks"; }
"$export_" --checkpoint ck3-resnet --keras-weights resnet.r2.weights.h5 2>/dev/null ||
  fail "export of the 2-rank run"
jobs+=("compare-weights 1e-5 resnet:2-ranks resnet.r2.weights.h5 resnet-smooth.m1.weights.h5")
keras_finish

echo "== errors"
"$train" "${common[@]}" --model gru-rows --train-x rows28_x.npy --train-y rows28_y.npy \
  --max-steps 1 --init-weights lstm-rows.k0.weights.h5 >err.out 2>&1 && fail "a GRU started from an LSTM's weights"
grep -q "no variables at 'layers/gru/cell'" err.out || { cat err.out; fail "wrong file: no reason"; }
"$train" "${common[@]}" --model gru-rows --train-x rows28_x.npy --train-y rows28_y.npy \
  --max-steps 1 --init-weights missing.weights.h5 >err.out 2>&1 && fail "a missing file was accepted"
grep -q "missing.weights.h5: No such file or directory" err.out || { cat err.out; fail "missing file: no reason"; }
[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all keras_weights checks passed"
