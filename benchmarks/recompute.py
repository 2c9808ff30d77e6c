"""Activation recomputation: GPT training step time and peak StarPU-allocated bytes with
GPTConfig.recompute = none, block and attention.

    python benchmarks/recompute.py [--sizes 4x256 8x512] [--reps 5] [--ncpu N]

One model per size; its steps (forward, backward, AdamW, loss read) cycle through the three
modes (config.recompute is read at each forward), so every mode sees the same machine load.
Columns: median step time and its ratio to none; `step peak`: the most bytes of tile
buffers StarPU held during the step above what it held when the step started (activations,
gradients, temporaries); `total peak`: that plus what stays allocated between steps
(weights, AdamW state), and its ratio none / mode (how many times less memory).  The counter
is the buffer pool's (Runtime.memory()["peak_allocated_bytes"]: CPU workers, no memory limit).
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import environment, median, table  # noqa: E402

SIZES = {
    "4x256": dict(n_layer=4, n_embd=256, n_head=4, T=256, B=8, vocab=256),
    "8x512": dict(n_layer=8, n_embd=512, n_head=8, T=256, B=8, vocab=256),
}
MODES = ("none", "block", "attention")


def _step(tt, rt, model, opt, x, y) -> tuple[float, int, int]:
    """(seconds, bytes held at the start, peak bytes) of one training step."""
    gc.collect()
    tt.wait()
    rt.reset_peak_memory()
    start = rt.memory()["allocated_bytes"]
    t0 = time.perf_counter()
    loss = model.loss(x, y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    float(loss)
    del loss
    tt.wait()
    dt = time.perf_counter() - t0
    return dt, start, rt.memory()["peak_allocated_bytes"]


def run(size: str, reps: int, ncpu: int | None) -> list[list]:
    import tiletrain as tt
    from tiletrain.nn import GPT, GPTConfig
    s = SIZES[size]
    rt = tt.init(ncpu=ncpu)
    try:
        if rt.memory()["allocated_bytes"] is None:
            raise SystemExit("no allocation counter: the buffer pool's hooks are off (GPU or OpenCL "
                             "workers)")
        cfg = GPTConfig(vocab_size=s["vocab"], block_size=s["T"], n_layer=s["n_layer"], n_head=s["n_head"],
                        n_embd=s["n_embd"], dropout=0.1)
        model = GPT(cfg, seed=0)
        opt = tt.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), weight_decay=0.1)
        rng = np.random.default_rng(0)
        x, y = (rng.integers(0, s["vocab"], (s["B"], s["T"])) for _ in range(2))
        res: dict[str, list] = {m: [] for m in MODES}
        for rep in range(reps + 1):  # the first round warms up (AdamW state, buffer pool)
            for mode in MODES:
                cfg.recompute = mode
                r = _step(tt, rt, model, opt, x, y)
                if rep:
                    res[mode].append(r)
    finally:
        tt.shutdown()
    rows = []
    t_none = median([r[0] for r in res["none"]])
    tot_none = median([r[2] for r in res["none"]])
    for mode in MODES:
        t = median([r[0] for r in res[mode]])
        step_peak = median([r[2] - r[1] for r in res[mode]])
        total = median([r[2] for r in res[mode]])
        rows.append([size, mode, f"{t * 1e3:.0f}", f"{t / t_none:.2f}x", f"{step_peak / 2**20:.1f}",
                     f"{total / 2**20:.1f}", f"{tot_none / total:.2f}x"])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    ap.add_argument("--reps", type=int, default=5, help="measured steps per mode (medians)")
    ap.add_argument("--ncpu", type=int, default=None, help="CPU workers (default: StarPU's)")
    args = ap.parse_args()
    print(environment())
    rows = []
    for size in args.sizes:
        rows += run(size, args.reps, args.ncpu)
    print(table(["size", "recompute", "step ms", "time vs none", "step peak MiB", "total peak MiB",
                 "less memory"], rows))


if __name__ == "__main__":
    main()
