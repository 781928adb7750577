#!/usr/bin/env python3
"""compare_checkpoints.py A B TOLERANCE [l2]: two checkpoints hold the same weight tensors
(optimizer slots aside) within TOLERANCE relative difference (per element, denominator at least
1e-3; with l2, per tensor: ||a - b|| / ||b||, which a near-zero element cannot dominate). A and B are
checkpoint files, or folders (their newest checkpoint). Reads safetensors by hand, so it needs no
numpy. Prints the largest difference and the tensor it is in."""
import glob
import json
import os
import struct
import sys


def load(path):
    if os.path.isdir(path):
        path = sorted(glob.glob(path + "/ckpt-*.safetensors"))[-1]
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or name.startswith("optimizer/"):
            continue
        assert t["dtype"] == "F32", t
        b, e = t["data_offsets"]
        out[name] = struct.unpack("<%df" % ((e - b) // 4), data[8 + n + b:8 + n + e])
    return out


a, b = load(sys.argv[1]), load(sys.argv[2])
tolerance = float(sys.argv[3])
assert a.keys() == b.keys() and a, (sorted(a), sorted(b))
if len(sys.argv) > 4 and sys.argv[4] == "l2":
    def rel(k):
        diff = sum((u - v) ** 2 for u, v in zip(a[k], b[k])) ** 0.5
        return diff / max(1e-12, sum(v * v for v in b[k]) ** 0.5)
    worst, where = max((rel(k), k) for k in a)
else:
    worst, where = max((abs(u - v) / max(1e-3, abs(v)), k) for k in a for u, v in zip(a[k], b[k]))
print("max relative difference: %.3g in %s (tolerance %g)" % (worst, where, tolerance))
sys.exit(0 if worst <= tolerance else 1)
