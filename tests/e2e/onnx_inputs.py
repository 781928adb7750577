"""Writes samples that fit a checkpoint's model: float32 N(0, 1) values of its input shape, or,
for a model with an Embedding, int32 token ids [N, T] in [1, vocab) with trailing 0 padding
(lengths from 1 to T, the first sample full). Also writes x/y training arrays for a spec.
usage: onnx_inputs.py CHECKPOINT OUT.npy N SEED
       onnx_inputs.py --train KIND OUT_PREFIX N SEED     (KIND: words | rows | images)"""
import json
import struct
import sys

import numpy as np


def tokens(rng, n, t, vocab):
    x = np.zeros((n, t), np.int32)
    for i in range(n):
        length = t if i == 0 else (1 if i == 1 else int(rng.integers(1, t + 1)))
        x[i, :length] = rng.integers(1, vocab, length)
    return x


if sys.argv[1] == "--train":
    kind, prefix, n, seed = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    rng = np.random.default_rng(seed)
    x = {"words": lambda: tokens(rng, n, 16, 40),
         "rows": lambda: rng.normal(0, 1, (n, 12, 6)).astype(np.float32),
         "images": lambda: rng.normal(0, 1, (n, 2, 12, 12)).astype(np.float32)}[kind]()
    if kind == "rows":  # trailing all-zero steps: a Masking layer shortens these sequences
        for i in range(1, n):
            x[i, int(rng.integers(1, 13)):] = 0
    np.save(prefix + "_x.npy", x)
    np.save(prefix + "_y.npy", rng.integers(0, 4, n).astype(np.int64))
    sys.exit(0)

path, out, n, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with open(path, "rb") as f:
    size = struct.unpack("<Q", f.read(8))[0]
    spec = json.loads(json.loads(f.read(size))["__metadata__"]["mirror.model"])
rng = np.random.default_rng(seed)
vocab = [l["input_dim"] for l in spec["layers"] if l["type"] == "embedding"]
shape = spec["input_shape"]
if vocab:
    x = tokens(rng, n, shape[0], vocab[0])
else:
    x = rng.normal(0, 1, [n] + shape).astype(np.float32)
    if len(shape) == 2 and any(l["type"] == "masking" for l in spec["layers"]):
        for i in range(1, n):
            x[i, int(rng.integers(1, shape[0] + 1)):] = 0
np.save(out, x)
