#!/usr/bin/env bash
# mirror-train rejects bad input fast with a clear message (issue "Input validation"): batch 0 /
# negative / larger than the data / too big for the host's memory, non-finite or absurd --lr,
# negative weight decay, 1.5 epochs in a --config, --config DIR, a spec whose input shape
# disagrees with the data (at set-up, before any step), a .gz file that is not gzip, a word list
# with NUL bytes, missing files and folders given as files (the path and the system's reason),
# ranks with different configurations (the first differing key, both values).
# Messages carry no [file.cpp:123] unless --debug. Usage: input_checks.sh <build dir>.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
unset MIRROR_DEBUG
base=(--model gru-rows --data synthetic --train-limit 64 --test-limit 32 --epochs 1 --devices cpu
      --threads 1 --no-progress)

# expect NAME CODE PATTERN -- ARGS...: mirror-train ARGS exits with CODE (any non-zero: "nz")
# within 60 s and prints PATTERN (grep -E); no source location unless --debug is among ARGS.
expect() {
  local name="$1" code="$2" pattern="$3"
  shift 4
  local start=$SECONDS rc
  timeout -k 5 60 "$train" "$@" >"$name.out" 2>&1
  rc=$?
  if [ "$code" = nz ]; then
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { fail "$name: exit code $rc"; return; }
  else
    [ "$rc" -eq "$code" ] || { fail "$name: exit code $rc, expected $code"; tail -3 "$name.out"; return; }
  fi
  grep -qE -- "$pattern" "$name.out" || { fail "$name: no '$pattern' in: $(tail -3 "$name.out")"; return; }
  if [[ " $* " != *" --debug "* ]] && grep -qE '\[[a-z_/]+\.(cpp|h):[0-9]+\]' "$name.out"; then
    fail "$name: a source location in a user-facing message: $(grep -E '\.cpp:[0-9]' "$name.out")"
    return
  fi
  echo "ok   $name (exit $rc in $((SECONDS - start)) s)"
}

expect batch-zero 2 'batch-size must be a positive number of samples, got 0' -- "${base[@]}" --batch-size 0
expect batch-negative 2 'got -3' -- "${base[@]}" --batch-size -3
expect per-replica-zero 2 'batch-per-replica must be a positive' -- "${base[@]}" --batch-per-replica 0
expect lr-inf 2 'lr must be a positive finite number' -- "${base[@]}" --lr inf
expect lr-nan 2 'lr must be a positive finite number' -- "${base[@]}" --lr nan
expect lr-absurd 2 'force-lr' -- "${base[@]}" --lr 50
expect weight-decay 2 'weight-decay must be >= 0' -- "${base[@]}" --weight-decay -0.01
echo '{"epochs": 1.5}' >epochs.json
expect config-fraction 2 "'epochs' must be an integer, got 1.5" -- "${base[@]}" --config epochs.json
mkdir confdir
expect config-dir 2 'confdir is a directory' -- "${base[@]}" --config confdir
expect debug-location 2 'give a JSON file \[tools/train_flags\.cpp:[0-9]+\]' -- "${base[@]}" --config confdir --debug

# Runaway memory: a batch larger than the data, and a step larger than the memory allowed.
expect batch-million 3 'global batch \(1000000 samples\) is larger than the training set \(2000 samples\)' -- \
  --model gru-rows --data synthetic --train-limit 2000 --test-limit 32 --devices cpu --no-progress \
  --batch-size 1000000
expect step-memory 3 'needs at least .* of host memory, more than --memory limit=.* --accumulation' -- \
  --model cnn --data synthetic --train-limit 4096 --test-limit 32 --devices cpu --no-progress \
  --batch-size 4096 --memory limit=64M
expect step-memory-fits 0 'weights fingerprint' -- "${base[@]}" --batch-size 32 --memory limit=64M

# A spec whose input shape is not the data's: refused at set-up, before any step runs.
python3 - <<'PY' || fail "python3 could not write the fixtures"
import json, struct
def npy(path, descr, shape, values):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d," % d for d in shape))
    header += " " * (64 - (10 + len(header) + 1) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), descr[-2] == "f" and "f" or "q"), *values))
npy("x.npy", "<f4", (40, 8), [0.5] * 320)
npy("y.npy", "<i8", (40,), [i % 2 for i in range(40)])
json.dump({"input_shape": [10], "layers": [{"type": "dense", "units": 2}]}, open("spec.json", "w"))
PY
expect spec-shape nz '10.*8|8.*10' -- --model-spec spec.json --train-x x.npy --train-y y.npy \
  --devices cpu --no-progress --batch-size 8
grep -q '^\[mirror\] model ' spec-shape.out && fail "spec-shape: the mismatch was found after set-up"

# Note [Spec's output width]: a last dense wider than the labels' classes trains (as in Keras),
# warning which classes no label uses; the checkpoint's model keeps its 5 outputs. A narrower
# one is refused.
python3 - <<'PY'
import json, struct
header = "{'descr': '<i8', 'fortran_order': False, 'shape': (40,), }"
header += " " * (64 - (10 + len(header) + 1) % 64) + "\n"
with open("y3.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack("<40q", *[i % 3 for i in range(40)]))
json.dump({"layers": [{"type": "dense", "units": 5}]}, open("wide.json", "w"))
json.dump({"layers": [{"type": "dense", "units": 2}]}, open("narrow.json", "w"))
PY
expect wide-head 0 'ends in 5 outputs, but the training labels make 2 classes: classes 2\.\.4 are never a label' \
  -- --model-spec wide.json --train-x x.npy --train-y y.npy --devices cpu --no-progress \
  --batch-size 8 --epochs 1 --checkpoint-dir wide-ck
"$build/bin/mirror-predict" --checkpoint wide-ck --input x.npy --output wide-p.npy >wide-p.out 2>&1 &&
  head -c 128 wide-p.npy | grep -q "(40, 5)" || fail "wide-head: predictions are not [40, 5]: $(cat wide-p.out)"
expect narrow-head nz "field 'units': the spec states 2 but the data has 3 outputs" -- \
  --model-spec narrow.json --train-x x.npy --train-y y3.npy --devices cpu --no-progress --batch-size 8

# A Fashion-MNIST folder whose .gz files are not gzip.
mkdir fm
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  echo "this is not gzip" >"fm/$f.gz"
done
expect not-gzip 3 'not gzip' -- --model cnn --data real --data-dir fm --devices cpu --no-progress
grep -q 'IDX magic' not-gzip.out && fail "not-gzip: reported as a wrong IDX magic"

# A word list with a NUL byte.
mkdir dict
printf 'apple\nbanana\ncherry\n' >dict/american-english
printf 'apfel\nbir\0ne\nkirsche\n' >dict/ngerman
expect word-nul 3 'ngerman: contains a NUL byte at line 2' -- --model gru-words --dict-dir dict \
  --devices cpu --no-progress

# A file that cannot be read names it and the system's reason, for every kind of input file.
nofile='No such file or directory'
expect missing-csv 3 "cannot open /nonexistent/train.csv: $nofile" -- --train-csv /nonexistent/train.csv \
  --devices cpu --no-progress
expect missing-npy 3 "cannot open /nonexistent/x.npy: $nofile" -- --train-x /nonexistent/x.npy \
  --train-y y.npy --devices cpu --no-progress
expect missing-tokens 3 "cannot open /nonexistent/t.txt: $nofile" -- --train-tokens /nonexistent/t.txt \
  --devices cpu --no-progress
expect missing-spec 3 "model spec /nonexistent/m.json: cannot open the file: $nofile" -- "${base[@]}" \
  --model-spec /nonexistent/m.json
expect missing-config 2 "cannot read --config /nonexistent/c.json: $nofile" -- "${base[@]}" \
  --config /nonexistent/c.json
expect missing-fmnist 3 "Fashion-MNIST file not found: /nonexistent/train-images-idx3-ubyte.gz" -- \
  --model cnn --data real --data-dir /nonexistent --devices cpu --no-progress
mkdir adir
expect dir-csv 3 "cannot read adir: Is a directory" -- --train-csv adir --devices cpu --no-progress
expect dir-spec 3 "model spec adir: cannot read the file: Is a directory" -- "${base[@]}" --model-spec adir
expect resume-file 3 "resume x.npy: not a folder; give the checkpoint folder" -- "${base[@]}" --resume x.npy

# Ranks given different configurations: the first differing key and both values.
if command -v mpirun >/dev/null; then
  cat >per_rank.sh <<EOS
#!/usr/bin/env bash
lr=0.001; [ "\${OMPI_COMM_WORLD_RANK:-0}" = 1 ] && lr=0.002
exec "$train" ${base[*]} --lr "\$lr"
EOS
  chmod +x per_rank.sh
  timeout -k 5 120 mpirun --oversubscribe --bind-to none -np 2 ./per_rank.sh >ranks.out 2>&1
  rc=$?
  [ "$rc" -ne 0 ] || fail "ranks with different --lr ran"
  grep -q "training configuration differs across ranks: key 'lr' is 0.001 on rank 0 and 0.002 on rank 1" ranks.out &&
    echo "ok   ranks-differ (exit $rc)" || fail "ranks-differ: $(grep -m2 differs ranks.out)"
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "input_checks: all cases passed"
