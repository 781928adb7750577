#!/usr/bin/env python3
"""Prints the include arrows between Mirror's layers and flags the ones that run upward.

Usage: scripts/include_graph.py [REPO_ROOT] [--files]
Each source or header file belongs to one layer (by folder, table LAYERS below, the same as
docs/architecture.md). An arrow A -> B means a file of layer A includes a file of layer B;
it is allowed when B's rank is lower than A's, or A == B. Exit status 1 when an arrow runs
upward (or sideways between two layers of the same rank), 0 otherwise.
"""
import os
import re
import sys
from collections import defaultdict

# (path prefix, layer, rank): the first matching prefix wins, so list specific paths first.
# Same rank = siblings, which may not include each other.
LAYERS = [
    ("src/backend_registry.cpp", "wiring", 7),
    ("include/mirror/distributed/", "distributed", 5),
    ("include/mirror/train/", "train", 6),
    ("include/mirror/nn/", "nn", 3),
    ("include/mirror/optim/", "optim", 4),
    ("include/mirror/data/", "data", 2),
    ("include/mirror/", "core", 0),
    ("src/cpu/", "backend", 1),
    ("src/cuda/", "backend", 1),
    ("src/nn/", "nn", 3),
    ("src/optim/", "optim", 4),
    ("src/data/", "data", 2),
    ("src/train/", "train", 6),
    ("src/", "core", 0),
    ("distributed/", "distributed", 5),
    ("tools/", "programs", 8),
    ("python/", "programs", 8),
    ("examples/", "programs", 8),
    ("bench/", "programs", 8),
    ("tests/", "tests", 9),
    ("fuzz/", "tests", 9),
]
SOURCE = re.compile(r"\.(h|hpp|cpp|cc|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path):
    for prefix, name, rank in LAYERS:
        if path.startswith(prefix):
            return name, rank
    return None, None


def resolve(root, including, target):
    """The repo-relative path an #include "target" finds, searched like the build does."""
    for base in (os.path.dirname(including), "include", "src", "", "tests"):
        candidate = os.path.normpath(os.path.join(base, target))
        if os.path.isfile(os.path.join(root, candidate)):
            return candidate
    return None


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    show_files = "--files" in sys.argv
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), ".."))
    arrows = defaultdict(list)  # (from layer, to layer) -> [(file, included)]
    ranks = {}
    for top in ("include", "src", "distributed", "tools", "examples", "bench", "python", "tests",
                    "fuzz"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if not SOURCE.search(f):
                    continue
                path = os.path.relpath(os.path.join(dirpath, f), root)
                src_layer, src_rank = layer_of(path)
                if src_layer is None:
                    continue
                ranks[src_layer] = src_rank
                with open(os.path.join(root, path), encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                for target in INCLUDE.findall(text):
                    resolved = resolve(root, path, target)
                    if resolved is None:
                        continue
                    dst_layer, dst_rank = layer_of(resolved)
                    if dst_layer is None or dst_layer == src_layer:
                        continue
                    ranks[dst_layer] = dst_rank
                    arrows[(src_layer, dst_layer)].append((path, resolved))
    bad = 0
    for (a, b), uses in sorted(arrows.items(), key=lambda kv: (-ranks[kv[0][0]], kv[0])):
        upward = ranks[b] >= ranks[a]
        bad += upward
        mark = "  UPWARD" if upward else ""
        print(f"{a:12s} -> {b:12s} {len(uses):4d} includes{mark}")
        if upward or show_files:
            for f, inc in sorted(set(uses)):
                print(f"    {f} -> {inc}")
    print(f"{bad} upward arrow(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
