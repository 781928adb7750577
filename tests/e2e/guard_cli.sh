#!/usr/bin/env bash
# Adversarial input and failed runs (issue 17, items 3-8): mirror-train never reports success it
# did not have, never crashes on hostile input, and names the problem and the value.
#   - hostile JSON: 70,000-deep nesting (config and spec), repeated keys, wrong types;
#   - flags: no prefix matching (--epoch), --seed -1, --momentum 5, --threads 100000,
#     --memory limit=99999999999999999999999,
#     --comm-timeout inf, --accumulation larger than the batch, a dense of 10^9 units or a token
#     id of 2*10^9 (refused with the memory estimate before allocating, not std::bad_alloc);
#   - set-up errors exit with code 3 (not 1) and, with 2 ranks, without Open MPI's abort noise
#     (a missing spec, a checkpoint folder of another run, a --resume folder without one);
#   - a run that only skips steps (--lr 1e30) or whose data would overflow float32 fails;
#   - telemetry on a full disk (/dev/full, a 64 KiB tmpfs) warns and the run still reports;
#     a read-only checkpoint folder fails before training; a torn JSON-lines tail is cut on resume;
#   - file errors name the OS reason; CSV cells are quoted short, NUL bytes visible.
# Usage: guard_cli.sh <build dir>. Exit 77 = skipped.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
command -v python3 >/dev/null || { echo "skip: python3 not found"; exit 77; }
unset MIRROR_DEBUG
base=(--model gru-rows --data synthetic --train-limit 64 --test-limit 32 --epochs 1 --devices cpu
      --threads 1 --no-progress)

# expect NAME CODE PATTERN -- ARGS...: mirror-train ARGS exits with CODE within 60 s and prints
# PATTERN (grep -E).
expect() {
  local name="$1" code="$2" pattern="$3"
  shift 4
  local rc
  timeout -k 5 60 "$train" "$@" >"$name.out" 2>&1
  rc=$?
  [ "$rc" -eq "$code" ] || { fail "$name: exit code $rc, expected $code: $(tail -c 600 "$name.out")"; return 1; }
  grep -qE -- "$pattern" "$name.out" || { fail "$name: no '$pattern' in: $(tail -c 600 "$name.out")"; return 1; }
  echo "ok   $name (exit $rc)"
}

python3 - <<'PY' || fail "python3 could not write the fixtures"
import json, struct
def npy(path, descr, shape, values):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d," % d for d in shape))
    header += " " * (64 - (10 + len(header) + 1) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), descr[-2] == "f" and "f" or "q"), *values))
x = [((i * 7 + f * 3) % 11) / 5.0 - 1.0 for i in range(64) for f in range(8)]
npy("x.npy", "<f4", (64, 8), x)
npy("y.npy", "<i8", (64,), [i % 3 for i in range(64)])
npy("xhuge.npy", "<f4", (64, 8), [v * 1e38 for v in x])
npy("yhuge.npy", "<f4", (64,), [3e38 if i % 2 else -3e38 for i in range(64)])
npy("ybig.npy", "<i8", (64,), [20000 if i == 5 else i % 3 for i in range(64)])
json.dump({"layers": [{"type": "dense", "units": 16, "activation": "relu"}, {"type": "dense"}]},
          open("mlp.json", "w"))
json.dump({"layers": [{"type": "dense", "units": 1}]}, open("reg.json", "w"))
json.dump({"layers": [{"type": "dense", "units": 1000000000, "activation": "relu"}, {"type": "dense"}]},
          open("dense1e9.json", "w"))
open("tokens.txt", "w").write("0 1 2 3\n1 4 5 2000000000\n2 3 3\n0 2 2\n")
open("sparse_tokens.txt", "w").write("0 1 2 3\n1 4 5 300000\n2 3 3\n0 2 2\n")
open("deep.json", "w").write("[" * 70000 + "]" * 70000)
open("deepfield.json", "w").write('{"layers": [], "comment": ' + "[" * 80000 + "]" * 80000 + "}")
open("nul.csv", "wb").write(b"a,b,label\n1,2,0\n3,4\x00junk,1\n")
open("wide.csv", "w").write("a,b,label\n1,2,0\n" + "9" * 1000000 + "x,4,1\n")
PY
own=(--devices cpu --threads 1 --no-progress --batch-size 16)

# ---- hostile JSON (item 3)
expect deep-config 2 'nested more than 256 levels deep' -- "${base[@]}" --config deep.json
expect deep-spec 3 'nested more than 256 levels deep' -- --model-spec deep.json --train-x x.npy --train-y y.npy "${own[@]}"
expect deep-ignored-field 3 'nested more than 256 levels deep' -- --model-spec deepfield.json --train-x x.npy --train-y y.npy "${own[@]}"
for f in deep-config deep-spec; do
  [ "$(wc -c <"$f.out")" -lt 2000 ] || fail "$f: the error output is $(wc -c <"$f.out") bytes"
done

# ---- flags and config keys accepted silently before (item 8)
expect prefix-epoch 2 "unrecognised option '--epoch'" -- "${base[@]}" --epoch 2
expect stray-value 2 "unexpected argument 'yes'" -- "${base[@]}" --force-lr yes
expect seed-negative 2 "seed must be a whole number from 0 to 18446744073709551615, got '-1'" -- "${base[@]}" --seed -1
expect momentum 2 'momentum must be in \[0, 1\).*got 5' -- "${base[@]}" --optimizer sgd --momentum 5
expect threads 2 'threads must be from 0 \(automatic\) to 1024, got 100000' -- --data synthetic --threads 100000
echo '{"batch_size": 32, "batch-size": 64}' >twice.json
expect config-same-key 2 "'batch_size' and 'batch-size' are the same setting" -- "${base[@]}" --config twice.json
echo '{"epochs": 1, "epochs": 2}' >repeat.json
expect config-repeated 2 "the key 'epochs' appears twice" -- "${base[@]}" --config repeat.json
echo '{"epochs": true}' >bool.json
expect config-bool 2 "'epochs' must be an integer, got true" -- "${base[@]}" --config bool.json
expect labels-sparse 0 'labels take 4 distinct values but make 20001 classes' -- \
  --model-spec mlp.json --train-x x.npy --train-y ybig.npy "${own[@]}" --max-steps 1
expect tokens-sparse 0 'token ids take 6 distinct values but the largest makes a vocabulary of 300001' -- \
  --model gru-words --train-tokens sparse_tokens.txt --devices cpu --threads 1 --no-progress --batch-size 2 --max-steps 1

# ---- unclear messages (item 7)
expect comm-timeout-inf 2 'comm-timeout must be positive seconds, at most 604800 \(a week\), got inf' -- "${base[@]}" --comm-timeout inf
expect comm-timeout-huge 2 'got 1e\+300' -- "${base[@]}" --comm-timeout 1e300
expect memory-huge 2 "memory: byte count '99999999999999999999999' is more than 1 EiB" -- "${base[@]}" --memory limit=99999999999999999999999
expect accumulation 3 'accumulation 100000000 splits each replica.s batch of 32 samples' -- "${base[@]}" --batch-size 32 --accumulation 100000000
expect open-errno 3 'cannot open nope.npy: No such file or directory' -- --model-spec mlp.json --train-x nope.npy --train-y y.npy "${own[@]}"
expect csv-nul 3 "'4\\\\x00junk' is not a number" -- --model-spec mlp.json --train-csv nul.csv "${own[@]}"
expect csv-wide 3 'characters in all' -- --model-spec mlp.json --train-csv wide.csv "${own[@]}"
[ "$(wc -c <csv-wide.out)" -lt 2000 ] || fail "csv-wide: the error output is $(wc -c <csv-wide.out) bytes"

# Layers too large to build: refused with the estimate before anything is allocated (was
# "fatal: std::bad_alloc"); the --memory limit makes the outcome independent of the host.
expect dense-1e9 3 'the model needs at least 59.60 GiB .* more than --memory limit=1073741824 per replica .*nothing was allocated.* at least 4000000000 parameters' -- \
  --model-spec dense1e9.json --train-x x.npy --train-y y.npy "${own[@]}" --memory limit=1G
# gru-words: embedding 2e9 x 32, GRU 3 x 64 x (32 + 64), dense 3 classes x 64.
expect token-2e9 3 "the model needs at least .* more than --memory limit.*'gru-words' has at least 64000018656 parameters" -- \
  --model gru-words --train-tokens tokens.txt --devices cpu --threads 1 --no-progress --batch-size 2 --memory limit=1G

# ---- runs that reported success but learned nothing (item 4)
expect skipping 1 'training stopped at step [0-9]+ \(epoch 1\): 3 steps in a row were skipped' -- \
  --model cnn --data synthetic --train-limit 256 --test-limit 32 --devices cpu --threads 1 \
  --no-progress --batch-size 16 --lr 1e30 --force-lr --max-skipped-steps 3
expect huge-inputs 3 'training inputs reach \|value\| 1.*e\+38 .*float32 training overflows' -- \
  --model-spec mlp.json --train-x xhuge.npy --train-y y.npy "${own[@]}"
expect huge-targets 3 'training targets reach \|value\| 3e\+38' -- \
  --model-spec reg.json --train-x x.npy --train-y yhuge.npy "${own[@]}"

# ---- telemetry on full or read-only disks (item 5)
expect trace-full 0 'cannot write the trace file ./dev/full.: No space left on device' -- \
  "${base[@]}" --trace /dev/full
grep -q 'weights fingerprint' trace-full.out || fail "trace-full: no summary after the trace failed"
expect log-full 0 "cannot write the metrics log .\/dev/full.: No space left on device" -- \
  "${base[@]}" --log-jsonl /dev/full --overwrite --checkpoint-dir gck-logfull
grep -q 'weights fingerprint' log-full.out || fail "log-full: no summary after the log failed"
ls gck-logfull | grep -q safetensors || fail "log-full: no checkpoint after the log failed"

if [ "$(id -u)" -eq 0 ] && mkdir ro full && mount -t tmpfs -o ro,size=64k tmpfs ro 2>/dev/null; then
  trap 'umount "$work/ro" "$work/full" 2>/dev/null; rm -rf "$work"' EXIT
  expect ckpt-readonly 3 '--checkpoint-dir ro is not writable: .*Read-only file system' -- "${base[@]}" --checkpoint-dir ro
  grep -q '^epoch 1' ckpt-readonly.out && fail "ckpt-readonly: training ran before the error"
  if mount -t tmpfs -o size=64k tmpfs full; then
    # A log that fills the disk mid-run: a warning, whole lines only, the run still finishes.
    expect log-disk-full 0 'cannot write the metrics log .*No space left on device' -- \
      --model gru-rows --data synthetic --train-limit 4096 --test-limit 32 --epochs 2 --devices cpu \
      --threads 1 --no-progress --batch-size 8 --log-jsonl full/log.jsonl
    [ "$(tail -c 1 full/log.jsonl | od -An -c | tr -d ' ')" = '\n' ] || fail "log-disk-full: a torn last line"
    python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' full/log.jsonl ||
      fail "log-disk-full: a line that is not JSON"
  fi
else
  echo "skip ckpt-readonly, log-disk-full: needs root and tmpfs mounts"
fi

# A torn last line (a crash before lines were written whole) is cut when --resume appends.
"$train" "${base[@]}" --checkpoint-dir gck-torn --log-jsonl torn.jsonl --max-steps 1 >/dev/null 2>&1 ||
  fail "torn: the first run failed"
printf '{"type": "step", "ste' >>torn.jsonl
expect torn-resume 0 'cut a torn last line \(21 bytes\)' -- "${base[@]}" --checkpoint-dir gck-torn --resume gck-torn --log-jsonl torn.jsonl
python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' torn.jsonl ||
  fail "torn-resume: the log still holds a torn line"

# ---- set-up errors with 2 ranks: exit code 3 on every rank, no MPI_Abort noise (items 6, 7)
if command -v mpirun >/dev/null; then
  timeout -k 5 120 mpirun --oversubscribe --bind-to none -np 2 "$train" --model-spec nope.json \
    --data synthetic --devices cpu --no-progress >mpi-setup.out 2>&1
  rc=$?
  [ "$rc" -eq 3 ] || fail "mpi-setup: exit code $rc, expected 3: $(tail -5 mpi-setup.out)"
  grep -q 'fatal: model spec nope.json' mpi-setup.out || fail "mpi-setup: no message"
  grep -qE 'ORTE_ERROR_LOG|MPI_ABORT' mpi-setup.out && fail "mpi-setup: Open MPI abort noise: $(grep -m2 -E 'ORTE|ABORT' mpi-setup.out)"
  [ "$failures" -eq 0 ] && echo "ok   mpi-setup (exit $rc, no abort noise)"
  # Rank 0's checkpoint checks are agreed too: a folder of another run, a --resume without one.
  "$train" "${base[@]}" --checkpoint-dir gck-other --max-steps 1 >/dev/null 2>&1 || fail "gck-other: the first run failed"
  mkdir -p empty-ck
  for case in "foreign:already holds 1 checkpoint:--checkpoint-dir gck-other" \
              "no-checkpoint:--resume empty-ck holds no checkpoint:--resume empty-ck"; do
    IFS=: read -r name pattern flags <<<"$case"
    # shellcheck disable=SC2086
    timeout -k 5 120 mpirun --oversubscribe --bind-to none -np 2 "$train" "${base[@]}" $flags >"mpi-$name.out" 2>&1
    rc=$?
    if [ "$rc" -ne 3 ] || ! grep -q "fatal: .*$pattern" "mpi-$name.out" || grep -q MPI_ABORT "mpi-$name.out"; then
      fail "mpi-$name: exit code $rc (expected 3, '$pattern', no MPI_ABORT): $(tail -3 "mpi-$name.out")"
    else
      echo "ok   mpi-$name (exit 3, no abort noise)"
    fi
  done
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "guard_cli: all cases passed"
