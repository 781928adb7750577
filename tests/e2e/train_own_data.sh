#!/usr/bin/env bash
# mirror-train on the user's own model and data: a model spec JSON trained on .npy arrays and on
# a CSV file, under 1 and 2 ranks with the same global batch. Checks that the loss falls, that
# the 1- and 2-rank weights agree (the final checkpoints, relative error <= 1e-4), and that a
# spec that does not fit the data is a clear error. The files are made here by python3 without
# numpy (the .npy bytes are written by hand); exit 77 (skipped) when python3 is missing.
set -euo pipefail
build="$1"
train="$build/bin/mirror-train"
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun_() { mpirun --oversubscribe --bind-to none -np "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
fingerprint() { grep -o 'weights fingerprint: [0-9a-f]*' "$1" | awk '{print $3}'; }

python3 - "$work" <<'PY'
import json, random, struct, sys
out = sys.argv[1]

def npy(path, descr, shape, values):
    """A NumPy .npy file, version 1.0, little-endian, C order."""
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d," % d for d in shape))
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    fmt = {"<f4": "f", "<i8": "q"}[descr]
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))

rng = random.Random(7)
features, classes = 8, 3
def blobs(n):
    x, y = [], []
    for i in range(n):
        label = rng.randrange(classes)
        x += [(1.5 if f % classes == label else -0.5) + rng.gauss(0, 0.7) for f in range(features)]
        y.append(label)
    return x, y

for split, n in (("train", 240), ("test", 60)):
    x, y = blobs(n)
    npy("%s/%s_x.npy" % (out, split), "<f4", (n, features), x)
    npy("%s/%s_y.npy" % (out, split), "<i8", (n,), y)
    with open("%s/%s.csv" % (out, split), "w") as f:
        f.write(",".join(["f%d" % i for i in range(features)] + ["label"]) + "\n")
        for i in range(n):
            f.write(",".join("%.6f" % v for v in x[i * features:(i + 1) * features]) + ",%d\n" % y[i])

json.dump({"name": "small-mlp", "description": "one hidden layer", "layers": [
    {"type": "dense", "units": 16, "activation": "relu"},
    {"type": "dense"}]}, open(out + "/mlp.json", "w"))
# States 2 outputs: does not fit 3 classes (more outputs than classes train, as in Keras).
json.dump({"layers": [{"type": "dense", "units": 2}]}, open(out + "/wrong.json", "w"))
PY

common=(--epochs 4 --batch-size 24 --lr 0.01 --threads 1 --devices cpu
        --no-progress --seed 3)
npy=(--train-x "$work/train_x.npy" --train-y "$work/train_y.npy" --test-x "$work/test_x.npy"
     --test-y "$work/test_y.npy")
csv=(--train-csv "$work/train.csv" --test-csv "$work/test.csv" --label-column label)

# compare_checkpoints DIR_A DIR_B: the newest checkpoints hold the same tensors within 1e-4.
compare_checkpoints() { python3 "$(dirname "${BASH_SOURCE[0]}")/compare_checkpoints.py" "$1" "$2" 1e-4; }

# check_run NAME FLAGS...: trains under 1 and 2 ranks, checks the log and the weights.
check_run() {
  local name="$1"; shift
  echo "== $name: 1 rank"
  "$train" "${common[@]}" "$@" --log-jsonl "$work/$name.jsonl" --checkpoint-dir "$work/$name-1" \
    >"$work/$name-1.out" 2>&1 || { cat "$work/$name-1.out"; fail "$name 1-rank run"; }
  grep -q '^test accuracy: ' "$work/$name-1.out" || { cat "$work/$name-1.out"; fail "$name: no test accuracy"; }
  # The spec's own name and description, not the file's stem.
  grep -q '^\[mirror\] model small-mlp (from .*/mlp.json: "one hidden layer"): ' "$work/$name-1.out" ||
    { cat "$work/$name-1.out"; fail "$name: spec name"; }
  python3 - "$work/$name.jsonl" <<'PY'
import json, sys
epochs = [r for r in map(json.loads, open(sys.argv[1])) if r["type"] == "epoch"]
assert len(epochs) == 4, epochs
first, last = epochs[0]["loss"], epochs[-1]["loss"]
print("loss %.4f -> %.4f, test accuracy %.4f" % (first, last, epochs[-1]["test_accuracy"]))
assert last < 0.7 * first, (first, last)
assert epochs[-1]["test_accuracy"] > 0.6, epochs[-1]
PY
  echo "== $name: 2 ranks, same global batch"
  mpirun_ 2 "$train" "${common[@]}" "$@" --checkpoint-dir "$work/$name-2" >"$work/$name-2.out" 2>&1 ||
    { cat "$work/$name-2.out"; fail "$name 2-rank run"; }
  grep -q 'replicas: 2' "$work/$name-2.out" || fail "$name: not 2 replicas"
  echo "fingerprints: 1 rank $(fingerprint "$work/$name-1.out"), 2 ranks $(fingerprint "$work/$name-2.out")"
  compare_checkpoints "$work/$name-1" "$work/$name-2" || fail "$name: 1- and 2-rank weights differ"
}

check_run npy --model-spec "$work/mlp.json" "${npy[@]}"
check_run csv --model-spec "$work/mlp.json" "${csv[@]}"

echo "== the same keys in a --config file"
printf '{"model_spec": "%s", "train_csv": "%s", "label-column": "label", "csv_header": "yes", "epochs": 1}\n' \
  "$work/mlp.json" "$work/train.csv" >"$work/config.json"
"$train" --config "$work/config.json" --devices cpu --threads 1 --no-progress >"$work/config.out" 2>&1 ||
  { cat "$work/config.out"; fail "--config with data-file keys"; }
grep -q '^no test data; last epoch: loss ' "$work/config.out" || { cat "$work/config.out"; fail "config run without test split"; }

echo "== a spec that does not fit the data is a clear error"
set +e
"$train" "${common[@]}" --model-spec "$work/wrong.json" "${npy[@]}" >"$work/err.out" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] || fail "a 2-output spec trained on 3 classes"
cat "$work/err.out"
grep -q 'does not fit' "$work/err.out" && grep -q '2' "$work/err.out" && grep -q '3' "$work/err.out" ||
  fail "error does not name both"
echo "all train_own_data checks passed"
