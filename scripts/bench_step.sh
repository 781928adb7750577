#!/usr/bin/env bash
# Builds bench step-bench and runs it side by side with its PyTorch twin (bench/step_torch.py):
# one training step (forward, loss, backward, Adam) of the CNN and the row GRU, batch 64, one
# thread, alternating Mirror and PyTorch ROUNDS times per model, then prints both medians and
# the ratio. This machine is shared: compare only numbers from the same run.
#
#   scripts/bench_step.sh            env: BUILD_DIR (default build), PYTHON (a python with torch),
#                                         ROUNDS (3), STEPS (20), WARMUP (3), BATCH (64),
#                                         THREADS (1), MODELS ("cnn gru-rows"; also lstm-rows,
#                                         bigru-rows, bilstm-rows, resnet),
#                                         PRECISION (float32; mixed_bfloat16: Mirror's policy
#                                         against torch.autocast bfloat16)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
python="${PYTHON:-python3}"
rounds="${ROUNDS:-3}" steps="${STEPS:-20}" warmup="${WARMUP:-3}" batch="${BATCH:-64}"
threads="${THREADS:-1}" models="${MODELS:-cnn gru-rows}"

if ! "$python" -c "import torch" 2>/dev/null; then
  echo "bench_step: '$python' cannot import torch; install it (pip install torch, or apt-get" \
       "install python3-torch) and/or set PYTHON=/path/to/python" >&2
  exit 1
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target step-bench >/dev/null

export OMP_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads"
common=(--batch "$batch" --steps "$steps" --warmup "$warmup" --threads "$threads"
        --precision "${PRECISION:-float32}")
median_of() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ms_of() { sed -n 's/.*median \([0-9.]*\) ms\/step.*/\1/p'; }
cpu_of() { sed -n 's/.*cpu \([0-9.]*\) ms\/step.*/\1/p'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

echo "torch: $("$python" -c 'import torch; print(torch.__version__)'); host: $(nproc --all) cores," \
     "load $(cut -d' ' -f1-3 /proc/loadavg)"
for model in $models; do
  mirror_ms=() torch_ms=() mirror_cpu=() torch_cpu=()
  for ((r = 1; r <= rounds; r++)); do
    m="$("$build/bin/step-bench" --model "$model" "${common[@]}")"
    t="$("$python" "$root/bench/step_torch.py" --model "$model" "${common[@]}")"
    echo "  round $r: $m"
    echo "  round $r: $t"
    mirror_ms+=("$(echo "$m" | ms_of)")
    torch_ms+=("$(echo "$t" | ms_of)")
    mirror_cpu+=("$(echo "$m" | cpu_of)")
    torch_cpu+=("$(echo "$t" | cpu_of)")
  done
  mm="$(printf '%s\n' "${mirror_ms[@]}" | median_of)" tm="$(printf '%s\n' "${torch_ms[@]}" | median_of)"
  mc="$(printf '%s\n' "${mirror_cpu[@]}" | median_of)" tc="$(printf '%s\n' "${torch_cpu[@]}" | median_of)"
  printf '%-9s batch %d, %d thread(s): wall Mirror %8.2f  PyTorch %8.2f ms/step  ratio %s | cpu Mirror %8.2f  PyTorch %8.2f ms/step  ratio %s\n' \
    "$model" "$batch" "$threads" "$mm" "$tm" "$(ratio "$mm" "$tm")" "$mc" "$tc" "$(ratio "$mc" "$tc")"
done
