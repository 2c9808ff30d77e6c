"""Tile GEMM efficiency inside a GPT training step against the same BLAS call alone.

Records training steps (forward, backward, AdamW) of benchmarks/gpt_step.py's model with
tiletrain.trace, groups the gemm tasks by (transpose_a, transpose_b, m, n, k) (each record's
integer arguments, ``tasks["iargs"]``) and prints per shape: tasks per step, share of the
step's gemm time, and GFLOP/s from median CPU times:

  in-step  the task's worker-thread CPU time (``tasks["cpu"]``), over the tasks that ran back to
           back (their worker finished its previous task just before), so time the thread was
           preempted by other processes does not count: the figures hold on a loaded machine;
  alone    the same cblas_sgemm call (same library, flags, shape, row-major contiguous
           operands) on this thread with the workers idle, CPU time per call;
  pair     the kernel as tasks on single-tile operands with both workers running a stream of
           them at once (cache and memory bandwidth shared, as in a step);

then in-step / alone and, for reference, GFLOP/s from the median wall duration in the step.

    python benchmarks/gemm_shapes.py [--size small] [--tiles B,T,C] [--hidden H] [--steps 3]
    python benchmarks/gemm_shapes.py --sweep [--tilings B,T,C,H ...] [--steps 6]

--sweep: for each tiling (batch x time rows, width, MLP hidden tile), the steps of all
tilings interleaved round-robin: tasks, gemm tasks, gemm GFLOP/s (CPU time), median step
wall time and process CPU time per step (one table).
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


def back_to_back(t: np.ndarray) -> np.ndarray:
    """Mask of the tasks whose worker finished its previous task just before (within 2 % of
    the task's duration, at least 20 µs): their ``cpu`` is the task's own CPU time."""
    ok = np.zeros(len(t), dtype=bool)
    for w in np.unique(t["worker"]):
        idx = np.nonzero(t["worker"] == w)[0]
        idx = idx[np.argsort(t["start"][idx], kind="stable")]
        gap = t["start"][idx[1:]] - t["end"][idx[:-1]]
        dur = t["end"][idx[1:]] - t["start"][idx[1:]]
        ok[idx[1:]] = (gap <= np.maximum(20.0, 0.02 * dur)) & (t["cpu"][idx[1:]] >= 0)
    return ok


# kernels whose integer arguments start dtype, batch, m, n, k, ta, tb (a linear layer's
# gemm_bias, where built, is a gemm with the bias rows added first: grouped with gemm)
GEMM_KERNELS = ("gemm", "gemm_bias")


def gemm_groups(traces) -> dict:
    """(ta, tb, batch, m, n, k) -> {"wall": task durations, "cpu": CPU times of the tasks that
    ran back to back} (µs)."""
    groups: dict[tuple, dict] = {}
    for tr in traces:
        t = tr.tasks
        ok = back_to_back(t)
        for i in np.nonzero(np.isin(t["kernel"], GEMM_KERNELS))[0]:
            _dtype, batch, m, n, k, ta, tb = (int(v) for v in t["iargs"][i][:7])
            g = groups.setdefault((ta, tb, batch, m, n, k), {"wall": [], "cpu": []})
            g["wall"].append(float(t["end"][i] - t["start"][i]))
            if ok[i]:
                g["cpu"].append(float(t["cpu"][i]))
    return groups


def _blas():
    """The CBLAS library tiletrain's kernels call (found among the loaded libraries)."""
    import ctypes
    from tiletrain._ffi import cstr, lib
    want = cstr(lib.tt_blas_info()).split()[0]  # openblas | mkl
    paths = []
    for line in open("/proc/self/maps"):
        path = line.split()[-1]
        name = os.path.basename(path)
        if ".so" in name and want in name.lower() and "scipy" not in name and path not in paths:
            paths.append(path)
    for path in paths:
        dll = ctypes.CDLL(path)
        if hasattr(dll, "cblas_sgemm"):
            return dll
    raise RuntimeError(f"gemm_shapes: no loaded {want} library exports cblas_sgemm ({paths})")


def alone(key: tuple, reps: int) -> np.ndarray:
    """CPU times (µs, this thread's clock) of the same cblas_sgemm call as the kernel's on
    fresh contiguous row-major operands, one at a time on this thread (the workers idle)."""
    import ctypes
    ta, tb, batch, m, n, k = key
    rng = np.random.default_rng(0)
    a = rng.standard_normal((batch,) + ((k, m) if ta else (m, k))).astype(np.float32)
    b = rng.standard_normal((batch,) + ((n, k) if tb else (k, n))).astype(np.float32)
    c = np.zeros((batch, m, n), np.float32)
    blas = _blas()
    f = blas.cblas_sgemm
    f.restype = None
    f.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                       ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
    row, nt, tr = 101, 111, 112  # CblasRowMajor, CblasNoTrans, CblasTrans
    out = []
    for rep in range(reps + 1):
        t0 = time.thread_time_ns()
        for i in range(batch):
            f(row, tr if ta else nt, tr if tb else nt, m, n, k, 1.0, a[i].ctypes.data, m if ta else k,
              b[i].ctypes.data, k if tb else n, 1.0, c[i].ctypes.data, n)
        if rep:  # the first call warms the caches
            out.append((time.thread_time_ns() - t0) / 1e3)
    return np.asarray(out)


def pair(tt, key: tuple, reps: int) -> np.ndarray:
    """CPU times (µs) of the kernel's tasks on single-tile operands, two workers each running
    a stream of them on its own operands (the cache and memory sharing of a training step)."""
    from tiletrain.runtime import kernels
    ta, tb, batch, m, n, k = key
    rng = np.random.default_rng(0)
    lead = (batch,) if batch > 1 else ()
    sets = []
    for _ in range(2):
        a = rng.standard_normal(lead + ((k, m) if ta else (m, k))).astype(np.float32)
        b = rng.standard_normal(lead + ((n, k) if tb else (k, n))).astype(np.float32)
        sets.append((tt.from_numpy(a, tiles=a.shape), tt.from_numpy(b, tiles=b.shape)))
    cs = [tt.zeros(lead + (m, n), dtype=np.float32, tiles=lead + (m, n)) for _ in range(2 * reps)]
    tt.wait()
    with tt.trace.recording() as rec:
        for i, c in enumerate(cs):
            a, b = sets[i % 2]
            kernels.gemm(1.0, a, bool(ta), b, bool(tb), 0.0, c)
    t = rec.trace.tasks
    return t["cpu"][back_to_back(t) & (t["kernel"] == "gemm")]


def gflops(key: tuple, us: float) -> float:
    _ta, _tb, batch, m, n, k = key
    return 2.0 * batch * m * n * k / us / 1e3


def shape_table(tt, traces, reps: int) -> str:
    """The per-shape table: GFLOP/s from median CPU times (back-to-back tasks in the step,
    the same BLAS call alone, two concurrent streams), and from the median wall duration."""
    groups = gemm_groups(traces)
    total = sum(sum(g["wall"]) for g in groups.values())
    rows = []
    tot = {"flops": 0.0, "in": 0.0, "wall": 0.0, "a": 0.0, "p": 0.0}
    for key, g in sorted(groups.items(), key=lambda kv: -sum(kv[1]["wall"])):
        ta, tb, batch, m, n, k = key
        cnt = len(g["wall"])
        meds = {"in": median(g["cpu"]) if g["cpu"] else float("nan"), "wall": median(g["wall"]),
                "a": median(alone(key, reps)), "p": median(pair(tt, key, reps))}
        for name, v in meds.items():
            tot[name] += v * cnt
        tot["flops"] += 2.0 * batch * m * n * k * cnt
        rows.append([f"{'T' if ta else 'N'}{'T' if tb else 'N'}", f"{batch}x{m}x{n}x{k}" if batch > 1 else
                     f"{m}x{n}x{k}", cnt // len(traces), f"{100 * sum(g['wall']) / total:.0f}%",
                     f"{gflops(key, meds['in']):.0f} ({len(g['cpu'])})", f"{gflops(key, meds['a']):.0f}",
                     f"{gflops(key, meds['p']):.0f}", f"{meds['a'] / meds['in']:.2f}", f"{gflops(key, meds['wall']):.0f}"])
    f = tot["flops"] / 1e3
    rows.append(["all", "", sum(len(g["wall"]) for g in groups.values()) // len(traces), "100%",
                 f"{f / tot['in']:.0f}", f"{f / tot['a']:.0f}", f"{f / tot['p']:.0f}", f"{tot['a'] / tot['in']:.2f}",
                 f"{f / tot['wall']:.0f}"])
    headers = ["op", "m x n x k", "tasks/step", "gemm time", "in-step GFLOP/s (n)", "alone", "pair",
               "in-step/alone", "in-step wall GFLOP/s"]
    return table(headers, rows)


def step_summary(traces, walls) -> str:
    t = traces[0].tasks
    busy = sum(float((tr.tasks["end"] - tr.tasks["start"]).sum()) for tr in traces) / len(traces)
    g = sum(float(((tr.tasks["end"] - tr.tasks["start"])[np.isin(tr.tasks["kernel"], GEMM_KERNELS)]).sum())
            for tr in traces) / len(traces)
    return (f"step: {len(t)} tasks ({int(np.isin(t['kernel'], GEMM_KERNELS).sum())} gemm), median wall "
            f"{median(walls) * 1e3:.0f} ms, busy {busy / 1e3:.0f} ms of which gemm {100 * g / busy:.0f}%")


def parse_tiling(spec: str | None, hidden: int | None):
    from tiletrain.nn import Tiling
    if spec is None:
        return Tiling(hidden=hidden)
    b, t, c = (int(v) for v in spec.split(","))
    return Tiling(batch=b, time=t, width=c, hidden=hidden)


# (batch, time, width, hidden) tilings swept per size; the first is Tiling()'s default there
# (small: B=8, T=256, C=512, 4C=2048; medium: B=4, T=256, C=768, 4C=3072)
_SMALL = [(2, 256, 512, 1024), (1, 256, 512, 1024), (1, 256, 512, 2048), (2, 256, 512, 2048), (4, 256, 512, 2048),
          (1, 128, 512, 1024), (2, 256, 256, 1024), (2, 256, 512, 512)]
SWEEP = {"small": _SMALL, "small-v8k": _SMALL,
         "medium": [(2, 256, 768, 1024), (1, 256, 768, 1024), (1, 256, 768, 3072), (2, 256, 768, 3072),
                    (4, 256, 768, 1024)]}


def sweep(tt, s: dict, steps: int, tilings) -> str:
    """Step time per tiling, the tilings' steps interleaved round-robin (so that a change of
    load hits every tiling alike): tasks, gemm tasks, gemm GFLOP/s (from CPU times), median wall time and
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
        flops = sum(gflops(k, 1.0) * len(g["wall"]) for k, g in groups.items() if g["cpu"])  # GFLOP*1e3/µs
        wcpu = sum(median(g["cpu"]) * len(g["wall"]) for g in groups.values() if g["cpu"])
        t0 = r["traces"][0].tasks
        rows.append([f"{b}x{t}", w, h, len(t0), int(np.isin(t0["kernel"], GEMM_KERNELS).sum()), f"{flops / wcpu:.0f}",
                     f"{median(r['wall']) * 1e3:.0f}", f"{median(r['cpu']) * 1e3:.0f}",
                     f"{median(r['wall']) / base:.2f}"])
    return table(["rows (batch x time)", "width", "hidden", "tasks/step", "gemm tasks", "gemm GFLOP/s (CPU time)",
                  "step ms (median)", "CPU ms/step", "vs first"], rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="small", choices=[k for k in SIZES if k != "gpu"])
    ap.add_argument("--tiles", default=None, help="B,T,C tile sizes (default: Tiling's defaults)")
    ap.add_argument("--hidden", type=int, default=None, help="MLP hidden tile (default: Tiling's)")
    ap.add_argument("--steps", type=int, default=3, help="recorded steps (after one warm-up)")
    ap.add_argument("--reps", type=int, default=20, help="calls per alone/pair measurement")
    ap.add_argument("--ncpu", type=int, default=os.cpu_count())
    ap.add_argument("--sched", default=None)
    ap.add_argument("--sweep", action="store_true", help="step time vs tiling instead of the shape table")
    ap.add_argument("--tilings", nargs="+", default=None, metavar="B,T,C,H",
                    help="--sweep: tilings (batch, time, width, hidden tiles); default: SWEEP[size]")
    args = ap.parse_args()
    import tiletrain as tt
    s = SIZES[args.size]
    print(environment())
    with tt.init(ncpu=args.ncpu, sched=args.sched, profile=True) as rt:
        print(f"GPT {args.size}: {s}; {args.ncpu} CPU workers, {rt.sched}; float32; medians", flush=True)
        if args.sweep:
            tilings = SWEEP[args.size] if args.tilings is None else [tuple(int(v) for v in t.split(","))
                                                           for t in args.tilings]
            print(sweep(tt, s, args.steps, tilings))
            return 0
        tiling = parse_tiling(args.tiles, args.hidden)
        traces, walls = record_steps(tt, s, tiling, args.steps)
        print(f"tiling {tiling}")
        print(step_summary(traces, walls))
        print(shape_table(tt, traces, args.reps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
