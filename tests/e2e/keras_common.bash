# What the Keras e2e scripts (keras_weights.sh, keras_models.sh) share; sourced after common.bash:
#   model NAME DATA LR MODEL_FLAGS...   trains one SGD step, predicts, exports --keras-weights and
#                                       queues Keras's jobs (load, predict, init, step)
#   keras_model NAME DATA LR            the same for tests/data/keras/NAME.keras.json, read as is
#                                       (its dropout rates set to 0, so one step compares)
#   keras_out                           runs the queued Keras jobs (round one)
#   keras_in                            --init-weights from Keras's initial weights, one step, and
#                                       queues the comparisons with Keras's step (round two)
#   keras_finish                        runs them
# DATA is the prefix of DATA_x.npy / DATA_y.npy (keras_twin.py data); LR 0.1, or 1e-9 for a model
# whose dropout masks (Mirror's and Keras's own) would differ: it keeps Keras's initial weights;
# or `out`: Mirror's weights go to Keras only (a model whose step another model checks).
# Exits 77 (skipped) without Keras and h5py, or without HDF5 in the build.
predict="$build/bin/mirror-predict"
export_="$build/bin/mirror-export"
here="$root/tests/e2e"
twin="$here/keras_twin.py"
export KERAS_BACKEND="${KERAS_BACKEND:-jax}" JAX_PLATFORMS=cpu
python3 -c "import keras, h5py, numpy" 2>/dev/null ||
  { echo "SKIP: python modules keras/h5py not installed (pip install keras jax h5py)"; exit 77; }
common=(--devices cpu --threads 1 --no-progress --seed 5 --optimizer sgd --momentum 0)
jobs=()   # Keras's side of a round (one python process)
steps=()  # name|data|lr|flags of each model, for round two

# folded CHECKPOINT: whether its spec ends in a softmax that Mirror folded into the loss (Keras's
# model then outputs probabilities: mirror-predict --output-kind probabilities).
folded() {
  python3 -c "import json, struct, sys
f = open(sys.argv[1], 'rb'); n = struct.unpack('<Q', f.read(8))[0]
sys.exit(0 if json.loads(json.loads(f.read(n))['__metadata__']['mirror.model']).get('softmax_folded') else 1)" "$1"
}

model() {
  local name="$1" data="$2" lr="$3"; shift 3
  local keras_json=""
  [ "$1" = "--keras-json" ] && { keras_json="$2"; shift 2; }
  "$train" "${common[@]}" "$@" --train-x "${data}_x.npy" --train-y "${data}_y.npy" --max-steps 1 \
    --batch-size 24 --lr 0.1 --checkpoint-dir "ck-$name" >"$name.train" 2>&1 ||
    { cat "$name.train"; fail "$name: training"; return; }
  local ck
  ck="$(ls ck-"$name"/ckpt-*.safetensors | tail -1)"
  local keras_model=(--checkpoint "$ck")
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
  [ "$lr" = out ] || steps+=("$name|$data|$lr|$*")
}

keras_model() {
  python3 -c "import json, sys
model = json.load(open(sys.argv[1]))
for layer in model['config']['layers']:
    if 'rate' in layer['config']: layer['config']['rate'] = 0.0
    if layer['class_name'] in ('MultiHeadAttention', 'Attention', 'AdditiveAttention'):
        layer['config']['dropout'] = 0.0
json.dump(model, open(sys.argv[2], 'w'))" "$root/tests/data/keras/$1.keras.json" "$1.keras.json"
  model "$1" "$2" "$3" --keras-json "$1.keras.json" --model-spec "$1.keras.json"
}

keras_out() {
  echo "== Keras loads Mirror's weights (and takes its own first step)"
  printf '%s\n' "${jobs[@]}" >jobs1.txt
  python3 "$twin" --jobs jobs1.txt || fail "Keras's side (out)"
  jobs=()
}

keras_in() {
  echo "== Mirror starts from Keras's weights (--init-weights)"
  local s name data lr flags
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
}

keras_finish() {
  printf '%s\n' "${jobs[@]}" >jobs2.txt
  python3 "$twin" --jobs jobs2.txt || fail "Keras's side (in)"
}
