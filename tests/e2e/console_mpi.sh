#!/usr/bin/env bash
# What a user sees of a 2-rank mpirun run (Note [Progress bar under a launcher] in
# src/train/progress.cpp, Note [One fallback banner] in distributed/runtime.cpp):
#  - mpirun's output sent to a file holds no progress-bar redraws (carriage returns), although
#    Open MPI gives the ranks a terminal; on a terminal (`script` gives mpirun one) rank 0 draws
#    the bar;
#  - the CPU-fallback banner (a machine without a usable GPU) is printed once, naming the ranks;
#  - the epoch line's rate is labelled as the training steps' and shows the evaluation's time,
#    the summary's rate as the whole run's.
# Usage: console_mpi.sh <build dir>. Exit 77 = skipped.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
e2e_need_mpirun
run=(mpirun --oversubscribe --bind-to none -np 2 "$train" --model gru-rows --data synthetic
     --train-limit 256 --test-limit 64 --batch-size 32 --epochs 2 --threads 1)

timeout -k 10 120 "${run[@]}" >out 2>err || fail "2-rank run exited $?: $(tail -3 err)"
grep -q $'\r' out && fail "the redirected log holds $(grep -o $'\r' out | wc -l) progress redraws"
grep -q '^epoch 2/2: ' out || fail "no plain epoch line: $(head -5 out)"
grep -qE '^epoch 1/2: .* \| [0-9.]+ s \(evaluation [0-9.]+ s\), [0-9]+ samples/s training, data wait' out ||
  fail "the epoch line does not say what its rate covers: $(grep '^epoch 1/2' out)"
grep -qE '^wall time: .* samples/s overall \(evaluation and checkpoints included\)' out ||
  fail "the summary does not say what its rate covers: $(grep '^wall time' out)"
if grep -q 'CPU fallback' err; then
  [ "$(grep -c 'WARNING: NO USABLE GPU' err)" -eq 1 ] ||
    fail "the fallback banner is printed $(grep -c 'WARNING: NO USABLE GPU' err) times"
  grep -q '^\[mirror\]   ranks: 0, 1 on host .* (2 of 2)$' err || fail "the banner does not name the ranks: $(cat err)"
  grep -q '^\[mirror rank' err && fail "a rank printed its own banner lines: $(grep '^\[mirror rank' err)"
else
  echo "note: a usable GPU here, so no fallback banner to count"
fi

if command -v script >/dev/null; then
  # script runs the command on a new terminal: mpirun's stdout is what the user watches.
  timeout -k 10 120 script -qec "${run[*]} --devices cpu" /dev/null </dev/null >tty.out 2>&1 ||
    fail "2-rank run on a terminal exited $?: $(tail -3 tty.out)"
  grep -aq $'\repoch 1/2 \[' tty.out || fail "no progress bar on a terminal: $(head -c 600 tty.out)"
else
  echo "note: no 'script' (util-linux) here; the terminal case is not checked"
fi

[ "$failures" -eq 0 ] || exit 1
echo "console_mpi: no redraws in a redirected log, one fallback banner, labelled rates"
