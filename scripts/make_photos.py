#!/usr/bin/env python3
"""Synthetic photographs for the image-input benchmarks (bench/photos.sh): N JPEG files of
500x375 pixels at quality 90 (PIL's default 4:2:0 chroma subsampling, as cameras and ImageNet
store them) in class folders DIR/class_K/NNNNNN.jpg, from a fixed seed: the same files on every
machine with the same numpy and Pillow.

Each image is textured like a photograph rather than flat: a smooth colour gradient, a few
soft blobs, sinusoidal stripes at a random angle and fine noise, so the JPEG holds the
high-frequency detail (and the file size, ~60-120 KB) that real photos have.

  scripts/make_photos.py DIR [--count 2000] [--classes 10] [--seed 0] [--size 500x375]
"""
import argparse
import os

import numpy as np
from PIL import Image


def photo(rng, width, height):
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = rng.uniform(40, 215, size=3).astype(np.float32)
    slope = rng.uniform(-0.25, 0.25, size=(2, 3)).astype(np.float32)
    img = base + x[..., None] * slope[0] + y[..., None] * slope[1]
    for _ in range(4):  # soft blobs of another colour
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        r = rng.uniform(20, 120)
        blob = np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))
        img += blob[..., None] * rng.uniform(-80, 80, size=3).astype(np.float32)
    angle, period = rng.uniform(0, np.pi), rng.uniform(4, 24)
    stripes = np.sin((x * np.cos(angle) + y * np.sin(angle)) * (2 * np.pi / period))
    img += stripes[..., None] * rng.uniform(5, 30)
    img += rng.normal(0, 6, size=img.shape).astype(np.float32)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("dir")
    p.add_argument("--count", type=int, default=2000)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", default="500x375", help="WIDTHxHEIGHT")
    p.add_argument("--quality", type=int, default=90)
    a = p.parse_args()
    if a.count < 1 or a.classes < 1:
        p.error("--count and --classes must be positive")
    try:
        width, height = (int(v) for v in a.size.split("x"))
    except ValueError:
        p.error(f"--size must be WIDTHxHEIGHT, got {a.size!r}")
    rng = np.random.default_rng(a.seed)
    for i in range(a.count):
        folder = os.path.join(a.dir, f"class_{i % a.classes:02d}")
        os.makedirs(folder, exist_ok=True)
        photo(rng, width, height).save(os.path.join(folder, f"{i:06d}.jpg"), quality=a.quality)
    print(f"wrote {a.count} {width}x{height} JPEG photographs (quality {a.quality}) into {a.dir}")


if __name__ == "__main__":
    main()
