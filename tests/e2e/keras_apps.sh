#!/usr/bin/env bash
# Keras's own applications, unchanged: keras.applications.EfficientNetB0 and MobileNetV3Small
# (weights=None, 32x32 RGB, 10 classes) as to_json() writes them (tests/data/keras/
# make_applications.py), against Keras 3 itself (tests/e2e/keras_twin.py is Keras's side, the steps
# tests/e2e/keras_common.bash): VarianceScaling initializers, silu and hard_silu, squeeze-and-
# excitation gates broadcast over the image, x + 3 and x / 6 op nodes, Dropout(noise_shape),
# GlobalAveragePooling2D(keepdims=True).
#  - each, trained one SGD step by mirror-train and exported with --keras-weights, loads into
#    Keras and predicts what mirror-predict does (within 1e-5 of the outputs' largest magnitude);
#  - Keras's initial weights given to --init-weights take one SGD step to Keras's own step's
#    weights (within 1e-4 per variable; 5e-4 for EfficientNetB0, whose gradient passes 16 blocks
#    of convolutions and training-mode BatchNormalization: float32 rounding, oneDNN's against
#    XLA's, reached 1.8e-4 at a squeeze-and-excitation bias, while the classifier's gradient
#    agreed within 1.3e-5).
# The JSON is read as it is but for these edits: the dropout rates are 0 (keras_model's, so that one
# step compares); EfficientNet's Normalization, which keras.applications never adapts without
# ImageNet weights, states Keras's initial mean 0 and variance 1 (Note [Unstated normalization]);
# and EfficientNet's classifier outputs logits (`linear` for `softmax`; the step then uses
# Keras's from_logits loss): from Keras's initial weights, in training mode, some samples give
# their class a probability below 1e-7, where Keras's crossentropy of probabilities clips (and
# passes no gradient) but Mirror's of logits, which folds the softmax, does not. MobileNetV3Small
# keeps its softmax (folded into the loss, its probabilities compared).
# Skipped (exit 77) without Keras and h5py, or without HDF5 in the build.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
source "$(dirname "${BASH_SOURCE[0]}")/keras_common.bash"

python3 "$twin" data images32 apps 24 14 || fail "data"

# apps_model NAME LOGITS: keras_model's step, the Normalization stated as Keras computes it
# unadapted, the Dense classifier's softmax replaced by logits when LOGITS is 1.
apps_model() {
  python3 -c "import json, sys
model = json.load(open(sys.argv[1]))
for layer in model['config']['layers']:
    c = layer['config']
    if 'rate' in c: c['rate'] = 0.0
    if layer['class_name'] == 'Normalization' and c.get('mean') is None:
        c['mean'], c['variance'] = [0.0] * 3, [1.0] * 3
    if sys.argv[3] == '1' and layer['class_name'] == 'Dense': c['activation'] = 'linear'
json.dump(model, open(sys.argv[2], 'w'))" "$root/tests/data/keras/$1.keras.json" "$1.keras.json" "$2"
  model "$1" apps 0.1 --keras-json "$1.keras.json" --model-spec "$1.keras.json"
}

apps_model efficientnet_b0 1
apps_model mobilenet_v3_small 0
[ ${#steps[@]} -eq 2 ] || fail "expected 2 models, got ${#steps[@]}"
keras_out
keras_in
jobs=("${jobs[@]/compare-weights 1e-4 efficientnet_b0:step/compare-weights 5e-4 efficientnet_b0:step}")
keras_finish
[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all keras_apps checks passed"
