#!/usr/bin/env bash
# Every model spec shipped in examples/models/ trains through mirror-train --model-spec under 1
# and 2 ranks with the same global batch: the loss falls from the first epoch to the second, and
# the 2-rank weights equal the 1-rank ones within 1e-5 (data parallelism is exact for spec-built
# models through the generic fit loop too). cnn-stride2.json has stride-2 4x4 convolutions, so
# TensorFlow's asymmetric 'same' padding runs here too. resnet.json and inception.json are model
# graphs (residual additions, concatenated branches) with BatchNormalization, run with
# --sync-batchnorm so that 2 ranks normalise over the same global batch as 1 (their moving
# statistics, saved in the checkpoint, are compared too). They are compared per tensor (l2):
# a BatchNormalization's beta behind a convolution and another BatchNormalization has a gradient
# that is nearly zero by construction (the next one removes the mean), a sum of float32 terms that
# cancel, so its few-ulp differences are large next to it; 1 rank with 2 threads differs from 1
# rank with 1 thread by as much (ResNet: 1e-3 to 7e-3). Without sync it is ~0.3-0.5, and the
# exactness of sync BatchNorm to 1e-5 is tests/mpi/equivalence_test.cpp's. The Keras functional
# ResNet-style fixture runs the same way, read as Keras wrote it.
# Usage: spec_models.sh <build dir>. Exit 77 = skipped.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
models="$root/examples/models"
command -v python3 >/dev/null || { echo "skip: python3 not found"; exit 77; }
e2e_need_mpirun

# run_spec SPEC DATA-FLAGS...: 1 rank for 2 epochs (the loss must fall), then 2 ranks for the
# first 2 steps, compared with the 1-rank checkpoint of step 2.
# SGD and 2 steps: on a gradient that is ~0, Adam's division by sqrt(v) turns the order of float
# additions into an update of size lr, and over many steps a ReLU or max-pool decision that flips
# on a rounding difference grows into a visible one (the CNN reaches 1e-3 after 4 steps). Two
# SGD steps test the sharding and the all-reduce, not the chaos of training.
run_spec() {
  local spec="$1" name tolerance="${TOLERANCE:-1e-5}" mode="${MODE:-}"
  name="$(basename "$spec" .json)"
  shift
  local common=(--model-spec "$spec" "$@" --train-limit 192 --test-limit 64 --batch-size 32
                --optimizer sgd --lr 0.05 --seed 5 --devices cpu --threads 1 --no-progress)
  local before=$failures
  if ! "$train" "${common[@]}" --epochs 2 --checkpoint-dir "$work/$name-1" --checkpoint-every 2 \
       --keep 0 --log-jsonl "$work/$name.jsonl" >"$work/$name-1.out" 2>&1; then
    fail "$name: 1-rank run"; tail -5 "$work/$name-1.out"; return
  fi
  if ! mpirun --oversubscribe --bind-to none -np 2 "$train" "${common[@]}" --max-steps 2 \
       --checkpoint-dir "$work/$name-2" >"$work/$name-2.out" 2>&1; then
    fail "$name: 2-rank run"; tail -5 "$work/$name-2.out"; return
  fi
  # The spec's own name (NAME: a Keras model's config.name), then the file it came from.
  grep -qF "[mirror] model ${NAME:-$name} (from $spec" "$work/$name-1.out" ||
    fail "$name: the run does not name the spec: $(grep '^\[mirror\] model' "$work/$name-1.out")"
  python3 - "$work/$name.jsonl" <<'PY' || fail "$name: the loss did not fall"
import json, sys
epochs = [r for r in map(json.loads, open(sys.argv[1])) if r["type"] == "epoch"]
assert len(epochs) == 2, epochs
print("loss %.4f -> %.4f" % (epochs[0]["loss"], epochs[1]["loss"]))
assert epochs[1]["loss"] < epochs[0]["loss"]
PY
  python3 "$root/tests/e2e/compare_checkpoints.py" "$work/$name-1/ckpt-000000000002.safetensors" \
    "$work/$name-2" "$tolerance" $mode || fail "$name: 2-rank weights differ from 1-rank weights"
  [ "$failures" -ne "$before" ] || echo "ok   $name"
}

real_images=()
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  real_images=(--data real)
else
  echo "note: Fashion-MNIST not installed; image specs use synthetic data"
  real_images=(--data synthetic)
fi
run_spec "$models/cnn.json" --model cnn "${real_images[@]}"
run_spec "$models/cnn-stride2.json" --model cnn "${real_images[@]}"
run_spec "$models/gru-rows.json" --model gru-rows "${real_images[@]}"
run_spec "$models/gru-words.json" --model gru-words --data synthetic
run_spec "$models/lstm-rows.json" --model gru-rows "${real_images[@]}"
run_spec "$models/bigru-words.json" --model gru-words --data synthetic
run_spec "$models/conv1d-words.json" --model gru-words --data synthetic
MODE=l2 TOLERANCE=3e-2 run_spec "$models/resnet.json" --model resnet "${real_images[@]}" \
  --sync-batchnorm
MODE=l2 run_spec "$models/inception.json" --model inception "${real_images[@]}" --sync-batchnorm
# A Keras 3 functional to_json() (exported once, tests/data/keras/make_functional.py), unchanged.
NAME=residual MODE=l2 run_spec "$root/tests/data/keras/residual.keras.json" --model resnet "${real_images[@]}" \
  --sync-batchnorm

[ "$failures" -eq 0 ] || exit 1
echo "spec_models: all shipped specs passed"
