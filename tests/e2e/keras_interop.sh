#!/usr/bin/env bash
# Mirror against the Keras that PyPI serves (scripts/test_python.sh installs keras and jax in
# build/test-python, best effort; without them this test is Skipped, never passed):
#  1. the reference models of tests/data/keras/make_reference.py are written anew by this Keras
#     (its to_json(), weights, outputs on padded batches and one SGD step) and keras_reference_test
#     must agree with them as with the committed ones (forward and step within 1e-5);
#  2. docs/checkpoint.md's Flatten recipe (tests/data/keras/flatten_to_keras.py) puts a trained
#     Conv2D -> Flatten -> LayerNormalization -> Dense into Keras with mirror-predict's outputs
#     (within 1e-5), where permuting the Dense alone does not.
# Usage: keras_interop.sh <build dir>. Exit 77 = skipped.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
export KERAS_BACKEND=jax
python3 -c "import keras, jax, safetensors, numpy" 2>/dev/null ||
  { echo "SKIP: python modules keras/jax/safetensors/numpy not installed (scripts/test_python.sh)"; exit 77; }
reference_test="$build/tests/keras_reference_test"
[ -x "$reference_test" ] || { echo "skip: $reference_test is not built"; exit 77; }

echo "== 1. reference models written by Keras $(python3 -c 'import keras; print(keras.__version__)' 2>/dev/null)"
python3 "$root/tests/data/keras/make_reference.py" ref >make_reference.out 2>&1 ||
  { tail -5 make_reference.out; fail "make_reference.py"; }
MIRROR_KERAS_REFERENCE_DIR="$PWD/ref" "$reference_test" >reference.out 2>&1 ||
  { grep -E "Failure|FAILED|keras \]" reference.out | head -20; fail "Mirror disagrees with this Keras"; }
grep "keras \]" reference.out

echo "== 2. docs/checkpoint.md's Flatten recipe"
python3 -c "
import numpy as np
rng = np.random.default_rng(2)
np.save('x.npy', rng.normal(0, 1, (32, 2, 6, 6)).astype(np.float32))
np.save('y.npy', rng.integers(0, 4, 32).astype(np.int32))"
"$train" --model-spec "$root/tests/data/keras/flatten_ln.json" --train-x x.npy --train-y y.npy \
  --max-steps 3 --batch-size 8 --lr 0.05 --devices cpu --threads 1 --no-progress \
  --checkpoint-dir ck >train.out 2>&1 || { tail -5 train.out; fail "training"; }
"$build/bin/mirror-predict" --checkpoint ck --input x.npy --output p.npy --devices cpu 2>/dev/null ||
  fail "mirror-predict"
python3 "$root/tests/e2e/keras_flatten_weights.py" ck x.npy p.npy || fail "the Flatten recipe"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "Mirror agrees with Keras"
