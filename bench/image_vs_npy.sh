#!/usr/bin/env bash
# The CNN at 2 ranks from an image folder of PNG files and from the equivalent .npy (the same
# Fashion-MNIST training images, written by loader-bench --write-images): samples/s and the data
# wait of each, side by side in one run.
#
#   bench/image_vs_npy.sh [--build DIR] [--steps N] [--workers N]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build" steps=300 workers=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --workers) workers="$2"; shift 2 ;;
    *) echo "image_vs_npy: unknown argument $1" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$build/bin/loader-bench" --write-images "$work/images" --format png >/dev/null
"$build/bin/loader-bench" --write-images "$work/npy" --format npy >/dev/null
find "$work/images" -type f -exec cat {} + >/dev/null
printf "%-8s %12s %16s %s\n" source samples/s "data wait (s)" "loader"
for source in npy images npy images; do
  if [ "$source" = npy ]; then data=(--train-x "$work/npy/x.npy" --train-y "$work/npy/y.npy")
  else data=(--train-images "$work/images"); fi
  mpirun --oversubscribe --bind-to none -np 2 "$build/bin/mirror-train" --model cnn "${data[@]}" \
    --batch-size 128 --max-steps "$steps" --threads 1 --devices cpu --no-progress \
    --data-workers "$workers" --log-jsonl "$work/$source.jsonl" --overwrite >"$work/out" 2>&1
  rate=$(sed -n 's/.*wall time: .*s, \([0-9.]*\) samples\/s overall.*/\1/p' "$work/out")
  wait=$(python3 -c "
import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r.get('type') == 'step']
print('%.2f' % (sum(r.get('data_wait_ms', 0) for r in steps) / 1000))" "$work/$source.jsonl")
  printf "%-8s %12s %16s %s\n" "$source" "$rate" "$wait" "$(grep -o '[0-9]* loader worker(s) and [0-9]* batches' "$work/out")"
done
