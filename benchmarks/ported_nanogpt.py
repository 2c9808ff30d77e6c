"""The ported nanoGPT-style program's training step (tiletrain/testing/ported_programs.py:
the same PyTorch code run with `torch` and with `tiletrain` as the module), tiletrain against
PyTorch eager with the same number of threads (torch.set_num_threads = tiletrain's CPU
workers).  One step: batch slicing and stacking, forward, cross entropy, backward,
clip_grad_norm_, AdamW with parameter groups, LambdaLR, loss.item().

    python benchmarks/ported_nanogpt.py [--ncpu N] [--reps R] [--block K] [--size small|medium] [--sched P]

Times --reps blocks of --block consecutive steps per framework (after --warmup steps), the
two frameworks' blocks alternating (a shared machine's load drifts), and prints the median
step time (a block's time / K) and the speed ratio: the median over the repetitions of
PyTorch's block time over tiletrain's in the same repetition (> 1 means tiletrain is
faster).  Each block starts --gap seconds after the previous one ends: PyTorch's OpenMP
threads keep spinning for milliseconds after a parallel region (libgomp's default wait
policy), and tiletrain's idle workers poll too, so back-to-back blocks would slow whichever
framework comes second.  A tiletrain block is timed to its end (tt.wait(): loss.item() waits for the
forward only, the backward and the update may still run), as a training loop runs: each
step submits while the previous one's tasks finish, and the workers sleep during
PyTorch's blocks rather than poll beside them."""
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
    ap.add_argument("--block", type=int, default=5, help="consecutive steps timed together")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--gap", type=float, default=0.05,
                    help="seconds between two blocks: PyTorch's OpenMP threads spin for milliseconds after "
                         "their last parallel region (and would run on in the next block)")
    ap.add_argument("--size", choices=sorted(SIZES), nargs="+", default=["small", "medium"])
    ap.add_argument("--sched", default=None, help="scheduling policy (default: tiletrain's, prio)")
    args = ap.parse_args()

    import torch
    import tiletrain as tt
    from _common import environment, median, table

    torch.set_num_threads(args.ncpu)
    print(environment())
    print(f"torch {torch.__version__} with {torch.get_num_threads()} threads (eager); tiletrain {tt.__version__} "
          f"with {args.ncpu} CPU workers ({args.sched or 'default policy'}); float32; medians of {args.reps} blocks of {args.block} steps after "
          f"{args.warmup} warm-up steps")
    rows = []
    with tt.init(ncpu=args.ncpu, sched=args.sched) as rt:
        print(f"tiletrain policy: {rt.sched}")
        for size in args.size:
            cfg = SIZES[size]
            data = np.random.default_rng(0).integers(0, cfg["vocab"], 4096)
            steps = {"torch": _trainer(torch, cfg, data), "tiletrain": _trainer(tt, cfg, data)}
            times = {k: [] for k in steps}
            for name, step in steps.items():
                for i in range(args.warmup):
                    step(i)
                tt.wait()
            for rep in range(args.reps):  # alternating: a shared machine's load drifts
                for name, step in steps.items():
                    time.sleep(args.gap)  # the other framework's threads go idle first
                    t0 = time.perf_counter()
                    for i in range(args.block):
                        step(args.warmup + rep * args.block + i)
                    tt.wait()  # every step's tasks done; a no-op after torch's
                    times[name].append((time.perf_counter() - t0) / args.block)
            tm, om = median(times["torch"]), median(times["tiletrain"])
            ratio = median([a / b for a, b in zip(times["torch"], times["tiletrain"])])
            tokens = cfg["batch"] * cfg["block"]
            rows.append([size, f"{tm * 1e3:.1f}", f"{om * 1e3:.1f}", f"{tokens / om:.0f}", f"{ratio:.2f}x"])
    print()
    print(table(["size", "torch eager ms", "tiletrain ms", "tiletrain tokens/s", "speed vs eager"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
