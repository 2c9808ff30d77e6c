"""Tile GEMM efficiency inside a GPT training step against the same tile GEMM alone.

Records one training step (forward, backward, AdamW) of benchmarks/gpt_step.py's model with
tiletrain.trace, groups its gemm tasks by (transpose_a, transpose_b, batch, m, n, k) (from
each record's integer arguments) and prints per shape: the task count, its share of the
step's gemm time, the median in-step GFLOP/s, and the median GFLOP/s of the same kernel on
single-tile operands of that shape "alone" (one task at a time, the other workers idle) and
"pair" (two independent chains of that task on two workers at once: the cache and memory
bandwidth sharing a training step has), then in-step / alone.  Every figure is a task
duration measured by StarPU's profiling (the same clock for all columns).

    python benchmarks/gemm_shapes.py [--size small] [--tiles B,T,C] [--hidden H] [--steps 3]
    python benchmarks/gemm_shapes.py --sweep        # step time vs tiling (default tilings)

--sweep: for each tiling in a list (time tile x feature tiles), the step's tasks, gemm
tasks, median step time and the gemm-weighted in-step GFLOP/s (one table).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import environment, median, random_batch, table, tiletrain_step  # noqa: E402
from gpt_step import SIZES  # noqa: E402


def gpt_model(tt, s: dict, tiling):
    from tiletrain.nn import GPT, GPTConfig
    cfg = GPTConfig(vocab_size=s["vocab"], block_size=s["T"], n_layer=s["n_layer"], n_head=s["n_head"],
                    n_embd=s["n_embd"])
    return GPT(cfg, tiling=tiling)


def record_steps(tt, s: dict, tiling, steps: int):
    """(traces of ``steps`` recorded training steps after one warm-up, step wall times in s)."""
    m = gpt_model(tt, s, tiling)
    opt = tt.optim.AdamW(m.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    x, y = random_batch(s)
    tiletrain_step(m, opt, x, y)
    tt.wait()
    traces, walls = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        with tt.trace.recording() as rec:
            tiletrain_step(m, opt, x, y)
        walls.append(time.perf_counter() - t0)
        traces.append(rec.trace)
    return traces, walls


def gemm_groups(traces) -> dict:
    """(ta, tb, batch, m, n, k) -> list of in-step gemm task durations (µs)."""
    groups: dict[tuple, list] = {}
    for tr in traces:
        t = tr.tasks
        sel = t["kernel"] == "gemm"
        for ia, d in zip(t["iargs"][sel], (t["end"] - t["start"])[sel]):
            _dtype, batch, m, n, k, ta, tb, _cacc = (int(v) for v in ia)
            groups.setdefault((ta, tb, batch, m, n, k), []).append(float(d))
    return groups


def alone(tt, key: tuple, reps: int, pair: bool) -> np.ndarray:
    """Task durations (µs) of one gemm of this shape on single-tile operands: a chain of
    ``reps`` tasks (one at a time), or two independent chains with their own operands (pair)."""
    from tiletrain.runtime import kernels
    ta, tb, batch, m, n, k = key
    rng = np.random.default_rng(0)
    lead = (batch,) if batch > 1 else ()

    def operands():
        a = rng.standard_normal(lead + ((k, m) if ta else (m, k))).astype(np.float32)
        b = rng.standard_normal(lead + ((n, k) if tb else (k, n))).astype(np.float32)
        a, b = tt.from_numpy(a, tiles=a.shape), tt.from_numpy(b, tiles=b.shape)
        c = tt.zeros(lead + (m, n), dtype=np.float32, tiles=lead + (m, n))
        return a, b, c

    sets = [operands() for _ in range(2 if pair else 1)]
    tt.wait()
    with tt.trace.recording() as rec:
        for _ in range(reps):
            for a, b, c in sets:
                kernels.gemm(1.0, a, bool(ta), b, bool(tb), 1.0, c)
    t = rec.trace.tasks
    d = (t["end"] - t["start"])[t["kernel"] == "gemm"]
    return d[len(sets):]  # the first task of each chain warms the caches


def gflops(key: tuple, us: float) -> float:
    _ta, _tb, batch, m, n, k = key
    return 2.0 * batch * m * n * k / us / 1e3


def p10(xs) -> float:
    """The 10th-percentile duration: on a loaded machine the median includes time the worker
    thread was preempted; the fastest decile is the kernel's own speed."""
    return float(np.percentile(xs, 10))


def shape_table(tt, traces, reps: int) -> str:
    """The per-shape table (GFLOP/s at the median and the 10th-percentile task duration)."""
    groups = gemm_groups(traces)
    total = sum(sum(v) for v in groups.values())
    rows = []
    tot = {"flops": 0.0, "in": 0.0, "in10": 0.0, "a": 0.0, "a10": 0.0, "p10": 0.0}
    for key, ds in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        ta, tb, batch, m, n, k = key
        a1 = alone(tt, key, reps, pair=False)
        a2 = alone(tt, key, reps, pair=True)
        cnt = len(ds)
        for name, v in (("in", median(ds)), ("in10", p10(ds)), ("a", median(a1)), ("a10", p10(a1)),
                        ("p10", p10(a2))):
            tot[name] += v * cnt
        tot["flops"] += 2.0 * batch * m * n * k * cnt
        rows.append([f"{'T' if ta else 'N'}{'T' if tb else 'N'}", f"{batch}x{m}x{n}x{k}" if batch > 1 else
                     f"{m}x{n}x{k}", cnt // len(traces), f"{100 * sum(ds) / total:.0f}%",
                     f"{gflops(key, median(ds)):.0f} / {gflops(key, p10(ds)):.0f}",
                     f"{gflops(key, median(a1)):.0f} / {gflops(key, p10(a1)):.0f}",
                     f"{gflops(key, p10(a2)):.0f}", f"{p10(a1) / p10(ds):.2f}"])
    f = tot["flops"] / 1e3
    rows.append(["all", "", sum(len(v) for v in groups.values()) // len(traces), "100%",
                 f"{f / tot['in']:.0f} / {f / tot['in10']:.0f}", f"{f / tot['a']:.0f} / {f / tot['a10']:.0f}",
                 f"{f / tot['p10']:.0f}", f"{tot['a10'] / tot['in10']:.2f}"])
    headers = ["op", "m x n x k", "tasks/step", "gemm time", "in-step GFLOP/s med / p10", "alone med / p10",
               "pair p10", "in-step/alone (p10)"]
    return table(headers, rows)


def step_summary(traces, walls) -> str:
    t = traces[0].tasks
    busy = sum(float((tr.tasks["end"] - tr.tasks["start"]).sum()) for tr in traces) / len(traces)
    g = sum(float(((tr.tasks["end"] - tr.tasks["start"])[tr.tasks["kernel"] == "gemm"]).sum()) for tr in traces)
    g /= len(traces)
    return (f"step: {len(t)} tasks ({int((t['kernel'] == 'gemm').sum())} gemm), median wall "
            f"{median(walls) * 1e3:.0f} ms, busy {busy / 1e3:.0f} ms of which gemm {100 * g / busy:.0f}%")


def parse_tiling(tt, spec: str | None, hidden: int | None):
    from tiletrain.nn import Tiling
    if spec is None:
        return Tiling(hidden=hidden)
    b, t, c = (int(v) for v in spec.split(","))
    return Tiling(batch=b, time=t, width=c, hidden=hidden)


# (batch, time, width, hidden) tilings swept for the small GPT (B=8, T=256, C=512, 4C=2048)
SWEEP = [(1, 256, 512, 1024), (1, 256, 512, 2048), (1, 256, 512, 512), (1, 128, 512, 1024),
         (2, 256, 512, 1024), (2, 256, 512, 2048), (1, 256, 256, 1024), (4, 256, 512, 2048),
         (2, 128, 512, 1024)]


def sweep(tt, s: dict, steps: int, tilings) -> str:
    """Step time per tiling, the tilings' steps interleaved round-robin (so that a change of
    load hits every tiling alike): tasks, gemm tasks, gemm GFLOP/s (p10), median wall time and
    median process CPU time per step (workers' and submitter's; less sensitive to load)."""
    from tiletrain.nn import Tiling
    x, y = random_batch(s)
    runs = []
    for b, t, w, h in tilings:
        m = gpt_model(tt, s, Tiling(batch=b, time=t, width=w, hidden=h))
        opt = tt.optim.AdamW(m.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
        tiletrain_step(m, opt, x, y)
        tt.wait()
        runs.append({"model": m, "opt": opt, "wall": [], "cpu": [], "traces": []})
    for rep in range(steps):
        for r in runs:
            c0, t0 = time.process_time(), time.perf_counter()
            with tt.trace.recording() as rec:
                tiletrain_step(r["model"], r["opt"], x, y)
            r["wall"].append(time.perf_counter() - t0)
            r["cpu"].append(time.process_time() - c0)
            r["traces"].append(rec.trace)
        print(f"  round {rep}: " + " ".join(f"{r['wall'][-1] * 1e3:.0f}" for r in runs) + " ms", flush=True)
    rows = []
    base = median(runs[0]["wall"])
    for (b, t, w, h), r in zip(tilings, runs):
        groups = gemm_groups(r["traces"])
        flops = sum(gflops(k, 1.0) * len(v) for k, v in groups.items())   # GFLOP * 1e3 / µs
        w10 = sum(p10(v) * len(v) for v in groups.values())
        t0 = r["traces"][0].tasks
        rows.append([f"{b}x{t}", w, h, len(t0), int((t0["kernel"] == "gemm").sum()), f"{flops / w10:.0f}",
                     f"{median(r['wall']) * 1e3:.0f}", f"{median(r['cpu']) * 1e3:.0f}",
                     f"{median(r['wall']) / base:.2f}"])
    return table(["rows (batch x time)", "width", "hidden", "tasks/step", "gemm tasks", "gemm GFLOP/s (p10)",
                  "step ms (median)", "CPU ms/step", "vs first"], rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="small", choices=[k for k in SIZES if k != "gpu"])
    ap.add_argument("--tiles", default=None, help="B,T,C tile sizes (default: Tiling's defaults)")
    ap.add_argument("--hidden", type=int, default=None, help="MLP hidden tile (default: Tiling's)")
    ap.add_argument("--steps", type=int, default=3, help="recorded steps (after one warm-up)")
    ap.add_argument("--reps", type=int, default=30, help="tasks per alone/pair measurement")
    ap.add_argument("--ncpu", type=int, default=os.cpu_count())
    ap.add_argument("--sched", default=None)
    ap.add_argument("--sweep", action="store_true", help="step time vs tiling instead of the shape table")
    ap.add_argument("--tilings", nargs="+", default=None, metavar="B,T,C,H",
                    help="--sweep: tilings (batch, time, width, hidden tiles); default: SWEEP")
    args = ap.parse_args()
    import tiletrain as tt
    s = SIZES[args.size]
    print(environment())
    with tt.init(ncpu=args.ncpu, sched=args.sched, profile=True) as rt:
        print(f"GPT {args.size}: {s}; {args.ncpu} CPU workers, {rt.sched}; float32; medians", flush=True)
        if args.sweep:
            tilings = SWEEP if args.tilings is None else [tuple(int(v) for v in t.split(","))
                                                           for t in args.tilings]
            print(sweep(tt, s, args.steps, tilings))
            return 0
        tiling = parse_tiling(tt, args.tiles, args.hidden)
        traces, walls = record_steps(tt, s, tiling, args.steps)
        print(f"tiling {tiling}")
        print(step_summary(traces, walls))
        print(shape_table(tt, traces, args.reps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
