#!/usr/bin/env bash
# keras.applications models, read unchanged from Keras's own to_json() (issue "Keras's own
# models"): each application, built by Keras here (weights=None, classes=10, the smallest input
# it accepts: 32x32x3, or 75x75x3 for InceptionV3 and Xception), trains one SGD step with
# mirror-train --model-spec on that JSON, is exported with mirror-export --keras-weights, loads
# into the Keras model with load_weights, and predicts the logits mirror-predict predicts (within
# 1e-5 of their largest magnitude). Keras's side reads the JSON with its softmax head made
# linear: Mirror folds the softmax into the loss, and after a training step the probabilities
# of a deep net are often exactly one-hot, which would compare equal whatever the weights. The
# step is SGD at lr 0.01: at 0.1 EfficientNetB0's logits reach ~150 after one step (its
# BatchNorm statistics barely move), where float32 differences of 6e-4 (2.3e-5 of the largest,
# past the tolerance) separate Keras's inference from Mirror's on some initial weights.
# APPS lists the applications Mirror reads; docs/keras.md says what each needed.
# Skipped (exit 77) without Keras and h5py, or without HDF5 in the build.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
source "$(dirname "${BASH_SOURCE[0]}")/keras_common.bash"

APPS=(ResNet50 ResNet50V2 DenseNet121 InceptionV3 VGG16 MobileNetV2 Xception ConvNeXtTiny
      MobileNetV3Small EfficientNetB0)
# EfficientNetB0's Normalization is never adapted without ImageNet weights, so its to_json()
# states no mean and variance (Note [Unstated normalization]): it starts from Keras's own
# save_weights of the model (--init-weights), which holds them, as mirror.fit(model) does.
FROM_KERAS_WEIGHTS=" EfficientNetB0 "

python3 "$twin" data images32 img32 24 21 && python3 "$twin" data images75 img75 24 22 ||
  fail "data"
python3 - "$FROM_KERAS_WEIGHTS" "${APPS[@]}" <<'PY' || fail "Keras builds the applications"
import json, sys
import keras
keras.utils.set_random_seed(3)  # Keras's initial weights (EfficientNetB0's --init-weights)
big = {"InceptionV3": 75, "Xception": 75}
for name in sys.argv[2:]:
    size = big.get(name, 32)
    app = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3), classes=10)
    with open(name + ".json", "w") as f:
        f.write(app.to_json())
    spec = json.loads(app.to_json())
    head = spec["config"]["layers"][-1]["config"]
    assert head.get("activation") == "softmax", name + ": expected a softmax head"
    head["activation"] = "linear"
    with open(name + ".logits.json", "w") as f:
        json.dump(spec, f)
    if name in sys.argv[1].split():
        app.save_weights(name + ".k0.weights.h5")
PY

for app in "${APPS[@]}"; do
  data=img32
  case "$app" in InceptionV3 | Xception) data=img75 ;; esac
  [ -f "$app.json" ] || { fail "$app: Keras wrote no JSON"; continue; }
  start=$SECONDS
  init=()
  [[ "$FROM_KERAS_WEIGHTS" == *" $app "* ]] && init=(--init-weights "$app.k0.weights.h5")
  "$train" "${common[@]}" "${init[@]}" --model-spec "$app.json" --train-x "${data}_x.npy" \
    --train-y "${data}_y.npy" --max-steps 1 --batch-size 24 --lr 0.01 --checkpoint-dir "ck-$app" \
    >"$app.train" 2>&1 || { cat "$app.train"; fail "$app: training"; continue; }
  "$predict" --checkpoint "ck-$app" --input "${data}_x.npy" --output "$app.mirror.npy" \
    --devices cpu 2>"$app.predict" || { cat "$app.predict"; fail "$app: predict"; continue; }
  "$export_" --checkpoint "ck-$app" --keras-weights "$app.weights.h5" 2>"$app.export" ||
    { grep -q "has no HDF5" "$app.export" && { echo "SKIP: built without HDF5"; exit 77; }
      cat "$app.export"; fail "$app: mirror-export"; continue; }
  echo "$app: trained, predicted and exported by Mirror in $((SECONDS - start)) s"
  jobs+=("--keras $app.logits.json predict $app.weights.h5 ${data}_x.npy $app.keras.npy"
         "compare 1e-5 $app:logits $app.keras.npy $app.mirror.npy")
done
[ ${#jobs[@]} -eq $((2 * ${#APPS[@]})) ] || fail "expected ${#APPS[@]} models, got $((${#jobs[@]} / 2))"
keras_out
[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all keras_applications checks passed (${#APPS[@]} applications)"
