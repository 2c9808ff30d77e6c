"""The ported nanoGPT-style program's training step (tiletrain/testing/ported_programs.py:
the same PyTorch code run with `torch` and with `tiletrain` as the module), tiletrain against
PyTorch eager with the same number of threads (torch.set_num_threads = tiletrain's CPU
workers).  One step: batch slicing and stacking, forward, cross entropy, backward,
clip_grad_norm_, AdamW with parameter groups, LambdaLR, loss.item().

    python benchmarks/ported_nanogpt.py [--ncpu N] [--reps R] [--size small|medium]

Prints a table of median step times over --reps steps after --warmup steps, the two
frameworks' steps alternating (a shared machine's load drifts), and the ratio (PyTorch's
median / tiletrain's: > 1 means tiletrain is faster).  A tiletrain step is timed to its end
(tt.wait(): loss.item() waits for the forward only, the backward and the update may still
run), so tiletrain's workers sleep during PyTorch's steps rather than poll beside them."""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SIZES = {
    "small": dict(vocab=256, block=32, n_embd=64, n_head=4, n_layer=2, batch=8),
    "medium": dict(vocab=1024, block=64, n_embd=256, n_head=8, n_layer=4, batch=8),
}


def _trainer(mod, cfg, data):
    from tiletrain.testing.ported_programs import nanogpt_trainer
    return nanogpt_trainer(mod, data=data, **cfg)[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ncpu", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--size", choices=sorted(SIZES), nargs="+", default=["small", "medium"])
    args = ap.parse_args()

    import torch
    import tiletrain as tt
    from _common import environment, median, table

    torch.set_num_threads(args.ncpu)
    print(environment())
    print(f"torch {torch.__version__} with {torch.get_num_threads()} threads (eager); tiletrain {tt.__version__} "
          f"with {args.ncpu} CPU workers; float32; medians of {args.reps} steps after {args.warmup} warm-up steps")
    rows = []
    with tt.init(ncpu=args.ncpu):
        for size in args.size:
            cfg = SIZES[size]
            data = np.random.default_rng(0).integers(0, cfg["vocab"], 4096)
            steps = {"torch": _trainer(torch, cfg, data), "tiletrain": _trainer(tt, cfg, data)}
            times = {k: [] for k in steps}
            for name, step in steps.items():
                for i in range(args.warmup):
                    step(i)
                tt.wait()
            for i in range(args.reps):  # alternating: a shared machine's load drifts
                for name, step in steps.items():
                    t0 = time.perf_counter()
                    step(args.warmup + i)
                    tt.wait()  # the whole step; a no-op after torch's
                    times[name].append(time.perf_counter() - t0)
            tm, om = median(times["torch"]), median(times["tiletrain"])
            tokens = cfg["batch"] * cfg["block"]
            rows.append([size, f"{tm * 1e3:.1f}", f"{om * 1e3:.1f}", f"{tokens / om:.0f}", f"{tm / om:.2f}x"])
    print()
    print(table(["size", "torch eager ms", "tiletrain ms", "tiletrain tokens/s", "speed vs eager"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
