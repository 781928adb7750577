#!/usr/bin/env bash
# Keras's ConvNeXt (issue 44, "Keras's own models, unchanged"), against Keras 3 itself
# (tests/e2e/keras_twin.py is Keras's side, the steps tests/e2e/keras_common.bash):
#  - tests/data/keras/convnext_mini.keras.json (make_nested.py: nested Sequential and Functional
#    models, Conv2D(groups), Dense and LayerNormalization over an image's channels, LayerScale),
#    trained one SGD step by mirror-train and exported with --keras-weights, loads into Keras (the
#    nested models' weight paths) and predicts what mirror-predict does; Keras's initial weights
#    given to --init-weights take one SGD step to Keras's own step's weights;
#  - keras.applications.ConvNeXtTiny(weights=None, classes=10) at 64x64, its to_json() read
#    unchanged: one SGD step from Keras's initial weights gives Keras's own step's weights (all 182
#    variables within 1e-4).
# Skipped (exit 77) without Keras and h5py, or without HDF5 in the build.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
source "$(dirname "${BASH_SOURCE[0]}")/keras_common.bash"

python3 "$twin" data mobilenet mobile 24 10 || fail "data"
keras_model convnext_mini mobile 0.1
[ ${#steps[@]} -eq 1 ] || fail "expected 1 model, got ${#steps[@]}"
keras_out
keras_in
keras_finish

echo "== keras.applications.ConvNeXtTiny, unchanged: one SGD step from Keras's weights is Keras's"
python3 - <<'PY' 2>/dev/null || fail "ConvNeXtTiny: Keras's to_json()"
import numpy as np
import keras
m = keras.applications.ConvNeXtTiny(weights=None, input_shape=(64, 64, 3), classes=10)
open("convnext_tiny.json", "w").write(m.to_json())
rng = np.random.default_rng(3)
np.save("tiny_x.npy", rng.normal(0, 1, (10, 3, 64, 64)).astype(np.float32))
np.save("tiny_y.npy", np.arange(10).astype(np.int64))  # every class: the data has 10
PY
python3 "$twin" --keras convnext_tiny.json init tiny.k0.weights.h5 11 2>/dev/null ||
  fail "ConvNeXtTiny: Keras's initial weights"
"$train" "${common[@]}" --model-spec convnext_tiny.json --train-x tiny_x.npy --train-y tiny_y.npy \
  --max-steps 1 --batch-size 10 --lr 0.1 --init-weights tiny.k0.weights.h5 --checkpoint-dir ck-tiny \
  >tiny.train 2>&1 || { cat tiny.train; fail "ConvNeXtTiny: one training step"; }
"$export_" --checkpoint ck-tiny --keras-weights tiny.m1.weights.h5 2>tiny.export ||
  { cat tiny.export; fail "ConvNeXtTiny: mirror-export"; }
printf '%s\n' "--keras convnext_tiny.json step tiny.k0.weights.h5 tiny_x.npy tiny_y.npy 0.1 tiny.k1.weights.h5" \
  "compare-weights 1e-4 convnext_tiny:step tiny.m1.weights.h5 tiny.k1.weights.h5" >jobs3.txt
python3 "$twin" --jobs jobs3.txt || fail "ConvNeXtTiny: Keras's step"
[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all keras_nested checks passed"
