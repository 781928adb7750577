#!/usr/bin/env bash
# mirror-train --augment: an augmented run says so and trains differently from a plain one; an
# interrupted augmented run resumes bitwise (the draws follow seed, epoch and sample: Note
# [Augmentation draws]); resuming with another --augment, augmenting data that is not images and
# a malformed --augment are clear errors. Usage: augment.sh <build dir>.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
common=(--model cnn --data synthetic --train-limit 192 --test-limit 64 --batch-size 32 --epochs 2
        --threads 1 --devices cpu --no-progress --seed 5)
fingerprint() { grep -o 'weights fingerprint: [0-9a-f]*' "$1" | awk '{print $3}'; }
run() {  # run NAME ARGS...: mirror-train ARGS > NAME.out; returns its exit code
  local name="$1"
  shift
  timeout -k 5 300 "$train" "$@" >"$name.out" 2>&1
}

run aug "${common[@]}" --augment flip,crop=2 || fail "augmented run: $(tail -3 aug.out)"
grep -q 'training images augmented: crop=2,flip' aug.out || fail "no augmentation in the start-up line"
run plain "${common[@]}" || fail "plain run: $(tail -3 plain.out)"
grep -q 'augmented' plain.out && fail "a plain run claims augmentation"
fa=$(fingerprint aug.out)
[ -n "$fa" ] && [ "$fa" != "$(fingerprint plain.out)" ] || fail "augmentation changed nothing ($fa)"

# Interrupted in epoch 1, resumed: epoch 2's draws are those of the uninterrupted run.
run cut "${common[@]}" --augment crop=2,flip --max-steps 4 --checkpoint-dir "$work/ck" ||
  fail "interrupted run: $(tail -3 cut.out)"
run resumed "${common[@]}" --augment crop=2,flip --resume "$work/ck" ||
  fail "resumed run: $(tail -3 resumed.out)"
[ "$(fingerprint resumed.out)" = "$fa" ] || fail "resumed weights $(fingerprint resumed.out) differ from $fa"

run changed "${common[@]}" --augment none --resume "$work/ck" && fail "resumed with another --augment"
grep -q 'augment crop=2,flip -> none' changed.out || fail "changed --augment: $(tail -3 changed.out)"
run rows --model gru-rows --data synthetic --train-limit 64 --test-limit 32 --devices cpu \
  --no-progress --augment flip && fail "augmented rows ran"
grep -q -- '--augment flip crops and flips images \[channels, height, width\]; this data is' rows.out ||
  fail "rows: $(tail -3 rows.out)"
run bad "${common[@]}" --augment crop=x
[ $? -eq 2 ] || fail "a malformed --augment: exit code is not 2"
grep -q -- "--augment 'crop=x': crop padding must be an integer" bad.out || fail "bad: $(tail -3 bad.out)"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "augment: all cases passed"
