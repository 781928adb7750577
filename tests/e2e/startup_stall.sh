#!/usr/bin/env bash
# A rank stopped (SIGSTOP) before it reaches MPI_Init_thread must not hang the job: the other
# rank's start-up watchdog (--startup-timeout) ends it with exit code 4 and a line naming the
# stage, and mpirun takes the stopped rank down. Without the watchdog the job hangs forever.
# Usage: startup_stall.sh <build dir>. Exit 77 = skipped.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
e2e_need_mpirun
log="$work/job.log"

start=$(date +%s)
# Rank 1 stops itself before exec'ing the program; rank 0 waits for it inside MPI start-up.
timeout -k 10 90 mpirun --oversubscribe -np 2 bash -c \
  'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then kill -STOP $$; fi; exec "$0" "$@"' \
  "$train" --model gru-rows --data synthetic --train-limit 64 --test-limit 64 --epochs 1 \
  --devices cpu --no-progress --startup-timeout 5 >"$log" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
if [ "$rc" -eq 124 ] || [ "$elapsed" -ge 90 ]; then
  echo "FAIL: the job hung (killed after 90 s)"; tail -20 "$log"; exit 1
fi
if [ "$rc" -eq 0 ]; then
  echo "FAIL: the job exited 0"; tail -20 "$log"; exit 1
fi
if ! grep -q "rank 0 did not finish start-up within 5 s" "$log"; then
  echo "FAIL: no start-up watchdog line"; tail -20 "$log"; exit 1
fi
echo "ok   stalled rank: job ended after ${elapsed}s with exit code $rc"

# A bad value is a flag error (exit 2), before MPI starts.
"$train" --startup-timeout -1 >"$log" 2>&1
rc=$?
if [ "$rc" -ne 2 ] || ! grep -q "startup-timeout must be >= 0" "$log"; then
  echo "FAIL: --startup-timeout -1 gave exit $rc: $(cat "$log")"; exit 1
fi
echo "startup_stall: all cases passed"
