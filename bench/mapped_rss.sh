#!/usr/bin/env bash
# Peak resident memory per rank against the size of a mapped .npy (Note [Flat memory]): the same
# model and steps on uint8 [N, 1, 28, 28] noise of each size given, 2 ranks, peak RSS of every
# rank from /usr/bin/time. With mapped data the peaks should not depend on the data's size.
#
#   bench/mapped_rss.sh [--build DIR] [--steps N] [SIZE_MB ...]      (default sizes: 600 6000)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build" steps=300 sizes=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    *) sizes+=("$1"); shift ;;
  esac
done
[ ${#sizes[@]} -gt 0 ] || sizes=(600 6000)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
work="$(mktemp -d "${TMPDIR:-/tmp}/mapped-rss-XXXXXX")"
trap 'rm -rf "$work"' EXIT
printf "%8s %10s %22s %10s %12s\n" "data MB" samples "peak RSS per rank (MB)" "wall s" samples/s
for mb in "${sizes[@]}"; do
  python3 "$root/tests/e2e/make_data_sources.py" --noise "$work" "$mb" >/dev/null
  samples=$((mb * 1000000 / 784))
  start=$(date +%s.%N)
  mpirun --oversubscribe --bind-to none -np 2 /usr/bin/time -f "peak-rss-kb %M" "$build/bin/mirror-train" \
    --model cnn --train-x "$work/x.npy" --train-y "$work/y.npy" --batch-size 128 \
    --max-steps "$steps" --threads 1 --devices cpu --no-progress >"$work/out" 2>&1
  wall=$(echo "$(date +%s.%N) - $start" | bc)
  peaks=$(awk '/peak-rss-kb/ {printf "%s%.0f", sep, $2 / 1024; sep=" / "}' "$work/out")
  rate=$(sed -n 's/.*wall time: .*s, \([0-9.]*\) samples\/s overall.*/\1/p' "$work/out")
  printf "%8d %10d %22s %10.1f %12s\n" "$mb" "$samples" "$peaks" "$wall" "$rate"
  rm -f "$work/x.npy" "$work/y.npy"
done
