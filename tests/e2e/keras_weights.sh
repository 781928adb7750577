#!/usr/bin/env bash
# Weights both ways between Mirror and Keras 3 (tests/e2e/keras_twin.py is Keras's side), for every
# shipped spec (examples/models/*.json, the ONNX coverage specs of tests/data/onnx/, the Flatten
# and normalization spec of tests/data/keras/) and the Keras functional fixtures of
# tests/data/keras/*.keras.json:
#  - out: a model trained one SGD step by mirror-train, exported with mirror-export
#    --keras-weights, loads with Keras's load_weights into the model the spec was read from (the
#    Keras JSON, or the Keras twin of a Mirror spec) and predicts what mirror-predict predicts
#    (within 1e-5 of the outputs' largest magnitude);
#  - in: Keras's own initial weights (save_weights), given to mirror-train --init-weights, train
#    one SGD step on the whole batch to the weights Keras's train_on_batch reaches (within 1e-4
#    per variable; models with dropout, whose masks differ, take a step of lr 1e-9 and keep
#    Keras's weights; an LSTM's bias is left out: Keras trains one bias, Mirror two, as cuDNN and
#    PyTorch do, so their sum moves twice as far); and 2 ranks reach what 1 rank does.
# Skipped (exit 77) without Keras and h5py (scripts/test_python.sh installs them best-effort)
# or without HDF5 in the build: never reported as passed without running.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
predict="$build/bin/mirror-predict"
export_="$build/bin/mirror-export"
here="$root/tests/e2e"
export KERAS_BACKEND="${KERAS_BACKEND:-jax}" JAX_PLATFORMS=cpu
python3 -c "import keras, h5py, numpy" 2>/dev/null ||
  { echo "SKIP: python modules keras/h5py not installed (pip install keras jax h5py)"; exit 77; }
twin="$here/keras_twin.py"

python3 "$twin" data images28 img28 24 1 && python3 "$twin" data rows28 rows28 24 2 &&
  python3 "$twin" data words words 24 3 && python3 "$twin" data words-full wfull 24 4 &&
  python3 "$twin" data images imgs 24 5 && python3 "$twin" data rows rows 24 6 &&
  python3 "$twin" data images345 img345 24 7 && python3 "$twin" data unet unet 24 8 &&
  python3 "$twin" data seq2seq s2s 24 9 || fail "data"
common=(--devices cpu --threads 1 --no-progress --seed 5 --optimizer sgd --momentum 0)

# folded CHECKPOINT: whether its spec ends in a softmax that Mirror folded into the loss (Keras's
# model then outputs probabilities: mirror-predict --output-kind probabilities).
folded() {
  python3 -c "import json, struct, sys
f = open(sys.argv[1], 'rb'); n = struct.unpack('<Q', f.read(8))[0]
sys.exit(0 if json.loads(json.loads(f.read(n))['__metadata__']['mirror.model']).get('softmax_folded') else 1)" "$1"
}

jobs=()       # Keras's side of the first round (one python process)
steps=()      # name|model|data|lr of each model for the second round
# model NAME DATA LR MODEL_FLAGS...: trains one step, predicts, exports, queues Keras's jobs.
# DATA is the prefix of DATA_x.npy / DATA_y.npy; LR 1e-9 for models with dropout.
model() {
  local name="$1" data="$2" lr="$3"; shift 3
  local keras_model=(--checkpoint "ck-$name/latest") keras_json=""
  [ "$1" = "--keras-json" ] && { keras_json="$2"; shift 2; }
  "$train" "${common[@]}" "$@" --train-x "${data}_x.npy" --train-y "${data}_y.npy" --max-steps 1 \
    --batch-size 24 --lr 0.1 --checkpoint-dir "ck-$name" >"$name.train" 2>&1 ||
    { cat "$name.train"; fail "$name: training"; return; }
  local ck
  ck="$(ls ck-"$name"/ckpt-*.safetensors | tail -1)"
  keras_model=(--checkpoint "$ck")
  [ -n "$keras_json" ] && keras_model=(--keras "$keras_json")
  local kind=()  # a Keras JSON ending in softmax: Keras outputs the probabilities
  [ -n "$keras_json" ] && folded "$ck" && kind=(--output-kind probabilities)
  "$predict" --checkpoint "ck-$name" --input "${data}_x.npy" --output "$name.mirror.npy" \
    --devices cpu "${kind[@]}" 2>"$name.predict" || { cat "$name.predict"; fail "$name: predict"; return; }
  "$export_" --checkpoint "ck-$name" --keras-weights "$name.weights.h5" 2>"$name.export" ||
    { grep -q "has no HDF5" "$name.export" && { echo "SKIP: built without HDF5"; exit 77; }
      cat "$name.export"; fail "$name: mirror-export"; return; }
  jobs+=("${keras_model[*]} predict $name.weights.h5 ${data}_x.npy $name.keras.npy"
         "compare 1e-5 $name:out $name.keras.npy $name.mirror.npy"
         "${keras_model[*]} init $name.k0.weights.h5 11")
  [ "$lr" = "0.1" ] &&
    jobs+=("${keras_model[*]} step $name.k0.weights.h5 ${data}_x.npy ${data}_y.npy 0.1 $name.k1.weights.h5")
  steps+=("$name|$data|$lr|$*")
}

model cnn img28 1e-9 --model cnn
model cnn-stride2 img28 1e-9 --model cnn-stride2
model resnet img28 0.1 --model resnet
model inception img28 0.1 --model inception
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
# keras_model NAME DATA LR: a Keras functional fixture, read unchanged.
keras_model() {
  model "$1" "$2" "$3" --keras-json "$root/tests/data/keras/$1.keras.json" \
    --model-spec "$root/tests/data/keras/$1.keras.json"
}
keras_model residual img28 0.1
keras_model branches img28 0.1
keras_model unet unet 0.1
keras_model seq2seq_repeat s2s 0.1
[ ${#steps[@]} -eq 17 ] || fail "expected 17 models, got ${#steps[@]}"

echo "== Keras loads Mirror's weights (and takes its own first step)"
printf '%s\n' "${jobs[@]}" >jobs1.txt
python3 "$twin" --jobs jobs1.txt || fail "Keras's side (out)"

echo "== Mirror starts from Keras's weights (--init-weights)"
jobs=()
for s in "${steps[@]}"; do
  IFS='|' read -r name data lr flags <<<"$s"
  read -ra flags <<<"$flags"
  "$train" "${common[@]}" "${flags[@]}" --train-x "${data}_x.npy" --train-y "${data}_y.npy" \
    --max-steps 1 --batch-size 24 --lr "$lr" --init-weights "$name.k0.weights.h5" \
    --checkpoint-dir "ck2-$name" >"$name.train2" 2>&1 ||
    { cat "$name.train2"; fail "$name: --init-weights"; continue; }
  grep -q "initial weights from $name.k0.weights.h5" "$name.train2" ||
    fail "$name: the start-up line does not name the initial weights"
  "$export_" --checkpoint "ck2-$name" --keras-weights "$name.m1.weights.h5" 2>/dev/null ||
    { fail "$name: export after --init-weights"; continue; }
  if [ "$lr" = "0.1" ]; then
    jobs+=("compare-weights 1e-4 $name:step $name.m1.weights.h5 $name.k1.weights.h5")
  else
    jobs+=("compare-weights 1e-5 $name:init $name.m1.weights.h5 $name.k0.weights.h5")
  fi
done

echo "== 2 ranks from Keras's weights reach what 1 rank does"
e2e_need_mpirun
mpirun -np 2 --oversubscribe "$train" "${common[@]}" --model resnet --sync-batchnorm --train-x img28_x.npy \
  --train-y img28_y.npy --max-steps 1 --batch-size 24 --lr 0.1 --init-weights resnet.k0.weights.h5 \
  --checkpoint-dir ck3-resnet >resnet.train3 2>&1 || { cat resnet.train3; fail "resnet at 2 ranks"; }
"$export_" --checkpoint ck3-resnet --keras-weights resnet.r2.weights.h5 2>/dev/null ||
  fail "export of the 2-rank run"
jobs+=("compare-weights 1e-5 resnet:2-ranks resnet.r2.weights.h5 resnet.m1.weights.h5")
printf '%s\n' "${jobs[@]}" >jobs2.txt
python3 "$twin" --jobs jobs2.txt || fail "Keras's side (in)"

echo "== errors"
"$train" "${common[@]}" --model gru-rows --train-x rows28_x.npy --train-y rows28_y.npy \
  --max-steps 1 --init-weights lstm-rows.k0.weights.h5 >err.out 2>&1 && fail "a GRU started from an LSTM's weights"
grep -q "no variables at 'layers/gru/cell'" err.out || { cat err.out; fail "wrong file: no reason"; }
"$train" "${common[@]}" --model gru-rows --train-x rows28_x.npy --train-y rows28_y.npy \
  --max-steps 1 --init-weights missing.weights.h5 >err.out 2>&1 && fail "a missing file was accepted"
grep -q "missing.weights.h5: No such file or directory" err.out || { cat err.out; fail "missing file: no reason"; }
[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all keras_weights checks passed"
