#!/usr/bin/env bash
# Image-folder decoding side by side: Fashion-MNIST's training images written as PNG and as JPEG
# class folders (loader-bench --write-images), then images/s at 1 and 2 workers for Mirror's
# loader (loader-bench --datasets images: libjpeg-turbo / libpng in its worker threads), PyTorch's
# DataLoader(ImageFolder) (worker processes, PIL) and tf.data's image_dataset_from_directory
# (threads), on the same files in one run. Each row is measured after one warm-up pass, so the
# files come from the page cache.
#
#   bench/image_folders.sh [--build DIR] [--images N] [--seconds S] [--torch-python PY] [--tf-python PY]
#
# --torch-python: a python with torch and torchvision (scripts/install_torch_cpu.sh VENV, then
# VENV/bin/pip install --no-deps torchvision pillow); --tf-python: one with tensorflow-cpu (a
# venv: pip install tensorflow-cpu). A peer whose python is not given is left out.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build" images=60000 seconds=10 torch_py="" tf_py=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --images) images="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --torch-python) torch_py="$2"; shift 2 ;;
    --tf-python) tf_py="$2"; shift 2 ;;
    *) echo "image_folders: unknown argument $1" >&2; exit 2 ;;
  esac
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for format in png jpeg; do
  "$build/bin/loader-bench" --write-images "$work/$format" --format "$format" --limit "$images" >/dev/null
done
printf "%-8s %-8s %8s %12s\n" format loader workers images/s
for format in png jpeg; do
  dir="$work/$format"
  find "$dir" -type f -exec cat {} + >/dev/null  # into the page cache
  for workers in 1 2; do
    rate="$("$build/bin/loader-bench" --datasets images --images "$dir" --threads "$workers" \
      --seconds "$seconds" | awk '$1 == "images" {print $4}')"
    printf "%-8s %-8s %8d %12s\n" "$format" mirror "$workers" "$rate"
    if [ -n "$torch_py" ]; then
      rate="$("$torch_py" -W ignore "$root/bench/image_folder_peers.py" torch "$dir" "$workers" --seconds "$seconds" | awk '{print $3}')"
      printf "%-8s %-8s %8d %12s\n" "$format" pytorch "$workers" "$rate"
    fi
    if [ -n "$tf_py" ]; then
      rate="$(TF_CPP_MIN_LOG_LEVEL=3 "$tf_py" "$root/bench/image_folder_peers.py" tf "$dir" "$workers" --seconds "$seconds" 2>/dev/null | awk '{print $3}')"
      printf "%-8s %-8s %8d %12s\n" "$format" tf.data "$workers" "$rate"
    fi
  done
done
