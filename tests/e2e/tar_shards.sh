#!/usr/bin/env bash
# mirror-train from tar shards in WebDataset's layout, made from an image folder by
# scripts/images_to_shards.py:
#  - the shards (given as a glob, class indices as labels) train exactly the weights the folder
#    trains with the photograph recipe, at 1 rank and at 2 (same seed: the same losses, test
#    accuracy and weights fingerprint), with class indices (shards given as a pattern) and
#    with class names (as a folder) for labels;
#  - mirror-predict predicts the same from the test shards as from the test folder;
#  - a run stopped mid-epoch and resumed from its checkpoint equals the uninterrupted run;
#  - a shard whose image lost its label, and a pattern matching nothing, are set-up errors
#    (exit code 3) naming the shard and member.
# Usage: tar_shards.sh <build dir>.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
e2e_need_mpirun
bench="$build/bin/loader-bench"
[ -x "$bench" ] || { echo "skip: $bench is not built"; exit 77; }
"$bench" --write-images "$work/jpg" --format jpeg --limit 120 >/dev/null || { echo "FAIL: data"; exit 1; }
"$bench" --write-images "$work/test-jpg" --format jpeg --split test --limit 40 >/dev/null ||
  { echo "FAIL: test data"; exit 1; }
# Class folders with names (class_0 ... class_9, the same sorted order as 0 ... 9).
for dir in "$work/jpg" "$work/test-jpg"; do
  for k in 0 1 2 3 4 5 6 7 8 9; do [ -d "$dir/$k" ] && mv "$dir/$k" "$dir/class_$k"; done
done
convert="$root/scripts/images_to_shards.py"
python3 "$convert" "$work/jpg" "$work/shards" --shard-size 50 --prefix train >convert.out ||
  fail "convert: $(tail -3 convert.out)"
grep -q 'wrote 120 images of 10 classes into 3 shard(s)' convert.out || fail "convert: $(cat convert.out)"
python3 "$convert" "$work/jpg" "$work/named" --shard-size 50 --class-names >/dev/null &&
  python3 "$convert" "$work/test-jpg" "$work/test-shards" --shard-size 16 >/dev/null &&
  python3 "$convert" "$work/test-jpg" "$work/test-named" --shard-size 16 --class-names \
  >convert-test.out || fail "convert test: $(tail -3 convert-test.out)"
# Deterministic: converting again writes the same bytes.
python3 "$convert" "$work/jpg" "$work/again" --shard-size 50 --prefix train >/dev/null &&
  cmp -s "$work/shards/train-000001.tar" "$work/again/train-000001.tar" || fail "the converter is not deterministic"

recipe=(--crop random-resized=0.25,1 --flip --normalize 0.5,0.25 --eval-resize 32 --image-size 28,28)
common=(--epochs 1 --batch-size 24 --optimizer sgd --lr 0.02 --threads 1 --no-progress --seed 4
        --model cnn --devices cpu "${recipe[@]}")
fingerprint() { grep -o 'weights fingerprint: [0-9a-f]*' "$1" | awk '{print $3}'; }
results() { grep -E '^(epoch [0-9]+/|test accuracy|weights fingerprint)' "$1" | sed 's/|.*//'; }
run() {  # run NAME NP ARGS...: mirror-train under mpirun -np NP > NAME.out; its exit code
  local name="$1" np="$2"
  shift 2
  timeout -k 5 120 mpirun --oversubscribe --bind-to none -np "$np" "$train" "${common[@]}" \
    --checkpoint-dir "${CK:-$work/ck-$name}" "$@" >"$name.out" 2>&1
}

# 1 rank: class indices, the training shards as a pattern; 2 ranks: class names, as folders.
shards_1=(--train-images "$work/shards/train-*.tar" --test-images "$work/test-shards")
shards_2=(--train-images "$work/named" --test-images "$work/test-named")
for np in 1 2; do
  run folder-$np $np --train-images "$work/jpg" --test-images "$work/test-jpg" ||
    fail "folder at $np rank(s): $(tail -3 folder-$np.out)"
  declare -n args="shards_$np"
  run shards-$np $np "${args[@]}" || fail "shards at $np rank(s): $(tail -3 shards-$np.out)"
  [ -n "$(fingerprint folder-$np.out)" ] && [ "$(results folder-$np.out)" = "$(results shards-$np.out)" ] ||
    fail "at $np rank(s) the shards trained otherwise than the folder:
$(results folder-$np.out)
vs
$(results shards-$np.out)"
done
grep -q '120 images in 3 tar shard(s) (120 JPEG, 0 PNG), 10 classes' shards-1.out ||
  fail "no shard line: $(grep -m1 'images' shards-1.out)"
grep -q '40 images in 3 tar shard(s)' shards-1.out || fail "no test shard line"
grep -q '^test accuracy: ' shards-1.out || fail "no test accuracy"
grep -q 'classes (label order): class_0, class_1, ' shards-2.out || fail "no class names: $(grep -m1 classes shards-2.out)"
echo "folder and shards, 1 and 2 ranks: $(fingerprint shards-1.out) $(fingerprint shards-2.out)"

# mirror-predict reads the test shards' images (their labels unread) as it reads the folder's.
for input in test-jpg test-shards; do
  "$build/bin/mirror-predict" --checkpoint "$work/ck-folder-1" --input-images "$work/$input" \
    --output "$input.npy" --output-classes "$input.csv" >"predict-$input.out" 2>&1 ||
    fail "predict $input: $(tail -3 "predict-$input.out")"
done
[ "$(wc -l <test-shards.csv)" -eq 41 ] && cmp -s test-jpg.npy test-shards.npy &&
  [ "$(cut -d, -f2 test-jpg.csv)" = "$(cut -d, -f2 test-shards.csv)" ] ||
  fail "predictions from the shards differ from the folder's"
grep -q "test-shards/shard-000000.tar:class_0/" test-shards.csv || fail "shard members not named: $(sed -n 2p test-shards.csv)"

# Stopped at step 3 of 5 and resumed at 2 ranks: the uninterrupted 2-rank run, bit for bit.
run cut 2 --train-images "$work/shards" --max-steps 3 || fail "cut: $(tail -3 cut.out)"
CK="$work/ck-cut" run resumed 2 --train-images "$work/shards" --resume "$work/ck-cut" ||
  fail "resumed: $(tail -3 resumed.out)"
run whole 2 --train-images "$work/shards" || fail "whole: $(tail -3 whole.out)"
[ -n "$(fingerprint whole.out)" ] && [ "$(fingerprint resumed.out)" = "$(fingerprint whole.out)" ] ||
  fail "the resumed run's weights $(fingerprint resumed.out) differ from $(fingerprint whole.out)"

# A shard whose second image lost its label; a pattern that matches nothing.
mkdir -p "$work/broken"
key="$(python3 - "$work/shards/train-000000.tar" "$work/broken/train-000000.tar" <<'EOF'
import sys, tarfile
with tarfile.open(sys.argv[1]) as src, tarfile.open(sys.argv[2], "w", format=tarfile.GNU_FORMAT) as dst:
    for k, m in enumerate(src.getmembers()):
        if k == 3:  # the second sample's label
            print(m.name[:-len(".cls")])
        else:
            dst.addfile(m, src.extractfile(m))
EOF
)" || fail "broken shard"
bad() {  # bad NAME MESSAGE ARGS...: exit code 3 (the set-up) and MESSAGE
  local name="$1" message="$2"
  shift 2
  timeout -k 5 60 "$train" "${common[@]}" "$@" >"$name.out" 2>&1
  local status=$?
  [ "$status" -eq 3 ] || fail "$name: exit code $status, not 3: $(tail -3 "$name.out")"
  grep -qF -- "$message" "$name.out" || fail "$name: $(tail -3 "$name.out")"
}
bad unlabelled "broken/train-000000.tar: the image $key.jpg has no label member ($key.cls)" \
  --train-images "$work/broken"
bad nomatch "the shard pattern $work/shards/test-*.tar matches no file" \
  --train-images "$work/shards/test-*.tar"
# --skip-bad-samples leaves the unlabelled image out and says so.
timeout -k 5 60 "$train" "${common[@]}" --train-images "$work/broken" --skip-bad-samples >skip.out 2>&1 ||
  fail "skip: $(tail -3 skip.out)"
grep -q 'left out 1 sample(s) without a label or without an image' skip.out || fail "skip: no note"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "tar_shards: all cases passed"
