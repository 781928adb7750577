#!/usr/bin/env bash
# mirror-train --train-images with the photograph recipe (--crop random-resized --flip
# --normalize; --eval-resize for the test split) on a small JPEG folder:
#  - the start-up lines name the recipe of each split, and it trains other weights than a plain
#    run;
#  - 2 ranks train the weights of 1 rank (the crops follow seed, epoch and sample, never the
#    rank: Note [Augmentation draws]) within the all-reduce's rounding (data_sources.sh derives
#    the 1e-4 of the smooth CNN);
#  - a run stopped mid-epoch and resumed equals the uninterrupted run bit for bit (the resumed
#    crops are the ones the uninterrupted run drew), and resuming with another --crop is refused;
#  - bad recipe flags are errors naming the problem (exit code 2).
# Usage: photo_recipe.sh <build dir>.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
e2e_need_mpirun
bench="$build/bin/loader-bench"
[ -x "$bench" ] || { echo "skip: $bench is not built"; exit 77; }
"$bench" --write-images "$work/jpg" --format jpeg --limit 144 >/dev/null || { echo "FAIL: data"; exit 1; }
"$bench" --write-images "$work/test-jpg" --format jpeg --split test --limit 48 >/dev/null ||
  { echo "FAIL: test data"; exit 1; }

recipe=(--crop random-resized=0.25,1 --flip --normalize 0.5,0.25 --eval-resize 32)
common=(--train-images "$work/jpg" --test-images "$work/test-jpg" --epochs 2
        --batch-size 24 --optimizer sgd --lr 0.02 --threads 1 --no-progress --seed 4)
fingerprint() { grep -o 'weights fingerprint: [0-9a-f]*' "$1" | awk '{print $3}'; }
run() {  # run NAME NP ARGS...: mirror-train under mpirun -np NP > NAME.out; its exit code
  local name="$1" np="$2"
  shift 2
  timeout -k 5 300 mpirun --oversubscribe --bind-to none -np "$np" "$train" "${common[@]}" \
    --image-size 28,28 --checkpoint-dir "${CK:-$work/ck-$name}" "$@" >"$name.out" 2>&1
}

run photo-1 1 "${recipe[@]}" --model-spec "$root/tests/e2e/smooth_cnn.json" --devices cpu ||
  fail "1 rank: $(tail -3 photo-1.out)"
grep -q 'photograph recipe: crop random-resized=0.25,1, flip, normalize 0.5,0.25' photo-1.out ||
  fail "no training recipe in the start-up line: $(grep 'model ' photo-1.out)"
grep -q 'evaluated with normalize 0.5,0.25, eval resize 32 + centre crop' photo-1.out ||
  fail "no evaluation recipe: $(grep 'evaluated on' photo-1.out)"
grep -q '^test accuracy: ' photo-1.out || fail "no test accuracy"
run plain-1 1 --model-spec "$root/tests/e2e/smooth_cnn.json" --devices cpu ||
  fail "plain: $(tail -3 plain-1.out)"
[ -n "$(fingerprint photo-1.out)" ] && [ "$(fingerprint photo-1.out)" != "$(fingerprint plain-1.out)" ] ||
  fail "the recipe changed nothing ($(fingerprint photo-1.out))"

# mirror-predict transforms images as the test split was (the checkpoint's --normalize and
# --eval-resize): the test folder's predictions are its evaluation's, so the accuracy matches.
"$build/bin/mirror-predict" --checkpoint "$work/ck-photo-1" --input-images "$work/test-jpg" \
  --output p.npy --output-classes p.csv >predict.out 2>&1 || fail "predict: $(tail -3 predict.out)"
right=0
while IFS=, read -r file class; do
  [ "$file" = sample ] && continue
  [ "$(basename "$(dirname "$file")")" = "$class" ] && right=$((right + 1))
done <p.csv
accuracy="$(grep -o '^test accuracy: [0-9.]*' photo-1.out | awk '{print $3}')"
[ "$right" -gt 0 ] && python3 -c "import sys; sys.exit(abs($right / 48 - $accuracy) > 1e-3)" ||
  fail "predict: $right of 48 right, but the test accuracy was $accuracy"

run photo-2 2 "${recipe[@]}" --model-spec "$root/tests/e2e/smooth_cnn.json" --devices cpu \
  --data-workers 2 || fail "2 ranks: $(tail -3 photo-2.out)"
diff="$(python3 "$root/tests/e2e/compare_checkpoints.py" "$work/ck-photo-1" "$work/ck-photo-2" 1e-4 l2)" ||
  fail "2 ranks trained other weights than 1: $diff"
echo "2 ranks vs 1: $diff"

# Stopped in epoch 1 (step 4 of 6) and resumed at 2 ranks: the uninterrupted run, bit for bit.
run cut 2 "${recipe[@]}" --model cnn --devices cpu --max-steps 4 || fail "cut: $(tail -3 cut.out)"
CK="$work/ck-cut" run resumed 2 "${recipe[@]}" --model cnn --devices cpu --resume "$work/ck-cut" ||
  fail "resumed: $(tail -3 resumed.out)"
run whole 2 "${recipe[@]}" --model cnn --devices cpu || fail "whole: $(tail -3 whole.out)"
[ -n "$(fingerprint whole.out)" ] && [ "$(fingerprint resumed.out)" = "$(fingerprint whole.out)" ] ||
  fail "the resumed run's weights $(fingerprint resumed.out) differ from $(fingerprint whole.out)"
CK="$work/ck-cut" run changed 1 --crop none --flip --normalize 0.5,0.25 --model cnn --devices cpu \
  --resume "$work/ck-cut" && fail "resumed with another --crop"
grep -q 'crop random-resized=0.25,1 -> none' changed.out || fail "changed --crop: $(tail -3 changed.out)"

bad() {  # bad NAME CODE MESSAGE ARGS...: exit code CODE (2: the flags, 3: the set-up) and MESSAGE
  local name="$1" code="$2" message="$3"
  shift 3
  timeout -k 5 60 "$train" "${common[@]}" --devices cpu "$@" >"$name.out" 2>&1
  local status=$?
  [ "$status" -eq "$code" ] || fail "$name: exit code $status, not $code"
  grep -qF -- "$message" "$name.out" || fail "$name: $(tail -3 "$name.out")"
}
bad scale 2 "--crop 'random-resized=0.9,0.1': scale_min 0.9 > scale_max 0.1" --crop random-resized=0.9,0.1
bad normalize 2 "--normalize '0.1,0.2,0.3': 3 numbers: an odd count" --normalize 0.1,0.2,0.3
# The channels are known once the folder is read: a set-up error.
bad channels 3 "gives 3 means and stds but the images have 1 channel(s)" --normalize imagenet \
  --image-size 28,28
bad both 2 "give --augment or the photograph recipe's --crop/--flip, not both" --flip --augment flip \
  --image-size 28,28
bad size 2 "give --image-size HEIGHT,WIDTH" --crop random-resized
bad eval-crop 2 "--eval-crop 30 must be the model's input size" --eval-resize 32 --eval-crop 30 \
  --image-size 28,28
bad eval-resize 2 "--eval-resize 20 is smaller than the centre crop" --eval-resize 20 --image-size 28,28
timeout -k 5 60 "$train" --model cnn --data synthetic --devices cpu --no-progress --flip >rows.out 2>&1
[ $? -eq 2 ] && grep -qF "apply to image folders (--train-images)" rows.out ||
  fail "--flip without image folders: $(tail -3 rows.out)"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "photo_recipe: all cases passed"
