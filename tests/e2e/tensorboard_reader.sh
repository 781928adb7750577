#!/usr/bin/env bash
# mirror-train --tensorboard read back with TensorBoard's own event reader. Skipped (exit 77)
# when the python module tensorboard is missing or the build has no protobuf: this test never
# downloads anything.
set -euo pipefail
build="$1"
train="$build/bin/mirror-train"
python3 -c "import tensorboard" 2>/dev/null ||
  { echo "SKIP: python module tensorboard not installed (pip install tensorboard)"; exit 77; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
if ! "$train" --model gru-rows --data synthetic --train-limit 128 --test-limit 32 --batch-size 32 \
  --threads 1 --devices cpu --no-progress --seed 3 --epochs 2 --tensorboard "$work/tb" \
  --log-jsonl "$work/log.jsonl" >"$work/a.out" 2>&1; then
  grep -q "needs a build with protobuf" "$work/a.out" && { echo "SKIP: built without protobuf"; exit 77; }
  cat "$work/a.out"; echo "FAIL: run with --tensorboard" >&2; exit 1
fi
python3 - "$work/tb" "$work/log.jsonl" <<'PY'
import json, math, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1])
acc.Reload()
tags = set(acc.Tags()["scalars"])
need = {"train/loss", "train/accuracy", "train/lr", "train/samples_per_s",
        "train/exposed_comm_ms", "train/data_wait_ms", "epoch/loss", "test/accuracy"}
assert need <= tags, (need - tags, tags)
log = [json.loads(l) for l in open(sys.argv[2])]
want = {r["step"]: r["loss"] for r in log if r["type"] == "step"}
got = {s.step: s.value for s in acc.Scalars("train/loss")}
assert sorted(got) == sorted(want) == list(range(1, 9)), (sorted(got), sorted(want))
assert all(math.isclose(got[k], want[k], rel_tol=1e-6) for k in want), (got, want)
print("tensorboard reader: %d scalar tags, %d steps" % (len(tags), len(got)))
PY
