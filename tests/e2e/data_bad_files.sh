#!/usr/bin/env bash
# Bad data through mirror-train, each an error naming the file (and the sample index) with the
# exit codes of the README: what a header shows stops the set-up (exit 3: a truncated PNG
# header, a file that is no image, an empty class folder, an image of another mode, shards that
# disagree); what only decoding shows stops the run at its batch (exit 1), under 1 and 2 ranks;
# --skip-bad-samples replaces such samples by the next good one, trains, and says how many at
# the end; malformed flags are exit 2; and nothing is ever written into a data folder.
# Usage: data_bad_files.sh <build dir>.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
e2e_need_mpirun
command -v python3 >/dev/null || { echo "skip: python3 not found"; exit 77; }
python3 "$root/tests/e2e/make_data_sources.py" "$work/data" 96 24 || { echo "FAIL: data"; exit 1; }
data="$work/data"
common=(--model cnn --epochs 1 --batch-size 16 --threads 1 --devices cpu --no-progress)
# expect NAME CODE PATTERN ARGS...: mirror-train ARGS exits with CODE and prints PATTERN.
expect() {
  local name="$1" code="$2" pattern="$3"
  shift 3
  timeout -k 5 300 "$train" "${common[@]}" "$@" >"$name.out" 2>&1
  local got=$?
  [ "$got" -eq "$code" ] || fail "$name: exit code $got, expected $code: $(tail -3 "$name.out")"
  grep -qE -- "$pattern" "$name.out" || fail "$name: no '$pattern' in: $(tail -3 "$name.out")"
}
copy() { rm -rf "$work/$1" && cp -r "$data/$2" "$work/$1"; }
snapshot() { (cd "$work" && find "$@" -printf '%p %s %T@\n' | sort); }
data_before="$(snapshot data)"

# A PNG cut inside its image data: found only when decoded, at the batch.
copy cut images
victim="$(ls "$work/cut/bag" | sed -n 3p)"
head -c 150 "$data/images/bag/$victim" >"$work/cut/bag/$victim"
before="$(snapshot cut)"
expect cut-1 1 "cut/bag/$victim: corrupt or truncated PNG \(libpng: .*\) \(sample [0-9]+\)" \
  --train-images "$work/cut"
timeout -k 5 300 mpirun --oversubscribe --bind-to none -np 2 "$train" "${common[@]}" \
  --train-images "$work/cut" >cut-2.out 2>&1 && fail "2 ranks trained on a truncated PNG"
grep -qE "cut/bag/$victim: corrupt or truncated PNG" cut-2.out || fail "cut-2: $(tail -5 cut-2.out)"
expect skip 0 "--skip-bad-samples: 1 bad sample\(s\) replaced by the next good one \(1 distinct\); the first: .*$victim" \
  --train-images "$work/cut" --skip-bad-samples
grep -q 'bad samples replaced (--skip-bad-samples)' skip.out || fail "skip: no start-up note"
[ "$before" = "$(snapshot cut)" ] || fail "a run wrote into the image folder"

# What the header shows: refused before training, with the sample index.
copy head images
printf '\x89PNG\r\n\x1a\n\0\0\0\rIHDX' >"$work/head/coat/$(ls "$work/head/coat" | head -1)"
expect header 3 "head/coat/.*\.png: PNG file is truncated inside its header \(sample [0-9]+\)" \
  --train-images "$work/head"
expect header-skip 0 "1 image\(s\) failed the header check and are replaced" \
  --train-images "$work/head" --skip-bad-samples
copy text images
echo "not an image" >"$work/text/ankle/zz.png"
expect text 3 "text/ankle/zz.png: not a JPEG or PNG image \(first bytes 6e 6f" --train-images "$work/text"
copy hollow images
mkdir "$work/hollow/dress"
expect hollow 3 "hollow/dress is an empty class folder" --train-images "$work/hollow"
copy rgb images
python3 - "$work/rgb/bag/99999.png" <<'PY'
import struct, sys, zlib
def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
rows = b"".join(b"\0" + bytes([120, 60, 30] * 28) for _ in range(28))
open(sys.argv[1], "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 28, 28, 8, 2, 0, 0, 0))
                              + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
PY
expect mode 3 "99999.png is RGB but the first image, .*, is grayscale: an image of another mode" \
  --train-images "$work/rgb"
expect mode-gray 0 "weights fingerprint" --train-images "$work/rgb" --color grayscale
expect mode-rgb 0 "RGB 28x28" --train-images "$work/rgb" --color rgb

# Shards that disagree.
copy skew shards
rm "$work/skew/y-00001.npy"
expect shard-pair 3 "x-00001.npy has no partner" --train-x "$work/skew" --train-y "$work/skew"
copy len shards
cp "$data/shards/y-00000.npy" "$work/len/y-00001.npy"
expect shard-len 3 "samples in .*len/x-00001.npy \(x\) but [0-9]+ in .*len/y-00001.npy \(y\)" \
  --train-x "$work/len" --train-y "$work/len"

# Flags.
expect size 2 "--image-size must be HEIGHT,WIDTH" --train-images "$data/images" --image-size 28x28
expect color 2 "--color must be auto, grayscale or rgb" --train-images "$data/images" --color cmyk
expect decode 2 "--decode must be cpu or gpu" --train-images "$data/images" --decode tpu
expect images-only 2 "apply to image folders" --train-x "$data/npy/x.npy" --train-y "$data/npy/y.npy" --color rgb
expect test-alone 2 "--test-images goes with --train-images" --train-x "$data/npy/x.npy" \
  --train-y "$data/npy/y.npy" --test-images "$data/test-images"
expect gpu-decode 3 "--decode gpu" --train-images "$data/images" --decode gpu
[ "$(snapshot data)" = "$data_before" ] || fail "a run wrote into the data folder"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "data_bad_files: all cases passed"
