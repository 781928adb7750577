#!/usr/bin/env bash
# Note [Checkpoint folder lock]: a checkpoint folder has one owner at a time.
#   1. Two runs started together on one --checkpoint-dir (a GRU and an LSTM, 2 ranks each): one
#      trains, the other is refused with exit code 3 naming the owner's pid and host; the folder
#      then holds only the winner's checkpoints, and the winner resumes from them.
#   2. A run killed with SIGKILL leaves its lock file behind; the next run on the folder takes
#      it over, says whose it was, and resumes.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$1"
e2e_need_mpirun
args=(--data synthetic --train-limit 2048 --test-limit 64 --batch-size 32 --threads 1
      --no-progress --seed 5 --checkpoint-every 8 --checkpoint-dir "$PWD/ck")
run() { timeout -k 10 300 mpirun --oversubscribe --bind-to none -np 2 "$train" --devices cpu "$@"; }

# ---- 1. two runs at once
( run --model gru-rows "${args[@]}" --epochs 10 >gru.out 2>gru.err; echo $? >gru.rc ) &
( run --model lstm-rows "${args[@]}" --epochs 10 >lstm.out 2>lstm.err; echo $? >lstm.rc ) &
wait
gru=$(cat gru.rc) lstm=$(cat lstm.rc)
if [ "$gru" = 0 ] && [ "$lstm" = 3 ]; then winner=gru-rows loser=lstm
elif [ "$gru" = 3 ] && [ "$lstm" = 0 ]; then winner=lstm-rows loser=gru
else winner=""; fail "two runs on one folder: exit codes gru $gru, lstm $lstm (want one 0, one 3)"
fi
if [ -n "$winner" ]; then
  grep -q "is in use by another run (pid [0-9]* on host $(hostname)" "$loser.err" ||
    fail "the refused run does not name the owner: $(grep -v '^\[mirror\] rank' "$loser.err" | tail -2)"
  # The folder holds the winner's run only: resuming it with the winner's model works.
  run --model "$winner" "${args[@]}" --epochs 10 --resume "$PWD/ck" >resume.out 2>resume.err ||
    fail "the winner ($winner) cannot resume its folder: $(tail -2 resume.err)"
  echo "ok   two runs at once: $winner trained, the other was refused naming its owner"
fi

# ---- 2. a killed run's lock is taken over
rm -rf ck
( run --model gru-rows "${args[@]}" --epochs 500 >killed.out 2>killed.err ) &
for _ in $(seq 1 600); do
  ls ck/ckpt-*.safetensors >/dev/null 2>&1 && break
  sleep 0.1
done
owner=$(cat ck/.mirror-lock 2>/dev/null)
pkill -KILL -f "^$train .*--checkpoint-dir $PWD/ck"
wait
[[ "$owner" == "pid "* ]] || fail "the running job's lock file names no owner: '$owner'"
run --model gru-rows "${args[@]}" --epochs 500 --max-steps 40 --resume "$PWD/ck" >took.out 2>took.err ||
  fail "resuming after SIGKILL failed: $(tail -2 took.err)"
grep -qF "took over the lock left by a run that is no longer running ($owner)" took.err took.out ||
  fail "the next run did not name the dead owner '$owner': $(grep -h lock took.err took.out | head -2)"
[ -s ck/.mirror-lock ] && fail "a run that ended cleanly left its name in the lock file: $(cat ck/.mirror-lock)"
[ "$failures" -eq 0 ] && echo "ok   a SIGKILLed run's lock ($owner) was taken over by name"
[ "$failures" -eq 0 ] || exit 1
