#!/usr/bin/env bash
# Same command, same seed, same weights: every built-in model, at cpu:2 (in-process replicas),
# -np 2 (one replica per rank) and -np 2 --devices cpu:2 (both), run several times, gives one
# weights fingerprint and one test loss per configuration; so do the ResNet with synchronized
# BatchNorm, under mixed_bfloat16 and with small gradient buckets (every bucket overlapped).
# Runs differ in what should not matter: one is pinned to one core (taskset), one shares the
# cores with a busy loop. OMP_NUM_THREADS is unset, as a user's shell has it, so the process
# default (all cores) differs from --threads 1 (Note [Replica threads] in
# distributed/strategy.cpp).
# Then a ResNet with unsynchronized BatchNorm stopped off its checkpoint schedule and resumed
# ends bit for bit where the uninterrupted run does (Note [Buffers across replicas]).
# Usage: determinism.sh <build dir> [runs] (DETERMINISM_RUNS, default 5).
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$1"
e2e_need_mpirun
unset OMP_NUM_THREADS
runs="${2:-${DETERMINISM_RUNS:-5}}"
common=(--train-limit 192 --test-limit 48 --batch-size 32 --max-steps 3 --seed 11 --threads 1
        --no-progress --data synthetic --comm-timeout 120)

# run_once LAYOUT RUN ARGS...: the fingerprint and test loss of one run (one line).
run_once() {
  local layout="$1" run="$2" out="run.out" err="run.err"
  shift 2
  local cmd=()
  case "$layout" in
    cpu2) cmd=("$train" --devices cpu:2) ;;
    np2) cmd=(mpirun --oversubscribe --bind-to none -np 2 "$train" --devices cpu) ;;
    np2cpu2) cmd=(mpirun --oversubscribe --bind-to none -np 2 "$train" --devices cpu:2) ;;
  esac
  local pin=()
  [ "$run" = 2 ] && pin=(taskset -c 0)
  local busy=""
  if [ "$run" = 3 ]; then
    (while :; do :; done) &
    busy=$!
  fi
  timeout -k 10 300 "${pin[@]}" "${cmd[@]}" "$@" "${common[@]}" >"$out" 2>"$err"
  local rc=$?
  [ -n "$busy" ] && kill "$busy" 2>/dev/null && wait "$busy" 2>/dev/null
  if [ "$rc" != 0 ]; then
    echo "exit $rc: $(grep -v '^\[mirror\] rank' "$err" | tail -2 | tr '\n' ' ')"
    return
  fi
  echo "$(grep -o 'weights fingerprint: [0-9a-f]*' "$out" | tail -1) $(grep -o 'test loss: [0-9.]*' "$out" | tail -1)"
}

configs=()
for model in cnn cnn-stride2 resnet inception gru-rows lstm-rows gru-words bigru-words conv1d-words; do
  for layout in cpu2 np2 np2cpu2; do configs+=("$layout --model $model"); done
done
configs+=("cpu2 --model resnet --sync-batchnorm" "np2cpu2 --model resnet --sync-batchnorm"
          "cpu2 --model resnet --precision mixed_bfloat16" "np2 --model cnn --precision mixed_bfloat16"
          "cpu2 --model gru-rows --precision mixed_bfloat16"
          "np2cpu2 --model resnet --bucket-mb 0.02 --first-bucket-mb 0.01")

bf16=1
e2e_cpu_bf16 || bf16=0
for config in "${configs[@]}"; do
  read -r -a words <<<"$config"
  if ((!bf16)) && [[ "$config" == *mixed_bfloat16* ]]; then
    echo "skip $config: this CPU (or ONEDNN_MAX_CPU_ISA) has no AVX-512 BF16 for mixed_bfloat16"
    continue
  fi
  declare -A seen=()
  first=""
  for run in $(seq 1 "$runs"); do
    got=$(run_once "${words[0]}" "$run" "${words[@]:1}")
    [ -z "$first" ] && first="$got"
    seen["$got"]=$(( ${seen["$got"]:-0} + 1 ))
  done
  if [ "${#seen[@]}" -ne 1 ] || [[ "$first" != "weights fingerprint: "* ]]; then
    summary=""
    for k in "${!seen[@]}"; do summary+=" [${seen[$k]}x $k]"; done
    fail "$config: $runs runs gave ${#seen[@]} result(s):$summary"
  else
    echo "ok   $config: $runs runs, $first"
  fi
  unset seen
done

# A stop off the --checkpoint-every schedule (step 13 of a schedule of 4) and a resume.
bn=(mpirun --oversubscribe --bind-to none -np 2 "$train" --model resnet --devices cpu
    --train-limit 240 --test-limit 48 --batch-size 48 --epochs 3 --seed 7 --checkpoint-every 4
    --threads 1 --no-progress --data synthetic --keep 0)
"${bn[@]}" --checkpoint-dir "$PWD/full" >full.out 2>full.err || fail "uninterrupted BN run: $(tail -2 full.err)"
"${bn[@]}" --checkpoint-dir "$PWD/part" --max-steps 13 >part.out 2>part.err || fail "stopped BN run: $(tail -2 part.err)"
"${bn[@]}" --checkpoint-dir "$PWD/part" --resume "$PWD/part" >resumed.out 2>resumed.err ||
  fail "resumed BN run: $(tail -2 resumed.err)"
want=$(grep -o 'weights fingerprint: [0-9a-f]*' full.out)
got=$(grep -o 'weights fingerprint: [0-9a-f]*' resumed.out)
if [ -n "$want" ] && [ "$want" = "$got" ]; then
  echo "ok   BatchNorm run stopped at step 13 and resumed: $got"
else
  fail "BatchNorm run stopped at step 13 and resumed: '$got', uninterrupted '$want'"
fi
[ -f part/ckpt-000000000013.safetensors ] || fail "the stopped run wrote no checkpoint at step 13"

[ "$failures" -eq 0 ] || exit 1
