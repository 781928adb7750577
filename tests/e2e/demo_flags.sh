#!/usr/bin/env bash
# scripts/demo.sh takes any mirror-train flag, the ones it sets itself included (the README's
# `scripts/demo.sh --epochs 3 --train-limit 0` and the fallback banner's `--devices cpu`): the
# caller's value wins and no flag reaches mirror-train twice. Runs on the built tree (no build).
# Usage: demo_flags.sh <build dir>. Exit 77 = skipped.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
e2e_need_mpirun
demo() { BUILD_DIR="$build" MIRROR_DEMO_SKIP_BUILD=1 timeout -k 10 300 "$root/scripts/demo.sh" "$@"; }

demo --epochs 2 --train-limit 256 --test-limit 64 --data synthetic --devices cpu --batch-size 32 \
  --no-progress --threads 1 >out 2>err || fail "demo with its own flags overridden exited $?: $(tail -3 err)"
grep -q "cannot be specified more than once" err && fail "a flag reached mirror-train twice"
[ "$(grep -c '^epoch [0-9]/2' out)" -eq 2 ] || fail "--epochs 2 did not give 2 epochs: $(grep '^epoch' out)"
grep -q 'global batch 32' out || fail "--batch-size 32 did not win: $(grep 'global batch' out)"

demo --model gru-rows --train-limit 128 --test-limit 64 --data synthetic --devices cpu \
  --batch-per-replica 16 --no-progress --threads 1 >out2 2>err2 ||
  fail "demo with --batch-per-replica exited $?: $(tail -3 err2)"
grep -q 'global batch 32' out2 || fail "--batch-per-replica 16 on 2 ranks: $(grep 'global batch' out2)"

# A fresh build folder on a machine without an NVIDIA driver: one line says the CPU backend is
# built and how to force CUDA; a bad MIRROR_DEMO_CUDA is refused by name. (No build is run: the
# demo stops where the programs would be.)
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' && [ ! -d /proc/driver/nvidia ]; then
  BUILD_DIR="$work/fresh" MIRROR_DEMO_SKIP_BUILD=1 "$root/scripts/demo.sh" >fresh.out 2>&1 &&
    fail "the demo ran without a build"
  [ "$(head -1 fresh.out)" = "demo: no NVIDIA driver here, so it builds the CPU backend only (MIRROR_DEMO_CUDA=ON scripts/demo.sh builds the CUDA backend too)" ] ||
    fail "no CPU-backend line first: $(head -2 fresh.out)"
fi
if MIRROR_DEMO_CUDA=maybe "$root/scripts/demo.sh" >bad.out 2>&1; then fail "MIRROR_DEMO_CUDA=maybe accepted"; fi
grep -q "MIRROR_DEMO_CUDA must be ON, OFF or AUTO, not 'maybe'" bad.out || fail "bad MIRROR_DEMO_CUDA: $(cat bad.out)"

[ "$failures" -eq 0 ] || exit 1
echo "demo_flags: the caller's flags win"
