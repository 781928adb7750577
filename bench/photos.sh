#!/usr/bin/env bash
# The training input of photographs side by side: scripts/make_photos.py writes N synthetic
# 500x375 JPEGs (quality 90) from a fixed seed, then images/s of the ImageNet training recipe
# (random resized crop to 224x224, horizontal flip, ImageNet normalisation) for Mirror's loader
# (loader-bench --datasets images with the recipe's flags: libjpeg-turbo at a reduced scale when
# the crop allows, one antialiased resample) at 1 and 2 workers, and PyTorch's
# DataLoader(ImageFolder) with the same recipe (bench/photo_peers.py) at 0, 1 and 2 workers, and
# tf.data's (decode_and_crop_jpeg) at 1 and 2 threads, on the same files in one run, after one
# pass that puts them in the page cache.
#
#   bench/photos.sh [--build DIR] [--photos N] [--seconds S] [--torch-python PY] [--tf-python PY]
#                   [--photo-python PY] [--dir DIR]
#
# --dir: measure the photographs already in DIR (e.g. an earlier make_photos.py run) instead.
# --photo-python: a python with numpy and Pillow for the generator (default python3);
# --torch-python: one with torch and torchvision (scripts/install_torch_cpu.sh VENV, then
# VENV/bin/pip install --no-deps torchvision pillow); without it PyTorch is left out;
# --tf-python: one with tensorflow-cpu (python3 -m venv V && V/bin/pip install tensorflow-cpu);
# without it tf.data is left out.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build" photos=2000 seconds=10 torch_py="" tf_py="" photo_py=python3 dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --photos) photos="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --torch-python) torch_py="$2"; shift 2 ;;
    --tf-python) tf_py="$2"; shift 2 ;;
    --photo-python) photo_py="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    *) echo "photos: unknown argument $1" >&2; exit 2 ;;
  esac
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [ -z "$dir" ]; then
  dir="$work/photos"
  "$photo_py" "$root/scripts/make_photos.py" "$dir" --count "$photos" >/dev/null
fi
find "$dir" -type f -exec cat {} + >/dev/null  # into the page cache
recipe=(--image-size 224,224 --crop random-resized --flip --normalize imagenet)
printf "%-8s %8s %12s\n" loader workers images/s
for workers in 1 2; do
  rate="$("$build/bin/loader-bench" --datasets images --images "$dir" "${recipe[@]}" \
    --batch 64 --threads "$workers" --seconds "$seconds" | awk '$1 == "images" {print $4}')"
  printf "%-8s %8d %12s\n" mirror "$workers" "$rate"
done
if [ -n "$torch_py" ]; then
  for workers in 0 1 2; do
    rate="$("$torch_py" "$root/bench/photo_peers.py" "$dir" "$workers" --seconds "$seconds" |
      awk '{print $3}')"
    printf "%-8s %8d %12s\n" torch "$workers" "$rate"
  done
fi
if [ -n "$tf_py" ]; then
  for workers in 1 2; do
    rate="$("$tf_py" "$root/bench/photo_peers.py" "$dir" "$workers" --framework tf \
      --seconds "$seconds" | awk '{print $3}')"
    printf "%-8s %8d %12s\n" tf.data "$workers" "$rate"
  done
fi
