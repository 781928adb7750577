#!/usr/bin/env python3
"""PyTorch twin of bench/step_bench.cpp: median time of one training step (forward, loss,
backward, Adam update) of the same models, printed in the same format; on the CPU (the
twin of step-bench) or on a GPU (the twin of `mirror-bench train --devices gpu --replicas 1`).

  python3 bench/step_torch.py [--model cnn,gru-rows] [--batch 64] [--steps 20] [--warmup 3]
                              [--threads 1] [--device cpu|cuda|cuda:N] [--ranks R]

--model torchvision:resnet50 (or mobilenet_v2, ...; @SIZE for another input side than 224)
times a torchvision model, the twin of `step-bench --model-spec` on a keras.applications JSON.

--ranks R runs R processes with DistributedDataParallel over gloo (the twin of mirror-train under
mpirun -np R on CPUs; bench/attention_ranks.sh).

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


class GruMha(nn.Module):
    """bench/gru-mha.json: ids [N, T] (0 = trailing padding) -> Embedding(32) -> GRU(64) over
    each sequence's own length (packed, as Mirror's lengths) -> nn.MultiheadAttention(4 heads)
    self-attention with the padded keys masked -> residual add -> LayerNorm -> mean over the valid
    steps -> Linear(classes)."""

    def __init__(self, vocab, classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab, 32, padding_idx=0)
        self.gru = nn.GRU(32, 64, batch_first=True)
        self.attention = nn.MultiheadAttention(64, 4, batch_first=True)
        self.norm = nn.LayerNorm(64, eps=1e-3)
        self.dense = nn.Linear(64, classes)

    def forward(self, ids):
        lengths = (ids != 0).sum(1)
        packed = nn.utils.rnn.pack_padded_sequence(self.embedding(ids), lengths, batch_first=True,
                                                   enforce_sorted=False)
        g, _ = nn.utils.rnn.pad_packed_sequence(self.gru(packed)[0], batch_first=True,
                                                total_length=ids.shape[1])
        pad = ids == 0
        a, _ = self.attention(g, g, g, key_padding_mask=pad, need_weights=False)
        n = self.norm(g + a) * (~pad).unsqueeze(2)
        return self.dense(n.sum(1) / lengths.unsqueeze(1))


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
    if name == "gru-mha":
        return GruMha(TOKENS_VOCAB, TOKENS_CLASSES), None
    if name.startswith("torchvision:"):  # e.g. torchvision:resnet50, the twin of a Keras app
        import torchvision
        arch, _, size = name[len("torchvision:"):].partition("@")
        side = int(size or 224)
        return torchvision.models.get_model(arch, weights=None, num_classes=10), (3, side, side)
    raise SystemExit(f"unknown model {name!r}: expected cnn, gru-rows, lstm-rows, bigru-rows, "
                     f"bilstm-rows, resnet, gru-mha or torchvision:ARCH[@SIZE]")


# gru-mha's data: padded token ids with lengths from 4 to 32 (bench/attention_ranks.sh writes the
# same arrays for Mirror).
TOKENS_VOCAB, TOKENS_CLASSES, TOKENS_STEPS = 1000, 5, 32


def token_batch(batch, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, TOKENS_VOCAB, (batch, TOKENS_STEPS), generator=g)
    lengths = torch.randint(4, TOKENS_STEPS + 1, (batch,), generator=g)
    ids[torch.arange(TOKENS_STEPS).unsqueeze(0) >= lengths.unsqueeze(1)] = 0
    return ids, torch.randint(0, TOKENS_CLASSES, (batch,), generator=g)


AUTOCAST = {"float32": None, "mixed_bfloat16": torch.bfloat16, "mixed_float16": torch.float16}


def time_model(name, batch, warmup, steps, device, precision="float32", rank=None):
    """rank: this process's rank of a DistributedDataParallel job (gloo), or None alone."""
    torch.manual_seed(1)
    model, shape = make_model(name)
    model.to(device).train()
    params = sum(p.numel() for p in model.parameters())
    if rank is not None:
        model = nn.parallel.DistributedDataParallel(model)
    if shape is None:
        x, y = token_batch(batch, 7 + (rank or 0))
    else:
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


def ddp_worker(rank, args, port):
    """One rank of --ranks R: DistributedDataParallel over gloo, batch --batch per rank; rank 0
    prints its step times (which include waiting for the gradient all-reduce)."""
    import torch.distributed as dist
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.ranks)
    for name in filter(None, args.model.split(",")):
        median, low, cpu, params = time_model(name, args.batch, args.warmup, args.steps,
                                              torch.device("cpu"), args.precision, rank)
        if rank == 0:
            print(f"torch {name} {args.precision} ranks={args.ranks} batch={args.batch}/rank "
                  f"threads={args.threads}: median {median:.2f} ms/step (min {low:.2f}, cpu "
                  f"{cpu:.2f} ms/step, {args.steps} steps, {params} parameters, DDP gloo, torch "
                  f"{torch.__version__})", flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=1,
                    help="R > 1: R processes, DistributedDataParallel over gloo (CPU)")
    ap.add_argument("--model", default="cnn,gru-rows")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--precision", default="float32", choices=sorted(AUTOCAST),
                    help="mixed_*: the step under torch.autocast with that dtype")
    args = ap.parse_args()
    if args.ranks > 1:
        import socket
        with socket.socket() as sock:  # a free port for the rendezvous
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        torch.multiprocessing.spawn(ddp_worker, args=(args, port), nprocs=args.ranks)
        return
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
