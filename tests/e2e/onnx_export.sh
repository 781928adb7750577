#!/usr/bin/env bash
# train -> predict -> export -> onnxruntime for every shipped model spec (the built-in models,
# examples/models/*.json) and the coverage specs of tests/data/onnx/ (every other layer kind:
# zero padding, conv without bias, average pools, gelu, layer norm, add/concatenate, LSTMs and
# bidirectional merges, strided conv1d, 1-D pools with and without lengths, Masking on float
# rows, a Dense and a sigmoid on every step, concatenated sequences; the preprocessing layers
# and Keras masks are e2e.keras_tutorials'): each model is trained one step (so BatchNorm
# statistics and biases move), predicted with mirror-predict, exported with mirror-export and run in onnxruntime on samples with padded
# sequences of every length; the outputs must agree within 1e-5 relative (onnx_compare.py). Skipped (exit 77) when
# onnxruntime or numpy is not installed (scripts/test.sh installs them best-effort) or the build
# has no protobuf: never reported as passed without running.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
predict="$build/bin/mirror-predict"
export_="$build/bin/mirror-export"
here="$root/tests/e2e"
python3 -c "import onnxruntime, numpy" 2>/dev/null ||
  { echo "SKIP: python modules onnxruntime/numpy not installed (pip install onnxruntime)"; exit 77; }
common=(--devices cpu --threads 1 --no-progress --seed 5 --batch-size 8)

triples=()
# run_model NAME TRAIN_FLAGS...: one training step, then predict and export.
run_model() {
  local name="$1"; shift
  "$train" "${common[@]}" "$@" --checkpoint-dir "ck-$name" >"$name.train" 2>&1 ||
    { cat "$name.train"; fail "$name: training"; return; }
  python3 "$here/onnx_inputs.py" ck-"$name"/*.safetensors "$name.x.npy" 6 1 || fail "$name: inputs"
  "$predict" --checkpoint "ck-$name" --input "$name.x.npy" --output "$name.y.npy" --devices cpu \
    2>"$name.predict" || { cat "$name.predict"; fail "$name: mirror-predict"; return; }
  if ! "$export_" --checkpoint "ck-$name" --onnx "$name.onnx" 2>"$name.export"; then
    grep -q "needs a build with protobuf" "$name.export" && { echo "SKIP: built without protobuf"; exit 77; }
    cat "$name.export"; fail "$name: mirror-export"; return
  fi
  triples+=("$name.onnx" "$name.x.npy" "$name.y.npy")
}

for spec in "$root"/examples/models/*.json; do
  name="$(basename "$spec" .json)"
  run_model "$name" --model "$name" --data synthetic --max-steps 1 --train-limit 16 --test-limit 8
done
for kind in images words rows; do python3 "$here/onnx_inputs.py" --train "$kind" "$kind" 48 3; done
for spec_data in images:images words:words rows:rows seq:rows steps:words; do
  spec="${spec_data%%:*}" data="${spec_data##*:}"
  run_model "coverage-$spec" --model-spec "$root/tests/data/onnx/coverage-$spec.json" \
    --train-x "${data}_x.npy" --train-y "${data}_y.npy" --max-steps 1
done
[ ${#triples[@]} -eq $((3 * 14)) ] || fail "expected 14 exported models, got $((${#triples[@]} / 3))"

echo "== probabilities: a Softmax at the end of the graph, as mirror-predict's"
"$predict" --checkpoint ck-bigru-words --input bigru-words.x.npy --output p.y.npy \
  --output-kind probabilities --devices cpu 2>/dev/null || fail "predict probabilities"
"$export_" --checkpoint ck-bigru-words --onnx p.onnx --output-kind probabilities 2>/dev/null ||
  fail "export probabilities"
python3 -c "
import numpy as np, sys
p = np.load('p.y.npy'); assert np.allclose(p.sum(1), 1, atol=1e-6), p.sum(1)" || fail "rows do not sum to 1"
triples+=(p.onnx bigru-words.x.npy p.y.npy)

python3 "$here/onnx_compare.py" 1e-5 "${triples[@]}" || fail "onnxruntime disagrees with mirror-predict"

echo "== export errors"
"$export_" --checkpoint missing-dir --onnx x.onnx >err.out 2>&1 && fail "a missing checkpoint exported"
grep -q "No such file or directory" err.out || { cat err.out; fail "missing checkpoint: no reason"; }
"$export_" --checkpoint ck-cnn --onnx /nonexistent/dir/x.onnx >err.out 2>&1 && fail "an unwritable path"
grep -q "cannot write /nonexistent/dir/x.onnx: No such file or directory" err.out ||
  { cat err.out; fail "unwritable output: no reason"; }
[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all onnx_export checks passed"
