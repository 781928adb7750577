#!/usr/bin/env bash
# A GRU encoder with MultiHeadAttention on variable-length token ids (bench/gru-mha.json: lengths
# 4 to 32, masks from the lengths) trained at R ranks: Mirror's step time (mpirun -np R
# mirror-train, the median step_ms of its JSON log after the warm-up) beside PyTorch's
# (bench/step_torch.py --model gru-mha --ranks R: DistributedDataParallel over gloo, the same
# model with nn.MultiheadAttention and packed GRU sequences), alternating ROUNDS times, in one run.
# Each rank trains batch BATCH on one thread. This machine is shared: compare numbers of one run.
#
#   bench/attention_ranks.sh     env: BUILD_DIR (build), PYTHON (a python with torch; see
#                                     scripts/install_torch_cpu.sh), RANKS (2), ROUNDS (3),
#                                     STEPS (30), WARMUP (5), BATCH (64 per rank)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
python="${PYTHON:-python3}"
ranks="${RANKS:-2}" rounds="${ROUNDS:-3}" steps="${STEPS:-30}" warmup="${WARMUP:-5}"
batch="${BATCH:-64}"
"$python" -c "import torch" 2>/dev/null ||
  { echo "attention_ranks: '$python' cannot import torch (scripts/install_torch_cpu.sh)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The data of step_torch.py's token_batch: vocabulary 1000, 5 classes, lengths 4..32.
"$python" - "$work" $((ranks * batch * (steps + warmup))) <<'PY'
import sys
import numpy as np
rng = np.random.default_rng(7)
n = int(sys.argv[2])
ids = rng.integers(1, 1000, (n, 32)).astype(np.int32)
lengths = rng.integers(4, 33, n)
ids[np.arange(32)[None, :] >= lengths[:, None]] = 0
np.save(sys.argv[1] + "/x.npy", ids)
np.save(sys.argv[1] + "/y.npy", (np.arange(n) % 5).astype(np.int64))
PY
median_of() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "torch: $("$python" -c 'import torch; print(torch.__version__)'); $(nproc --all) cores," \
     "load $(cut -d' ' -f1-3 /proc/loadavg)"
mirror_ms=() torch_ms=()
for ((r = 1; r <= rounds; r++)); do
  rm -f "$work/log.jsonl"
  mpirun -np "$ranks" --oversubscribe "$build/bin/mirror-train" --devices cpu --threads 1 \
    --no-progress --model-spec "$root/bench/gru-mha.json" --train-x "$work/x.npy" \
    --train-y "$work/y.npy" --batch-size $((ranks * batch)) --max-steps $((steps + warmup)) \
    --optimizer adam --lr 1e-3 --log-jsonl "$work/log.jsonl" >"$work/train.out" 2>&1 ||
    { cat "$work/train.out"; exit 1; }
  m="$(python3 -c "import json, statistics, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '\"step_ms\"' in l]
print('%.2f' % statistics.median(s['step_ms'] for s in steps[int(sys.argv[2]):]))" "$work/log.jsonl" "$warmup")"
  t="$("$python" "$root/bench/step_torch.py" --model gru-mha --ranks "$ranks" --batch "$batch" \
    --steps "$steps" --warmup "$warmup" --threads 1)"
  echo "  round $r: mirror gru-mha ranks=$ranks batch=$batch/rank: median $m ms/step"
  echo "  round $r: $t"
  mirror_ms+=("$m")
  torch_ms+=("$(echo "$t" | sed -n 's/.*median \([0-9.]*\) ms\/step.*/\1/p')")
done
mm="$(printf '%s\n' "${mirror_ms[@]}" | median_of)" tm="$(printf '%s\n' "${torch_ms[@]}" | median_of)"
printf 'gru-mha, %d ranks x batch %d, 1 thread each: Mirror %.2f  PyTorch %.2f ms/step  ratio %s\n' \
  "$ranks" "$batch" "$mm" "$tm" "$(awk -v a="$mm" -v b="$tm" 'BEGIN {printf "%.2f", a / b}')"
