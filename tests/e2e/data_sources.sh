#!/usr/bin/env bash
# mirror-train on one dataset stored three ways (tests/e2e/make_data_sources.py): a mapped .npy
# pair, a folder of uneven .npy shards, and an image folder of PNG files. Checks that
#  - the three sources are the same data: one rank trains bit-identical weights from each;
#  - each trains at 1, 2 and 3 ranks and as --devices cpu:2 with the weights of one rank
#    (exact sharding), within a tolerance derived from the arithmetic (below), on every ISA;
#  - a run stopped mid-epoch and resumed equals the uninterrupted run bit for bit, per source;
#  - the image folder's classes are logged and kept in checkpoints: mirror-predict
#    --input-images names them.
# Usage: data_sources.sh <build dir>.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
e2e_need_mpirun
command -v python3 >/dev/null || { echo "skip: python3 not found"; exit 77; }
python3 "$root/tests/e2e/make_data_sources.py" "$work" 192 48 || { echo "FAIL: data"; exit 1; }

# SGD: near convergence Adam divides tiny gradients by their tiny scale, which would magnify the
# all-reduce's rounding between layouts far beyond the bound below.
common=(--epochs 2 --batch-size 24 --optimizer sgd --lr 0.02 --threads 1 --no-progress --seed 4)
model=(--model cnn)
declare -A flags=(
  [npy]="--train-x $work/npy/x.npy --train-y $work/npy/y.npy --test-x $work/test-npy/x.npy --test-y $work/test-npy/y.npy"
  [shards]="--train-x $work/shards --train-y $work/shards --test-x $work/test-shards --test-y $work/test-shards"
  [images]="--train-images $work/images --test-images $work/test-images"
)
fingerprint() { grep -o 'weights fingerprint: [0-9a-f]*' "$1" | awk '{print $3}'; }
# Layouts sum each gradient over the global batch of 24 in another order (a rank's share, then
# the all-reduce): per step a relative difference of at most 24 float32 roundings (24 * 2^-24 =
# 1.4e-6), over 16 steps at most 16 times that (2.3e-5) while the model is smooth, so a
# tolerance of 1e-4 per tensor (l2) leaves 4x for the SGD steps' own growth. A ReLU or max-pool
# tie that flips between layouts breaks any such bound (a whole term of a gradient changes: 1e-3
# after 8 steps of the CNN under AVX2, 3e-5 under AVX-512), so the layouts train the smooth twin
# of the CNN (smooth_cnn.json: tanh, average pooling); a sharding error moves it by far more.
compare() { python3 "$root/tests/e2e/compare_checkpoints.py" "$1" "$2" 1e-4 l2; }
# run NAME NP SOURCE ARGS...: mirror-train under mpirun -np NP, checkpoints into $CK (default
# ck-NAME); returns its exit code.
run() {
  local name="$1" np="$2" source="$3"
  shift 3
  # shellcheck disable=SC2086
  timeout -k 5 300 mpirun --oversubscribe --bind-to none -np "$np" "$train" "${model[@]}" \
    "${common[@]}" ${flags[$source]} --checkpoint-dir "${CK:-$work/ck-$name}" "$@" >"$name.out" 2>&1
  local status=$?
  [ "$status" -eq 0 ] || echo "[$name: exit code $status]" >>"$name.out"
  return "$status"
}

for source in npy shards images; do
  run "$source-1" 1 "$source" --devices cpu || fail "$source at 1 rank: $(tail -3 "$source-1.out")"
  grep -q '^test accuracy: ' "$source-1.out" || fail "$source: no test accuracy"
done
reference="$(fingerprint npy-1.out)"
[ -n "$reference" ] || fail "no fingerprint: $(tail -3 npy-1.out)"
for source in shards images; do
  [ "$(fingerprint "$source-1.out")" = "$reference" ] ||
    fail "$source trained other weights than the .npy ($(fingerprint "$source-1.out") vs $reference)"
done
grep -q '4 shards, mapped' shards-1.out || fail "shards: $(grep 'model ' shards-1.out)"
grep -q '\[mirror\] classes (label order): ankle, bag, coat' images-1.out || fail "images: no class list"
grep -q '\[mirror\] data: 2 decoding thread(s) per rank; [0-9]* batches prefetched per replica' images-1.out ||
  fail "no loader line: $(head -5 images-1.out)"

model=(--model-spec "$root/tests/e2e/smooth_cnn.json")
for source in npy shards images; do
  run "$source-smooth-1" 1 "$source" --devices cpu || fail "$source smooth: $(tail -3 "$source-smooth-1.out")"
  for layout in "2 --devices cpu" "3 --devices cpu" "1 --devices cpu:2"; do
    read -r np devices <<<"$layout"
    name="$source-${np}${devices##* }"
    name="${name//:/x}"
    # shellcheck disable=SC2086
    run "$name" "$np" "$source" $devices --data-workers 2 || fail "$name: $(tail -8 "$name.out")"
    diff="$(compare "$work/ck-$source-smooth-1" "$work/ck-$name")" ||
      fail "$name: weights differ from 1 rank's: $diff"
    echo "$name vs 1 rank: $diff"
  done
done
model=(--model cnn)

# Stopped mid-epoch 1 (step 5 of 8) and resumed: the uninterrupted run, bit for bit.
for source in npy shards images; do
  run "$source-cut" 2 "$source" --devices cpu --max-steps 5 || fail "$source cut: $(tail -3 "$source-cut.out")"
  CK="$work/ck-$source-cut" run "$source-resumed" 2 "$source" --devices cpu \
    --resume "$work/ck-$source-cut" || fail "$source resume: $(tail -3 "$source-resumed.out")"
  run "$source-whole" 2 "$source" --devices cpu || fail "$source whole: $(tail -3 "$source-whole.out")"
  [ "$(fingerprint "$source-resumed.out")" = "$(fingerprint "$source-whole.out")" ] ||
    fail "$source: the resumed run's weights differ from the uninterrupted run's"
done

# mirror-predict names the image folder's classes.
predict="$build/bin/mirror-predict"
"$predict" --checkpoint "$work/ck-images-1" --input-images "$work/test-images/coat" \
  "$work/test-images/ankle" --output p.npy --output-classes p.csv >predict.out 2>&1 ||
  fail "predict: $(cat predict.out)"
grep -q 'classes (output order): ankle bag coat' predict.out || fail "predict: $(cat predict.out)"
head -1 p.csv | grep -q '^sample,class$' || fail "p.csv header: $(head -1 p.csv)"
coat=$(grep -c '/coat/[0-9]*\.png,coat$' p.csv)
total=$(grep -c '/coat/' p.csv)
[ "$total" -gt 0 ] && [ "$coat" -ge $((total / 2)) ] ||
  fail "coat images predicted as coat: $coat of $total: $(head -5 p.csv)"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "data_sources: all cases passed"
