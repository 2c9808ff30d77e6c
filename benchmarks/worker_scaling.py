"""The GPT training step (forward, backward, AdamW) with 1, 2, 4, 8 and 16 CPU workers in one
process: tokens/s and the workers' idle fraction for each count, as a table.

    python benchmarks/worker_scaling.py [--workers 1 2 4 8 16] [--size small] [--reps 3]

tiletrain's own StarPU (`make setup`) allows 256 CPU workers per process; Debian's binary
package (`make setup STARPU=system`) 4, and counts above the build's maximum are left out
of the table with a note.  With more workers than cores (16 on a 2-core machine) the
workers share the cores: expect flat tokens/s there, and idle fractions that grow with the
count; on a big node the same script shows how the step scales.

Each count: one runtime (profiling on at every count, so the counts compare like with
like), one warm-up step, --reps timed steps (their median), then one recorded step whose
trace gives the idle fraction (1 - busy / makespan, averaged over the workers).  The
first-step loss is printed too: it is the same at every count (the schedule changes, the
arithmetic does not).

Sizes: tiny = 2 layers x 256, 4 heads, T=128, B=8, vocab 256; small = 4 x 512, 8 heads,
T=256, B=8, vocab 256 (benchmarks/gpt_step.py's small).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import environment, median, random_batch, table, tiletrain_adamw, tiletrain_step  # noqa: E402

SIZES = {
    "tiny": dict(n_layer=2, n_embd=256, n_head=4, T=128, B=8, vocab=256),
    "small": dict(n_layer=4, n_embd=512, n_head=8, T=256, B=8, vocab=256),
}


def run(n: int, s: dict, reps: int, sched: str | None) -> dict:
    """One worker count: median step seconds, tokens/s, mean idle fraction, first loss."""
    import tiletrain as tt
    from tiletrain.nn import GPT, GPTConfig

    x, y = random_batch(s)
    with tt.init(ncpu=n, sched=sched, profile=True) as rt:
        cfg = GPTConfig(vocab_size=s["vocab"], block_size=s["T"], n_layer=s["n_layer"], n_head=s["n_head"],
                        n_embd=s["n_embd"])
        m = GPT(cfg, seed=0)
        opt = tiletrain_adamw(tt, m.parameters())
        first = tiletrain_step(m, opt, x, y)  # warm-up
        tt.wait()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            tiletrain_step(m, opt, x, y)
            tt.wait()
            times.append(time.perf_counter() - t0)
        with tt.trace.recording() as rec:
            tiletrain_step(m, opt, x, y)
        met = tt.trace.metrics(rec.trace, nworkers=n)
        ncpu = sum(w.kind == "cpu" for w in rt.workers())
        sched = rt.sched
    step = median(times)
    return {"workers": ncpu, "sched": sched, "step_s": step, "tokens_s": s["B"] * s["T"] / step,
            "idle": met.mean_idle_fraction, "tasks": met.ntasks, "loss": first}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16], help="CPU worker counts")
    ap.add_argument("--size", default="small", choices=list(SIZES))
    ap.add_argument("--reps", type=int, default=3, help="timed steps per count (their median)")
    ap.add_argument("--sched", default=None, help="StarPU scheduling policy (default: STARPU_SCHED or lws)")
    args = ap.parse_args(argv)
    if min(args.workers) < 1 or args.reps < 1:
        ap.error("--workers and --reps must be >= 1")
    from tiletrain.runtime.hetero import build_info, max_cpu_workers

    s = SIZES[args.size]
    b = build_info()
    print(environment())
    print(f"StarPU {b['starpu_version']} ({b['starpu_source']}), STARPU_MAXCPUS {b['starpu_maxcpus']}; "
          f"GPT {args.size}: {s['n_layer']} layers x {s['n_embd']}, T={s['T']}, B={s['B']}, vocab {s['vocab']}; "
          f"median of {args.reps} steps")
    rows, base = [], None
    for n in args.workers:
        if n > max_cpu_workers():
            print(f"  {n} workers: over this build's STARPU_MAXCPUS ({max_cpu_workers()}): left out")
            continue
        r = run(n, s, args.reps, args.sched)
        base = base or r["tokens_s"]
        print(f"  {n} workers: {r['step_s'] * 1e3:.0f} ms/step, first loss {r['loss']:.6f}", flush=True)
        rows.append([r["workers"], r["sched"], f"{r['step_s'] * 1e3:.0f}", f"{r['tokens_s']:.0f}",
                     f"{r['tokens_s'] / base:.2f}", f"{r['idle']:.2f}", r["tasks"], f"{r['loss']:.6f}"])
    print()
    print(table(["CPU workers", "sched", "step ms", "tokens/s", "vs first", "idle fraction", "tasks/step",
                 "first loss"], rows))
    print(f"({os.cpu_count()} cores on this machine)")
    losses = [float(r[-1]) for r in rows]
    if losses and max(losses) - min(losses) > 1e-5 * abs(losses[0]):
        print(f"first-step losses differ between worker counts: {losses}")
        return 1
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
