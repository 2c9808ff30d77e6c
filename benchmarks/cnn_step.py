"""One training step of a small ResNet-style CNN, tiletrain against PyTorch eager on the CPU.

    stem   conv3x3(3 -> 16) - BN - ReLU
    stages 16, 32, 64 channels (the last two stride 2), each one residual block:
           conv3x3 - BN - ReLU - conv3x3 - BN (+ skip: identity, or conv1x1 stride 2 - BN), ReLU
    head   global average pool - flatten - linear(64 -> 10) - cross entropy

32x32 images, batch 64, float32; step = forward, backward, SGD update (momentum 0.9), waited
for.  Same weights (tiletrain loads torch's state_dict) and inputs; tiletrain --ncpu workers,
torch.set_num_threads(--ncpu); the two alternate step by step.  Median of --reps steps after
--warmup, per batch tile size of tiletrain's activations, and the ratio tiletrain / torch
(< 1: tiletrain is faster).  The first steps check that both give the same loss.

    python benchmarks/cnn_step.py [--batch 64] [--tiles 8,16,32] [--ncpu 2] [--reps 5] [--warmup 2]
                                  [--profile]   (+ task time per kernel of one step, per tile size)
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import tiletrain as tt  # noqa: E402
import tiletrain.functional as F  # noqa: E402
from _common import environment, median, table  # noqa: E402
from tiletrain import nn  # noqa: E402
from tiletrain.ops.shape import flatten  # noqa: E402
from tiletrain.optim import SGD  # noqa: E402


def _block(lib, cin, cout, stride, **kw):
    body = [lib.Conv2d(cin, cout, 3, stride, 1, bias=False, **kw), lib.BatchNorm2d(cout, **kw), lib.ReLU(),
            lib.Conv2d(cout, cout, 3, 1, 1, bias=False, **kw), lib.BatchNorm2d(cout, **kw)]
    skip = ([lib.Conv2d(cin, cout, 1, stride, bias=False, **kw), lib.BatchNorm2d(cout, **kw)]
            if stride != 1 or cin != cout else [])
    return lib.Sequential(*body), (lib.Sequential(*skip) if skip else None)


def build(lib, **kw):
    """The same module tree for torch.nn and tiletrain.nn (so state_dict names match)."""
    stem = lib.Sequential(lib.Conv2d(3, 16, 3, 1, 1, bias=False, **kw), lib.BatchNorm2d(16, **kw), lib.ReLU())
    blocks = [_block(lib, cin, cout, s, **kw) for cin, cout, s in ((16, 16, 1), (16, 32, 2), (32, 64, 2))]
    mods = lib.ModuleList([stem] + [m for b in blocks for m in b if m is not None])
    head = lib.Linear(64, 10, **kw)
    return mods, blocks, head


def forward(lib, relu, mods, blocks, head, x):
    x = mods[0](x)
    for body, skip in blocks:
        x = relu(body(x) + (skip(x) if skip is not None else x))
    return head(lib.flatten(lib.avg_pool(x), 1))


def profile(step, tb) -> None:
    """Task time per kernel (summed over workers) and the step's makespan."""
    with tt.trace.recording() as rec:
        step()
    tr = rec.trace
    busy: dict[str, list] = {}
    for name, d in zip(tr.tasks["kernel"], tr.duration):
        busy.setdefault(str(name), []).append(d)
    total = sum(sum(v) for v in busy.values())
    rows = [[k, len(v), f"{sum(v) / 1e3:.1f}", f"{100 * sum(v) / total:.0f}%"]
            for k, v in sorted(busy.items(), key=lambda kv: -sum(kv[1]))]
    print(f"\nbatch tile {tb}: {len(tr)} tasks, makespan {tt.trace.makespan(tr) / 1e3:.1f} ms, "
          f"task time {total / 1e3:.1f} ms over all workers")
    print(table(["kernel", "tasks", "ms", "share"], rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--tiles", default="8,16,32", help="batch tile sizes of tiletrain's activations")
    ap.add_argument("--ncpu", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--profile", action="store_true", help="also print task time per kernel of one step")
    args = ap.parse_args()

    import torch
    torch.set_num_threads(args.ncpu)
    tt.init(ncpu=args.ncpu, profile=args.profile)
    print(environment())
    torch.manual_seed(0)
    tmods, tblocks, thead = build(torch.nn)
    tparams = list(tmods.parameters()) + list(thead.parameters())
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, args.batch)
    tx, ty = torch.tensor(x), torch.tensor(y)

    class TorchOps:
        flatten = staticmethod(torch.flatten)
        avg_pool = staticmethod(lambda h: torch.nn.functional.avg_pool2d(h, 8))

    class TTOps:
        flatten = staticmethod(flatten)
        avg_pool = staticmethod(lambda h: F.avg_pool2d(h, 8))

    topt = torch.optim.SGD(tparams, lr=0.01, momentum=0.9)

    def torch_step():
        loss = torch.nn.functional.cross_entropy(forward(TorchOps, torch.relu, tmods, tblocks, thead, tx), ty)
        loss.backward()
        topt.step()
        topt.zero_grad()
        return loss.item()

    def timed(*steps):
        """Median time of each step; the steps alternate, so they see the same machine load."""
        for _ in range(args.warmup):
            for step in steps:
                step()
        times = [[] for _ in steps]
        for _ in range(args.reps):
            for step, ts in zip(steps, times):
                t0 = time.perf_counter()
                step()
                ts.append(time.perf_counter() - t0)
        return [median(ts) for ts in times]

    rows = []
    for tb in [int(v) for v in args.tiles.split(",")]:
        mods, blocks, head = build(nn)
        state = {f"mods.{k}": v for k, v in tmods.state_dict().items()}
        state.update({f"head.{k}": v for k, v in thead.state_dict().items()})
        holder = nn.Module()
        holder.mods, holder.head = mods, head
        holder.load_state_dict(state)
        opt = SGD(holder.parameters(), lr=0.01, momentum=0.9)
        X = tt.from_numpy(x, (tb, 3, 32, 32))
        Y = tt.from_numpy(y.astype(np.int64), (tb,))

        def tt_step():
            loss = F.cross_entropy(forward(TTOps, F.relu, mods, blocks, head, X), Y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            value = float(loss)
            tt.wait()   # the whole step (the update too); the workers sleep during torch's step
            return value

        first = (tt_step(), torch_step())   # same weights and data: the same first loss
        assert abs(first[0] - first[1]) < 1e-3 * max(1.0, abs(first[1])), first
        t, t_torch = timed(tt_step, torch_step)
        if args.profile:
            profile(tt_step, tb)
        rows.append([tb, f"{t * 1e3:.1f}", f"{t_torch * 1e3:.1f}", f"{t / t_torch:.2f}",
                     f"{t_torch / t:.2f}x"])
    print(f"\nResNet-ish CNN step, batch {args.batch}, 32x32, float32, {args.ncpu} threads each, "
          f"median of {args.reps} after {args.warmup} warm-up")
    print(table(["batch tile", "tiletrain ms", "torch ms", "tt/torch", "speed vs torch"], rows))


if __name__ == "__main__":
    main()
