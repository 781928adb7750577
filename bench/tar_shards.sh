#!/usr/bin/env bash
# Tar shards against the image folder they were made from, side by side: scripts/make_photos.py
# writes N synthetic 500x375 JPEGs (quality 90), scripts/images_to_shards.py packs them into
# WebDataset tar shards, then loader-bench measures images/s of the ImageNet training recipe
# (random resized crop to 224x224, flip, ImageNet normalisation) from the folder and from the
# shards at 1 and 2 workers, alternating, after one pass that puts both in the page cache.
#
#   bench/tar_shards.sh [--build DIR] [--photos N] [--shard-size K] [--seconds S] [--rounds R]
#                       [--photo-python PY] [--dir DIR]
#
# --dir: measure the photographs already in DIR instead of generating them;
# --photo-python: a python with numpy and Pillow for the generator (default python3).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build" photos=1000 shard_size=250 seconds=4 rounds=1 photo_py=python3 dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --photos) photos="$2"; shift 2 ;;
    --shard-size) shard_size="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --photo-python) photo_py="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    *) echo "tar_shards: unknown argument $1" >&2; exit 2 ;;
  esac
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [ -z "$dir" ]; then
  dir="$work/photos"
  "$photo_py" "$root/scripts/make_photos.py" "$dir" --count "$photos" >/dev/null
fi
python3 "$root/scripts/images_to_shards.py" "$dir" "$work/shards" --shard-size "$shard_size" >&2
find "$dir" "$work/shards" -type f -exec cat {} + >/dev/null  # into the page cache
recipe=(--image-size 224,224 --crop random-resized --flip --normalize imagenet)
rate() {  # rate INPUT WORKERS: images/s of loader-bench on INPUT
  "$build/bin/loader-bench" --datasets images --images "$1" "${recipe[@]}" --batch 64 \
    --threads "$2" --seconds "$seconds" | awk '$1 == "images" {print $4}'
}
printf "%-6s %8s %16s %16s\n" round workers "folder images/s" "shards images/s"
for round in $(seq 1 "$rounds"); do
  for workers in 1 2; do
    folder="$(rate "$dir" "$workers")"
    shards="$(rate "$work/shards" "$workers")"
    printf "%-6s %8d %16s %16s\n" "$round" "$workers" "$folder" "$shards"
  done
done
