#!/usr/bin/env bash
# Note [Keras's image layout] (include/mirror/nn/models.h): a Keras CNN (channels_last, input
# [H, W, C]) reads NHWC arrays as Keras does. tests/data/keras/image_layers.keras.json (RGB
# 12x12) trained on the same images as NCHW and as NHWC (transposed) reaches the same weights
# (the same fingerprint) and resumes across the two; mirror-predict gives the same outputs on
# either layout; a Mirror spec (NCHW) refuses NHWC samples, naming both shapes, unless given
# --data-format channels_last, which mirror-predict then follows from the checkpoint.
# Exit 77 (skipped) without numpy.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
python3 -c "import numpy" 2>/dev/null || { echo "SKIP: numpy is not installed"; exit 77; }
spec="$root/tests/data/keras/image_layers.keras.json"
python3 "$root/tests/e2e/keras_twin.py" data images12 img 24 11 || fail "data"
python3 -c "import numpy as np
x = np.load('img_x.npy')
np.save('img_nhwc.npy', np.ascontiguousarray(x.transpose(0, 2, 3, 1)))" || fail "transpose"
flags=(--devices cpu --threads 1 --no-progress --seed 5 --model-spec "$spec" --train-y img_y.npy
       --batch-size 12 --lr 0.05)
for layout in x nhwc; do
  "$train" "${flags[@]}" --train-x "img_$layout.npy" --max-steps 4 --checkpoint-dir "ck-$layout" \
    >"$layout.out" 2>&1 || { cat "$layout.out"; fail "training on the $layout arrays"; }
  "$build/bin/mirror-predict" --checkpoint "ck-$layout" --input "img_$layout.npy" \
    --output "p-$layout.npy" 2>"$layout.predict" || { cat "$layout.predict"; fail "predict ($layout)"; }
done
grep -q 'float32 \[12,12,3\], mapped, \[H, W, C\] samples read as \[C, H, W\]' nhwc.out ||
  fail "the start-up line does not say the NHWC samples are transposed: $(grep model nhwc.out)"
fingerprint() { grep -o 'weights fingerprint: [0-9a-f]*' "$1"; }
[ -n "$(fingerprint x.out)" ] && [ "$(fingerprint x.out)" = "$(fingerprint nhwc.out)" ] ||
  fail "NCHW and NHWC training differ: $(fingerprint x.out) vs $(fingerprint nhwc.out)"
python3 -c "import numpy as np, sys
a, b = np.load('p-x.npy'), np.load('p-nhwc.npy')
sys.exit(0 if a.shape == (24, 4) and np.array_equal(a, b) else 1)" ||
  fail "mirror-predict gives other outputs on NHWC samples"
# Two steps on NCHW, resumed for two more on NHWC: the 4-step weights.
"$train" "${flags[@]}" --train-x img_x.npy --max-steps 2 --checkpoint-dir ck-mixed >mixed1.out 2>&1 &&
  "$train" "${flags[@]}" --train-x img_nhwc.npy --max-steps 4 --resume ck-mixed >mixed2.out 2>&1 ||
  { cat mixed1.out mixed2.out; fail "resume across layouts"; }
[ "$(fingerprint mixed2.out)" = "$(fingerprint x.out)" ] ||
  fail "resumed across layouts: $(fingerprint mixed2.out), straight: $(fingerprint x.out)"
# A Mirror spec is NCHW: NHWC samples are refused with both shapes named.
echo '{"layers": [{"type": "conv2d", "filters": 2, "kernel": 3}, {"type": "flatten"}, {"type": "dense"}],
       "input_shape": [3, 12, 12]}' >mirror.json
"$train" "${flags[@]/$spec/mirror.json}" --train-x img_nhwc.npy --max-steps 1 >refused.out 2>&1 &&
  fail "a Mirror (NCHW) spec trained on NHWC samples"
grep -q 'states input shape \[3,12,12\].*\[12,12,3\]' refused.out ||
  fail "the refusal does not name both shapes: $(tail -2 refused.out)"
# --data-format channels_last: the Mirror spec reads the NHWC arrays (the weights of its NCHW
# run), and mirror-predict reads arrays as the checkpoint's training did, unless told otherwise.
mirror_flags=("${flags[@]/$spec/mirror.json}" --max-steps 2)
"$train" "${mirror_flags[@]}" --train-x img_x.npy --checkpoint-dir ck-m-x >m-x.out 2>&1 &&
  "$train" "${mirror_flags[@]}" --train-x img_nhwc.npy --data-format channels_last \
    --checkpoint-dir ck-m-nhwc >m-nhwc.out 2>&1 || { tail -3 m-x.out m-nhwc.out; fail "Mirror spec runs"; }
[ -n "$(fingerprint m-x.out)" ] && [ "$(fingerprint m-x.out)" = "$(fingerprint m-nhwc.out)" ] ||
  fail "--data-format channels_last trained other weights: $(fingerprint m-nhwc.out) vs $(fingerprint m-x.out)"
predict() { "$build/bin/mirror-predict" --checkpoint "$1" --input "$2" --output "$3" "${@:4}" 2>"$3.err" ||
  { cat "$3.err"; fail "predict $*"; }; }
predict ck-m-x img_x.npy pm-x.npy
predict ck-m-nhwc img_nhwc.npy pm-nhwc.npy
predict ck-m-nhwc img_x.npy pm-first.npy --data-format channels_first
python3 -c "import numpy as np, sys
a, b, c = (np.load(f) for f in ('pm-x.npy', 'pm-nhwc.npy', 'pm-first.npy'))
sys.exit(0 if a.shape == (24, 4) and np.array_equal(a, b) and np.array_equal(a, c) else 1)" ||
  fail "mirror-predict does not read the arrays as the checkpoint's training did"
# A wrong layout, and a flag that does not apply, are named.
"$train" "${mirror_flags[@]}" --train-x img_x.npy --data-format channels_last >wrong.out 2>&1 &&
  fail "--data-format channels_last took [C, H, W] samples"
grep -q -- "--data-format channels_last: the samples are \[3,12,12\], not the model's image \[3,12,12\]" wrong.out ||
  fail "the channels_last refusal: $(tail -2 wrong.out)"
"$train" "${mirror_flags[@]}" --train-x img_x.npy --data-format nhwc >bad.out 2>&1 && fail "--data-format nhwc accepted"
grep -q -- "--data-format must be auto, channels_last or channels_first, got 'nhwc'" bad.out ||
  fail "the bad value: $(tail -2 bad.out)"
mkdir -p imgs/a imgs/b
"$train" --model cnn --train-images imgs --data-format channels_last --devices cpu >folder.out 2>&1 &&
  fail "--data-format with --train-images accepted"
grep -q -- "--data-format channels_last is for array data" folder.out ||
  fail "the image folder refusal: $(tail -2 folder.out)"
[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "keras_layout: NHWC and NCHW samples train and predict alike, --data-format included"
