#!/usr/bin/env bash
# The accuracy runs behind the README's table: each model on the full data, once with 1 rank
# and once with 2 ranks at the same global batch. Logs go to ${OUT:-runs}/.
#   scripts/accuracy.sh [cnn|resnet|gru-rows|gru-words|lstm-rows|bigru-words|conv1d-words ...]
# lstm-rows, bigru-words and conv1d-words are the shipped specs (examples/models/) trained on the
# data of gru-rows (Fashion-MNIST rows) and gru-words (the word lists) with the same settings.
# resnet's 2-rank run synchronises BatchNorm (--sync-batchnorm), so both runs see the statistics
# of the same global batch. PRECISION=mixed_bfloat16 (or mixed_float16) trains under that policy
# (docs/mixed_precision.md); its logs are named <model>-<policy>-np<N>. THREADS=N passes
# --threads N to every rank (OpenMP threads that spin at barriers lose most of their time on a
# machine busy with other work: use 1 there). NPS lists the rank counts (default "1 2").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
out="${OUT:-$root/runs}"
mkdir -p "$out"
[ -x "$build/bin/mirror-train" ] || "$root/scripts/build.sh" >/dev/null
models=("$@")
precision="${PRECISION:-float32}"
suffix=""
[ "$precision" = float32 ] || suffix="-$precision"
[ ${#models[@]} -gt 0 ] || models=(gru-rows cnn gru-words)

args_for() {
  case "$1" in
    cnn) echo "--model cnn --epochs 10 --batch-size 64 --lr 1e-3 --schedule cosine" ;;
    resnet)
      echo "--model resnet --epochs 20 --batch-size 64 --optimizer sgd --momentum 0.9 --lr 0.05 --weight-decay 5e-4 --warmup-steps 500 --schedule cosine --augment crop=2,flip" ;;
    gru-rows) echo "--model gru-rows --epochs 20 --batch-size 64 --lr 2e-3 --schedule cosine" ;;
    gru-words) echo "--model gru-words --epochs 2 --batch-size 256 --lr 2e-3 --schedule cosine" ;;
    lstm-rows) echo "$(args_for gru-rows) --model-spec $root/examples/models/lstm-rows.json" ;;
    bigru-words | conv1d-words)
      echo "$(args_for gru-words) --model-spec $root/examples/models/$1.json" ;;
    *) echo "unknown model $1" >&2; exit 2 ;;
  esac
}

for model in "${models[@]}"; do
  for np in ${NPS:-1 2}; do
    read -r -a args <<<"$(args_for "$model")"
    [ "$model" != resnet ] || [ "$np" = 1 ] || args+=(--sync-batchnorm)
    [ -z "${THREADS:-}" ] || args+=(--threads "$THREADS")
    args+=(--precision "$precision")
    log="$out/$model$suffix-np$np"
    echo "== $model, $np rank(s): $log.out"
    start=$(date +%s)
    "$root/launch/mirrorrun" -np "$np" "$build/bin/mirror-train" "${args[@]}" --devices cpu --no-progress \
      --log-jsonl "$log.jsonl" --overwrite >"$log.out" 2>&1
    echo "   $(grep '^test accuracy' "$log.out")  ($(($(date +%s) - start)) s)"
  done
done
