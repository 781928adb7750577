#!/usr/bin/env bash
# Stop signals at random moments never corrupt a run. Each trial picks, at random (seeded):
#   - a job: 2 ranks, 3 ranks, or one rank driving 2 in-process replicas (cpu:2);
#   - a model: the row GRU, the TF-doc CNN (its 12.8 MB dense kernel is a bucket of its own) or
#     the ResNet (BatchNorm whose moving statistics each replica updates from its own shard, so
#     a stop at any step must checkpoint what every replica holds);
#   - a launcher: plain mpirun or launch/mirrorrun;
#   - a target: one rank, mpirun (SIGUSR1 only: a signalled mpirun SIGKILLs its ranks 1 s after
#     any other signal, by Open MPI's design, see README) or mirrorrun;
#   - a signal: SIGTERM, SIGINT or SIGUSR1;
#   - a moment: start-up (as soon as every rank has its handlers), a random training step, or an
#     epoch's end (evaluation and checkpoint writing).
# Every trial must exit 5 (stopped, checkpoint written) or 0 (it finished first), print no sign
# of memory corruption, divergence or a sanitizer report, and, resumed from its checkpoints,
# end with the weights of the uninterrupted run of the same job (bit-exact).
# Usage: stop_stress.sh <build dir> [trials]. STOP_STRESS_TRIALS (default 10) and
# STOP_STRESS_SEED (default 1) also set them; STOP_STRESS_MODELS narrows the models (a TSan build
# trains the CNNs very slowly: STOP_STRESS_MODELS=gru-rows). A sanitizer build is tested by
# passing its build dir (its reports fail the trial). Exit 77 = skipped.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$1"
e2e_need_mpirun
trials="${2:-${STOP_STRESS_TRIALS:-10}}"
RANDOM="${STOP_STRESS_SEED:-1}"
fingerprint() { grep -o 'weights fingerprint: [0-9a-f]*' "$1" | tail -1 | awk '{print $3}'; }
pick() { local a=("$@"); echo "${a[RANDOM % ${#a[@]}]}"; }
bad_signs='AddressSanitizer|ThreadSanitizer|LeakSanitizer|runtime error:|corrupted|double free|free\(\)|malloc\(\)|diverged|Segmentation|Aborted|signal 6|signal 11|ORTE_ERROR_LOG'

# job_args JOB MODEL: the mirror-train flags of a job, on one line (global batch a multiple of
# its replicas).
job_args() {
  local devices=cpu
  [ "$1" = cpu2 ] && devices=cpu:2
  echo "--model $2 --train-limit $(samples_of "$2") --data synthetic --test-limit 128 --batch-per-replica 16 --epochs 3" \
    "--threads 1 --no-progress --seed 3 --comm-timeout 60 --devices $devices"
}
samples_of() { if [ "$1" = gru-rows ]; then echo 1536; else echo 192; fi; }
ranks_of() { case "$1" in np2) echo 2 ;; np3) echo 3 ;; cpu2) echo 1 ;; esac; }
# launch LAUNCHER JOB ARGS...: the command line of a job.
launch() {
  local launcher="$1" job="$2"
  shift 2
  if [ "$launcher" = mirrorrun ]; then
    echo "$mirrorrun" -np "$(ranks_of "$job")" "$train" "$@"
  else
    echo timeout -k 10 300 mpirun --oversubscribe --bind-to none -np "$(ranks_of "$job")" "$train" "$@"
  fi
}

# The uninterrupted run of each job the trials use, computed once.
declare -A want
reference() {
  local key="$1-$2"
  [ -n "${want[$key]:-}" ] && return
  # shellcheck disable=SC2046
  $(launch mpirun "$1") $(job_args "$1" "$2") >"ref-$key.out" 2>"ref-$key.err" ||
    fail "reference $key exited $?: $(tail -3 "ref-$key.err")"
  want[$key]=$(fingerprint "ref-$key.out")
}

# handlers_in RANKS: true once RANKS mirror-train processes of this trial catch SIGTERM
# (bit 15 of SigCgt in /proc/PID/status): before that a signal would kill them by default.
handlers_in() {
  local n=0 pid mask
  for pid in $(pgrep -f "^$train .*--checkpoint-dir $PWD/t$t/ck"); do
    mask=$(awk '/^SigCgt/ {print $2}' "/proc/$pid/status" 2>/dev/null) || continue
    [ -n "$mask" ] && (( (16#$mask >> 14) & 1 )) && n=$((n + 1))
  done
  [ "$n" -ge "$1" ]
}

passed=0
for t in $(seq 1 "$trials"); do
  job=$(pick np2 np3 cpu2)
  model=$(pick ${STOP_STRESS_MODELS:-gru-rows cnn resnet})
  launcher=$(pick mpirun mirrorrun)
  target=$(pick rank rank "$launcher")
  sig=$(pick TERM INT USR1)
  [ "$target" = mpirun ] && sig=USR1
  moment=$(pick start-up step step epoch-end)
  reference "$job" "$model"
  dir="$PWD/t$t"
  mkdir -p "$dir"
  read -r -a args <<<"$(job_args "$job" "$model")"
  args+=(--checkpoint-dir "$dir/ck" --checkpoint-every 3 --log-jsonl "$dir/log.jsonl")
  replicas=2
  [ "$job" = np3 ] && replicas=3
  per_epoch=$(($(samples_of "$model") / (16 * replicas)))
  case "$moment" in
    start-up) lines=0 ;;
    step) lines=$((1 + RANDOM % (3 * per_epoch - 1))) ;;
    epoch-end) lines=$(( per_epoch * (1 + RANDOM % 2) )) ;;
  esac
  what="trial $t: $job $model via $launcher, SIG$sig to $target at $moment ($lines steps)"
  # shellcheck disable=SC2046
  ( $(launch "$launcher" "$job") "${args[@]}" >"$dir/out" 2>"$dir/err"; echo $? >"$dir/rc" ) &
  bg=$!
  for _ in $(seq 1 3000); do
    [ -f "$dir/rc" ] && break
    if handlers_in "$(ranks_of "$job")" &&
       [ "$(cat "$dir/log.jsonl" 2>/dev/null | wc -l)" -ge "$lines" ]; then break; fi
    sleep 0.02
  done
  case "$target" in
    rank) victim=$(pgrep -f "^$train .*--checkpoint-dir $dir/ck" | shuf -n 1 --random-source=<(yes "$t")) ;;
    mpirun) victim=$(pgrep -f "^mpirun .*--checkpoint-dir $dir/ck" | head -1) ;;
    mirrorrun) victim=$(pgrep -o -f -- "--checkpoint-dir $dir/ck") ;;
  esac
  [ -n "$victim" ] && kill -"$sig" "$victim" 2>/dev/null
  wait "$bg"
  rc=$(cat "$dir/rc")
  if [ "$rc" != 5 ] && [ "$rc" != 0 ]; then
    fail "$what: exit $rc, not 5 or 0: $(grep -v '^\[mirror\] rank' "$dir/err" | tail -4)"
    continue
  fi
  if grep -Eq "$bad_signs" "$dir/err" "$dir/out"; then
    fail "$what: $(grep -Eh -m3 "$bad_signs" "$dir/err" "$dir/out")"
    continue
  fi
  got=$(fingerprint "$dir/out")
  if [ "$rc" = 5 ]; then
    # shellcheck disable=SC2046
    $(launch mpirun "$job") "${args[@]}" --resume "$dir/ck" >"$dir/resume.out" \
      2>"$dir/resume.err" || { fail "$what: resume exited $?: $(tail -3 "$dir/resume.err")"; continue; }
    got=$(fingerprint "$dir/resume.out")
  fi
  if [ "$got" != "${want[$job-$model]}" ]; then
    fail "$what: exit $rc, final fingerprint '$got' != uninterrupted ${want[$job-$model]}"
    continue
  fi
  passed=$((passed + 1))
  echo "ok   $what: exit $rc"
  rm -rf "$dir"
done
echo "stop_stress: $passed of $trials trials clean"
[ "$failures" -eq 0 ] || exit 1
