#!/usr/bin/env bash
# Where one training step's time goes, layer by layer, in Mirror and in PyTorch on the same
# model: builds step-bench and prints `step-bench --profile` and bench/profile_torch.py one after
# the other (batch 64, one thread). This machine is shared: compare only one run's tables.
#
#   scripts/profile_step.sh [MODEL]   MODEL: cnn (default), resnet, gru-rows, lstm-rows, ...
#                                     env: BUILD_DIR (build), PYTHON (a python with torch;
#                                     scripts/install_torch_cpu.sh makes one), STEPS (20),
#                                     WARMUP (3), BATCH (64), THREADS (1)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
python="${PYTHON:-python3}"
model="${1:-cnn}"
steps="${STEPS:-20}" warmup="${WARMUP:-3}" batch="${BATCH:-64}" threads="${THREADS:-1}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target step-bench >/dev/null
export OMP_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads"
"$build/bin/step-bench" --model "$model" --batch "$batch" --steps "$steps" --warmup "$warmup" \
  --threads "$threads" --profile
echo
if "$python" -c "import torch" 2>/dev/null; then
  "$python" "$root/bench/profile_torch.py" --model "$model" --batch "$batch" --steps "$steps" \
    --warmup "$warmup" --threads "$threads"
else
  echo "profile_step: '$python' cannot import torch (scripts/install_torch_cpu.sh, then" \
       "PYTHON=.venv-torch/bin/python): PyTorch's side skipped" >&2
fi
