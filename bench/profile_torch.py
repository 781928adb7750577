#!/usr/bin/env python3
"""Where PyTorch's training step goes, layer by layer: the twin of `step-bench --profile`.

  python3 bench/profile_torch.py [--model cnn] [--batch 64] [--steps 20] [--warmup 3]
                                 [--threads 1]

The model is bench/step_torch.py's twin of Mirror's built-in model. Every leaf module's forward
and backward is timed with module hooks (forward pre/post hooks, full backward pre/post hooks),
the loss and the optimizer around their calls, on the CPU; rows are ms per step averaged over
--steps steps after --warmup, printed in step-bench --profile's format. Hooks time wall clock
between a module's entry and exit, so a module's backward includes the autograd work it
triggers; rows do not include Python glue between modules. The first module's input needs no
gradient, so PyTorch fires its backward hooks around its output gradient only: its weight
gradient's time lands in no row (the sum of the rows then falls short of the step).
"""
import argparse
import os
import statistics
import sys
import time
import warnings

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_torch  # noqa: E402  the model twins


def leaves(model):
    return [(name, m) for name, m in model.named_modules() if not list(m.children())]


def attach(model, fwd, bwd):
    """Hooks that add each leaf module's forward and backward wall time to fwd/bwd[name]."""
    starts = {}
    handles = []
    for name, m in leaves(model):
        fwd.setdefault(name, 0.0)
        bwd.setdefault(name, 0.0)

        def pre(mod, args, name=name):
            starts[("f", name)] = time.perf_counter()

        def post(mod, args, out, name=name):
            fwd[name] += time.perf_counter() - starts.pop(("f", name))

        def bpre(mod, grad_out, name=name):
            starts[("b", name)] = time.perf_counter()

        def bpost(mod, grad_in, grad_out, name=name):
            if ("b", name) in starts:
                bwd[name] += time.perf_counter() - starts.pop(("b", name))

        handles.append(m.register_forward_pre_hook(pre))
        handles.append(m.register_forward_hook(post))
        handles.append(m.register_full_backward_pre_hook(bpre))
        handles.append(m.register_full_backward_hook(bpost))
    return handles


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    warnings.filterwarnings("ignore", message="Full backward hook is firing")  # the first module
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model, sample = step_torch.make_model(a.model)
    x = torch.rand((a.batch,) + tuple(sample))
    y = torch.randint(0, 10, (a.batch,))
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    times = {"loss": 0.0, "optimizer": 0.0}

    def step():
        opt.zero_grad(set_to_none=True)
        out = model(x)
        t0 = time.perf_counter()
        loss = loss_fn(out, y)
        times["loss"] += time.perf_counter() - t0
        loss.backward()
        t0 = time.perf_counter()
        opt.step()
        times["optimizer"] += time.perf_counter() - t0

    for _ in range(a.warmup):
        step()
    wall = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        wall.append(time.perf_counter() - t0)
    fwd, bwd = {}, {}
    handles = attach(model, fwd, bwd)
    times.update(loss=0.0, optimizer=0.0)
    for _ in range(a.steps):
        step()
    for h in handles:
        h.remove()
    per = 1000.0 / a.steps
    rows = [(name, type(m).__name__, fwd[name] * per, bwd[name] * per) for name, m in leaves(model)]
    rows.append(("loss", "CrossEntropyLoss", times["loss"] * per, 0.0))
    rows.append(("optimizer", "Adam", 0.0, times["optimizer"] * per))
    total = sum(f + b for _, _, f, b in rows)
    print(f"profile torch {a.model} (ms per step, mean of {a.steps} steps)")
    print(f"{'layer':<28} {'kind':<26} {'output':<16} {'forward':>9} {'backward':>9} {'total':>9} {'share':>7}")
    for name, kind, f, b in rows:
        print(f"{name:<28} {kind:<26} {'':<16} {f:9.3f} {b:9.3f} {f + b:9.3f} {100 * (f + b) / total:6.1f}%")
    print(f"sum of the rows {total:.3f} ms; the timed steps' median {statistics.median(wall) * 1000:.3f} ms")


if __name__ == "__main__":
    main()
