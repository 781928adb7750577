#!/usr/bin/env python3
"""Writes one small image dataset three ways, for the data e2e tests (no NumPy, no PIL):

  OUT/npy/{x,y}.npy          uint8 [N, 1, 28, 28] and int64 [N], in image-folder order
  OUT/shards/{x,y}-0000K.npy the same samples in shards of 50, 70, ... (uneven)
  OUT/images/<class>/NNNNN.png  the same pixels as 8-bit greyscale PNG files

and the same for a test split under OUT/test-*. The samples are sorted by class, then by index,
which is the order an image folder lists them in, so the three sources hold the same dataset.
Usage: make_data_sources.py OUT [TRAIN_N [TEST_N]]
       make_data_sources.py --noise OUT MB   (OUT/x.npy: MB * 10^6 bytes of uint8 [N, 1, 28, 28]
                                              noise, OUT/y.npy: labels i % 10; for the memory
                                              test and bench/mapped_rss.sh)
"""
import os
import random
import struct
import sys
import zlib

CLASSES = ["ankle", "bag", "coat"]


def header(descr, shape):
    """A .npy version 1.0 header, padded to 64 bytes as NumPy writes it."""
    text = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d," % d for d in shape))
    text += " " * (64 - (10 + len(text) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode()


def npy(path, descr, shape, payload):
    with open(path, "wb") as f:
        f.write(header(descr, shape) + payload)


def png(path, width, height, pixels):
    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(
            ">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
    rows = b"".join(b"\x00" + bytes(pixels[r * width:(r + 1) * width]) for r in range(height))
    data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows, 6)) + chunk(b"IEND", b""))
    with open(path, "wb") as f:
        f.write(data)


def samples(n, rng):
    """Class k: a bright band at rows 4k+4 .. 4k+12 on noise: learnable in a few steps."""
    out = []
    for i in range(n):
        label = rng.randrange(len(CLASSES))
        pix = [rng.randrange(60) for _ in range(784)]
        for r in range(4 + 6 * label, 12 + 6 * label):
            for c in range(28):
                pix[r * 28 + c] = 150 + rng.randrange(100)
        out.append((label, i, pix))
    out.sort(key=lambda s: (s[0], s[1]))
    return out


def write(out, prefix, data, shard_sizes):
    os.makedirs(os.path.join(out, prefix + "npy"), exist_ok=True)
    x = b"".join(bytes(p) for _, _, p in data)
    y = b"".join(struct.pack("<q", l) for l, _, _ in data)
    npy(os.path.join(out, prefix + "npy", "x.npy"), "|u1", (len(data), 1, 28, 28), x)
    npy(os.path.join(out, prefix + "npy", "y.npy"), "<i8", (len(data),), y)
    shards = os.path.join(out, prefix + "shards")
    os.makedirs(shards, exist_ok=True)
    at, k = 0, 0
    while at < len(data):
        n = shard_sizes[k % len(shard_sizes)]
        part = data[at:at + n]
        npy(os.path.join(shards, "x-%05d.npy" % k), "|u1", (len(part), 1, 28, 28),
            b"".join(bytes(p) for _, _, p in part))
        npy(os.path.join(shards, "y-%05d.npy" % k), "<i8", (len(part),),
            b"".join(struct.pack("<q", l) for l, _, _ in part))
        at += n
        k += 1
    for label, index, pix in data:
        folder = os.path.join(out, prefix + "images", CLASSES[label])
        os.makedirs(folder, exist_ok=True)
        png(os.path.join(folder, "%05d.png" % index), 28, 28, pix)


def noise(out, mb):
    n = mb * 10**6 // 784
    block = 8192
    chunk = os.urandom(784 * block)
    with open(os.path.join(out, "x.npy"), "wb") as f:
        npy_header = header("|u1", (n, 1, 28, 28))
        f.write(npy_header)
        for start in range(0, n, block):
            f.write(chunk[:784 * min(block, n - start)])
    labels = b"".join(struct.pack("<q", i % 10) for i in range(n))
    npy(os.path.join(out, "y.npy"), "<i8", (n,), labels)
    print("wrote %d samples, %.0f MiB" % (n, os.path.getsize(os.path.join(out, "x.npy")) / 2**20))


def main():
    if sys.argv[1] == "--noise":
        return noise(sys.argv[2], int(sys.argv[3]))
    out = sys.argv[1]
    train_n = int(sys.argv[2]) if len(sys.argv) > 2 else 192
    test_n = int(sys.argv[3]) if len(sys.argv) > 3 else 48
    rng = random.Random(17)
    write(out, "", samples(train_n, rng), [50, 70, 30])
    write(out, "test-", samples(test_n, rng), [20, 28])


if __name__ == "__main__":
    main()
