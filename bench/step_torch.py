#!/usr/bin/env python3
"""PyTorch twin of bench/step_bench.cpp: median time of one training step (forward, loss,
backward, Adam update) of the same models, printed in the same format; on the CPU (the
twin of step-bench) or on a GPU (the twin of `mirror-bench train --devices gpu --replicas 1`).

  python3 bench/step_torch.py [--model cnn,gru-rows] [--batch 64] [--steps 20] [--warmup 3]
                              [--threads 1] [--device cpu|cuda|cuda:N]

On a GPU each step copies its batch from host memory (as Mirror's step does) and ends with a
device synchronize, so the time is the step's completion, not its launch. No usable GPU with
--device cuda exits 3 with the reason.
"""
import argparse
import statistics
import sys
import time

import torch
from torch import nn


class RowGru(nn.Module):
    """[N, 28, 28] -> GRU(64) (last state) -> Dense(10), as nn::make_row_gru."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(28, 64, batch_first=True)
        self.dense = nn.Linear(64, 10)

    def forward(self, x):
        _, h = self.gru(x)
        return self.dense(h[0])


class RowLstm(nn.Module):
    """[N, 28, 28] -> LSTM(64) (last state) -> Dense(10), as the lstm-rows spec."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(28, 64, batch_first=True)
        self.dense = nn.Linear(64, 10)

    def forward(self, x):
        _, (h, _) = self.lstm(x)
        return self.dense(h[0])


class RowBi(nn.Module):
    """[N, 28, 28] -> Bidirectional(GRU or LSTM (64), last states, concat) -> Dense(10), as
    step-bench's bigru-rows and bilstm-rows (Keras's Bidirectional(..., merge_mode="concat"))."""

    def __init__(self, cell):
        super().__init__()
        self.lstm = cell == "lstm"
        rnn = nn.LSTM if self.lstm else nn.GRU
        self.rnn = rnn(28, 64, batch_first=True, bidirectional=True)
        self.dense = nn.Linear(128, 10)

    def forward(self, x):
        _, h = self.rnn(x)
        if self.lstm:
            h = h[0]
        return self.dense(torch.cat([h[0], h[1]], dim=1))


class BasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN plus the input (a 1x1 conv + BN projection when the stride or
    the width changes), then ReLU: a block of examples/models/resnet.json."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout, 1e-3, 0.01),
            nn.ReLU(), nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
            nn.BatchNorm2d(cout, 1e-3, 0.01))
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout, 1e-3, 0.01))

    def forward(self, x):
        return torch.relu(self.body(x) + (x if self.proj is None else self.proj(x)))


def make_resnet():
    """examples/models/resnet.json (padding 1 where TensorFlow's "same" pads 0/1 for stride 2:
    the same shapes and work)."""
    layers = [nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16, 1e-3, 0.01), nn.ReLU()]
    cin = 16
    for cout in (16, 32, 64):
        for b in range(2):
            stride = 2 if cout != 16 and b == 0 else 1
            layers.append(BasicBlock(cin, cout, stride))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    return nn.Sequential(*layers)


def make_model(name):
    if name == "cnn":  # nn::make_cnn: the TensorFlow layers-tutorial CNN
        return nn.Sequential(
            nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(7 * 7 * 64, 1024), nn.ReLU(), nn.Dropout(0.4),
            nn.Linear(1024, 10)), (1, 28, 28)
    if name == "gru-rows":
        return RowGru(), (28, 28)
    if name == "lstm-rows":
        return RowLstm(), (28, 28)
    if name == "bigru-rows":
        return RowBi("gru"), (28, 28)
    if name == "bilstm-rows":
        return RowBi("lstm"), (28, 28)
    if name == "resnet":
        return make_resnet(), (1, 28, 28)
    raise SystemExit(f"unknown model {name!r}: expected cnn, gru-rows, lstm-rows, bigru-rows, "
                     f"bilstm-rows or resnet")


AUTOCAST = {"float32": None, "mixed_bfloat16": torch.bfloat16, "mixed_float16": torch.float16}


def time_model(name, batch, warmup, steps, device, precision="float32"):
    torch.manual_seed(1)
    model, shape = make_model(name)
    model.to(device).train()
    params = sum(p.numel() for p in model.parameters())
    x = torch.rand(batch, *shape)
    y = torch.randint(0, 10, (batch,))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    on_gpu = device.type == "cuda"
    low = AUTOCAST[precision]

    def step():
        opt.zero_grad()
        # Mirror's --precision twin: torch.autocast (no loss scaling, as step-bench).
        with torch.autocast(device.type, dtype=low, enabled=low is not None):
            loss = loss_fn(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        if on_gpu:
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        step()
    ms, cpu = [], []
    for _ in range(steps):
        c0 = time.process_time()
        t0 = time.perf_counter()
        step()
        ms.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    return statistics.median(ms), min(ms), statistics.median(cpu), params


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="cnn,gru-rows")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--precision", default="float32", choices=sorted(AUTOCAST),
                    help="mixed_*: the step under torch.autocast with that dtype")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    where = ""
    if device.type == "cuda":
        if not torch.cuda.is_available():
            print(f"step_torch: --device {args.device}: torch {torch.__version__} sees no usable "
                  f"GPU (torch.cuda.is_available() is False)", file=sys.stderr)
            sys.exit(3)
        where = f" device={args.device} ({torch.cuda.get_device_name(device)})"
    for name in filter(None, args.model.split(",")):
        median, low, cpu, params = time_model(name, args.batch, args.warmup, args.steps, device,
                                              args.precision)
        print(f"torch {name} {args.precision} batch={args.batch} threads={args.threads}{where}: median "
              f"{median:.2f} ms/step (min {low:.2f}, cpu {cpu:.2f} ms/step, {args.steps} steps, "
              f"{params} parameters, torch {torch.__version__})", flush=True)


if __name__ == "__main__":
    main()
