"""Single tensor ops, tiletrain against PyTorch eager on the CPU, same inputs, same number of
threads (tiletrain: --ncpu workers; PyTorch: torch.set_num_threads(--ncpu)).

Each case is one row of CASES: (section, name, tiletrain fn, torch fn), both taking the
input tensor of their library; adding a row is one line.  Two figures per case, each the
median of --reps runs (after one warm-up), with the ratio torch time / tiletrain time (> 1:
tiletrain is faster):
  - one op: a single call, tiletrain's time including the wait for its result (tt.wait()):
    the latency a user sees at an interactive prompt;
  - in a stream: --stream calls back to back, then one wait, per call: the cost of the op
    inside a model, where tiletrain submits the next ops while this one runs.

    python benchmarks/ops.py [--reps 5] [--stream 8] [--ncpu 2] [--tile 1024] [--section reductions] [--quick]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import tiletrain as tt  # noqa: E402
import torch  # noqa: E402
from _common import environment, median, table  # noqa: E402

# (section, name, tiletrain fn, torch fn)
CASES = [
    ("reductions", "sum dim 0", lambda x: tt.sum(x, 0), lambda x: x.sum(0)),
    ("reductions", "sum dim -1", lambda x: tt.sum(x, -1), lambda x: x.sum(-1)),
    ("reductions", "sum all", lambda x: tt.sum(x), lambda x: x.sum()),
    ("reductions", "mean dim 0", lambda x: tt.mean(x, 0), lambda x: x.mean(0)),
    ("reductions", "mean dim -1", lambda x: tt.mean(x, -1), lambda x: x.mean(-1)),
    ("reductions", "mean all", lambda x: tt.mean(x), lambda x: x.mean()),
    ("reductions", "amax dim 0", lambda x: tt.amax(x, 0), lambda x: x.amax(0)),
    ("reductions", "amax dim -1", lambda x: tt.amax(x, -1), lambda x: x.amax(-1)),
    ("reductions", "amax all", lambda x: tt.amax(x), lambda x: x.amax()),
    ("reductions", "var dim 0", lambda x: tt.var(x, 0), lambda x: x.var(0)),
    ("reductions", "var dim -1", lambda x: tt.var(x, -1), lambda x: x.var(-1)),
    ("reductions", "var all", lambda x: tt.var(x), lambda x: x.var()),
    ("reductions", "logsumexp dim 0", lambda x: tt.logsumexp(x, 0), lambda x: x.logsumexp(0)),
    ("reductions", "logsumexp dim -1", lambda x: tt.logsumexp(x, -1), lambda x: x.logsumexp(-1)),
    ("reductions", "logsumexp all", lambda x: tt.logsumexp(x, None), lambda x: x.logsumexp(tuple(range(x.ndim)))),
    # element-wise: OTHER holds a second input of x's shape ("y") and a row over the last axis
    ("elementwise", "x + y", lambda x: x + OTHER["y"], lambda x: x + OTHER["y"]),
    ("elementwise", "x * y", lambda x: x * OTHER["y"], lambda x: x * OTHER["y"]),
    ("elementwise", "x / y", lambda x: x / OTHER["y"], lambda x: x / OTHER["y"]),
    ("elementwise", "x + row (broadcast)", lambda x: x + OTHER["row"], lambda x: x + OTHER["row"]),
    ("elementwise", "x * 2 + 1", lambda x: x * 2.0 + 1.0, lambda x: x * 2.0 + 1.0),
    ("elementwise", "maximum", lambda x: tt.maximum(x, OTHER["y"]), lambda x: torch.maximum(x, OTHER["y"])),
    ("elementwise", "exp", tt.exp, lambda x: x.exp()),
    ("elementwise", "tanh", tt.tanh, lambda x: x.tanh()),
    ("elementwise", "sigmoid", tt.sigmoid, lambda x: x.sigmoid()),
    ("elementwise", "gelu", lambda x: tt.functional.gelu(x), lambda x: torch.nn.functional.gelu(x)),
    ("elementwise", "x ** 2", lambda x: x ** 2, lambda x: x ** 2),
    ("elementwise", "x > 0", lambda x: x > 0, lambda x: x > 0),
    ("elementwise", "where", lambda x: tt.where(OTHER["mask"], x, OTHER["y"]),
     lambda x: torch.where(OTHER["mask"], x, OTHER["y"])),
]
OTHER: dict = {}  # the second inputs of the current shape (tiletrain or torch, set per library)

SHAPES = [(4096, 4096), (64, 512, 512)]


def tiles_for(shape, tile: int) -> tuple[int, ...]:
    """Tiles of about tile x tile elements over the last two axes, whole leading axes split in 8."""
    if len(shape) == 2:
        return (min(tile, shape[0]), min(tile, shape[1]))
    lead = max(1, shape[0] // 8)
    return (lead,) + tuple(min(tile // 2, s) for s in shape[1:])


def timed(fn, reps: int, sync=lambda: None, calls: int = 1) -> float:
    """Median over reps of the time per call of ``calls`` calls of fn followed by sync()."""
    fn()
    sync()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        ts.append((time.perf_counter() - t0) / calls)
    return median(ts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--stream", type=int, default=8, help="calls per timed run in the stream figures (default: 8)")
    ap.add_argument("--ncpu", type=int, default=2)
    ap.add_argument("--tile", type=int, default=1024)
    ap.add_argument("--section", default=None, help="only this section of CASES")
    ap.add_argument("--quick", action="store_true", help="small shapes (a smoke run)")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.ncpu)
    tt.init(ncpu=args.ncpu)
    print(environment())
    print(f"tiletrain ncpu={args.ncpu}, torch threads={torch.get_num_threads()}, median of {args.reps}\n")
    shapes = [(256, 256), (8, 64, 64)] if args.quick else SHAPES
    rng = np.random.default_rng(0)
    rows = []
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        tiles = tiles_for(shape, args.tile)
        X, T = tt.from_numpy(x, tiles), torch.from_numpy(x)
        y = rng.standard_normal(shape).astype(np.float32) + 3.0
        row = rng.standard_normal(shape[-1]).astype(np.float32)
        ours = dict(y=tt.from_numpy(y, tiles), row=tt.from_numpy(row, tiles[-1]))
        ours["mask"] = ours["y"] > 3.0
        theirs = dict(y=torch.from_numpy(y), row=torch.from_numpy(row), mask=torch.from_numpy(y > 3.0))
        for section, name, f, tf in CASES:
            if args.section and section != args.section:
                continue
            OTHER.clear()
            OTHER.update(ours)
            t_tt = timed(lambda: f(X), args.reps, tt.wait)
            s_tt = timed(lambda: f(X), args.reps, tt.wait, args.stream)
            OTHER.clear()
            OTHER.update(theirs)
            t_torch = timed(lambda: tf(T), args.reps)
            s_torch = timed(lambda: tf(T), args.reps, calls=args.stream)
            rows.append([section, name, "x".join(map(str, shape)), "x".join(map(str, tiles)),
                         f"{t_tt * 1e3:.2f}", f"{t_torch * 1e3:.2f}", f"{t_torch / t_tt:.2f}",
                         f"{s_tt * 1e3:.2f}", f"{s_torch * 1e3:.2f}", f"{s_torch / s_tt:.2f}"])
    print(table(["section", "op", "shape", "tiles", "one op: tiletrain ms", "torch ms", "torch/tiletrain",
                 f"stream of {args.stream}: tiletrain ms/op", "torch ms/op", "torch/tiletrain"], rows))
    tt.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
