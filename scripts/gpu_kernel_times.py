#!/usr/bin/env python3
"""Where a GPU step's time goes, from Nsight Compute's per-kernel durations.

    ncu --csv --metrics gpu__time_duration.sum --print-units base --log-file K.csv PROGRAM ...
    python3 scripts/gpu_kernel_times.py K.csv --steps N [--step-ms MS] [--top 25]

Prints the kernels grouped by name (template arguments and parameters dropped), their launch
count and total time, largest first, and the sum of all kernel time per step next to the step's
wall time (--step-ms, from mirror-bench): when kernels fill far less than the step, the step is
bound by the host (launches, synchronisation, allocation), not by the GPU. scripts/gpu_check.sh
runs it on the ResNet and the bf16 CNN.
"""
import argparse
import collections
import csv
import re
import sys


def short_name(name):
    """'void mirror::cuda::(anonymous)::foo_kernel<float>(const float*, ...)' -> 'foo_kernel'."""
    name = re.sub(r"^void ", "", name.strip())
    depth, out = 0, []
    for ch in name:  # drop template arguments and the parameter list, however nested
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    base = "".join(out).split("::")[-1].strip()
    return base or name[:60]


def read(path):
    """Per kernel launch (name, nanoseconds) from ncu's CSV log (lines before the header and
    ncu's own ==PROF== lines are skipped)."""
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    if not lines:
        raise SystemExit(f"gpu_kernel_times: no CSV rows in {path} (did ncu profile anything?)")
    rows = []
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "nsecond")
        scale = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6,
                 "s": 1e9, "second": 1e9}.get(unit)
        if scale is None:
            raise SystemExit(f"gpu_kernel_times: unknown unit {unit!r} in {path}")
        rows.append((row["Kernel Name"], value * scale))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, required=True,
                    help="training steps the profiled run took (warm-up included)")
    ap.add_argument("--step-ms", type=float, help="the step's wall time, for the comparison")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    rows = read(args.csv)
    total = collections.Counter()
    count = collections.Counter()
    for name, ns in rows:
        total[short_name(name)] += ns
        count[short_name(name)] += 1
    all_ns = sum(total.values())
    print(f"{len(rows)} kernel launches over {args.steps} steps (setup included): "
          f"{len(rows) / args.steps:.0f} launches and {all_ns / 1e6 / args.steps:.3f} ms of "
          f"kernel time per step")
    if args.step_ms:
        print(f"step wall time {args.step_ms:.3f} ms: kernels fill "
              f"{100 * all_ns / 1e6 / args.steps / args.step_ms:.0f} % of it")
    print(f"{'kernel':48s} {'launches':>8s} {'ms/step':>9s} {'share':>6s}")
    for name, ns in total.most_common(args.top):
        print(f"{name[:48]:48s} {count[name]:8d} {ns / 1e6 / args.steps:9.4f} "
              f"{100 * ns / all_ns:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
