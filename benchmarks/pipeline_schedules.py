"""Every built-in pipeline schedule on sleeping synthetic tasks (F = I = W = --usec, B = 2x):
measured idle fraction against its paper's formula, peak live activations, and how much of
the written order each StarPU mechanism kept (submission order; + priorities from the action
order; + per-rank ordering dependencies).  One fresh runtime per stage count (p workers, so
p may exceed the cores); --reps runs per configuration, the median (by makespan) reported.

    python benchmarks/pipeline_schedules.py [--stages 2 4] [--microbatches 4 8 16] [--usec 5000]
                                            [--mechanisms submit priority deps] [--reps 3]
                                            [--out benchmarks/results]

Prints a table and writes pipeline_schedules.csv and .png under --out (gitignored).

--real: the schedules on the real GPT instead (tiletrain.pipeline.model.ModelPipeline):
one process with 2 workers (the plain step, one micro-batch: the baseline), then under
mpirun -np 2 with 1 worker per rank (ranks as stages, README "Running under mpirun") data
mode, pipeline mode as ``place(model, "pipeline")`` gives it (dataflow + 1F1B priorities),
every schedule x mechanism with --micro-batches, and rank 0 alone as a same-job reference:
median step time over --steps rounds (round-robin over the configurations, after --warmup
rounds; in each round a configuration steps twice and the second step is timed, as in a
training loop that steps one model, not right after another model's step), ratio to the
baseline (its mean before and after the job), and the order fraction each rank kept (one
recorded step).  The baseline process also runs every schedule on 2 worker groups of 1
worker (one process, the same load as its plain step).

    python benchmarks/pipeline_schedules.py --real [--n-layer 4 8] [--n-embd 256] [--batch 8]
        [--seq-len 128] [--micro-batches 4] [--mechanisms priority deps] [--steps 4] [--warmup 2]
        [--schedules zb-h1 emergent emergent-zb] [--one-process]

--one-process: only the first part (the plain step and the schedules on 2 worker groups of
one process), no mpirun job.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from _common import environment, placed_step, table  # noqa: E402

import tiletrain as tt  # noqa: E402
from tiletrain.pipeline import schedules  # noqa: E402
from tiletrain.pipeline.enforce import MECHANISMS, run_synthetic  # noqa: E402

COLUMNS = ["schedule", "p", "m", "mechanism", "makespan_s", "idle", "formula", "diff_pts", "sim_idle",
           "peak_act", "sim_peak", "order"]


def measure(args) -> list[dict]:
    rows = []
    for p in args.stages:
        with tt.init(ncpu=p, sched=args.sched, profile=True):
            for m in args.microbatches:
                for name in schedules.NAMES:
                    try:
                        s = schedules.get(name, p, m)
                    except ValueError as exc:               # e.g. dualpipe-v needs m >= 2p
                        print(f"skip {name} p={p} m={m}: {exc}", flush=True)
                        continue
                    for mech in (args.mechanisms if s.ordered else ["deps"]):
                        runs = sorted((run_synthetic(s, args.usec, mech) for _ in range(args.reps)),
                                      key=lambda r: r.makespan_s)
                        d = runs[len(runs) // 2].to_dict()
                        rows.append({"schedule": name, "p": p, "m": m, "mechanism": d["mechanism"],
                                     "makespan_s": d["makespan_s"], "idle": d["idle_fraction"],
                                     "formula": d["formula_idle_fraction"],
                                     "diff_pts": 100 * (d["idle_fraction"] - d["formula_idle_fraction"]),
                                     "sim_idle": d["simulated_idle_fraction"],
                                     "peak_act": d["peak_activations"],
                                     "sim_peak": d["simulated_peak_activations"],
                                     "order": d["order_fraction"]})
                        print(f"{name:17s} p={p} m={m:2d} {d['mechanism']:8s} idle {d['idle_fraction']:.3f} "
                              f"(formula {d['formula_idle_fraction']:.3f}) peak {d['peak_activations']:g} "
                              f"order {d['order_fraction']}", flush=True)
    return rows


def fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def plot(rows: list[dict], path: str) -> None:
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator
    best = [r for r in rows if r["mechanism"] in ("deps", "dataflow")]
    ps = sorted({r["p"] for r in best})
    names = list(dict.fromkeys(r["schedule"] for r in best))
    fig = Figure(figsize=(6 * len(ps), 8))
    axes = fig.subplots(2, len(ps), squeeze=False)
    for k, p in enumerate(ps):
        for name in names:
            sel = [r for r in best if r["p"] == p and r["schedule"] == name]
            if not sel:
                continue
            ms = [r["m"] for r in sel]
            line, = axes[0][k].plot(ms, [r["idle"] for r in sel], "o-", label=name)
            axes[0][k].plot(ms, [r["formula"] for r in sel], "--", color=line.get_color(), alpha=0.6)
            axes[1][k].plot(ms, [r["peak_act"] for r in sel], "o-", color=line.get_color(), label=name)
        axes[0][k].set(title=f"p = {p}: idle fraction (measured -o-, formula --)", ylabel="idle / total")
        axes[1][k].set(title=f"p = {p}: peak live activations (rank's micro-batches)")
        for ax in axes[:, k]:
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted({r["m"] for r in best}))
            ax.xaxis.set_major_formatter("{x:g}")
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xlabel("micro-batches m")
            ax.grid(alpha=0.3)
        axes[0][k].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


REAL_SCHEDULES = {"gpipe": {}, "1f1b": {}, "interleaved-1f1b": {"virtual": 2}, "zb-h1": {}, "zb-v": {},
                  "dualpipe-v": {}, "seq1f1b": {"chunks": 2}, "emergent": {},
                  "emergent-zb": {}, "emergent-v": {}}


def real_worker(a) -> None:
    """One process (the baseline) or one rank of the mpirun job: prints RESULT lines.  Every
    configuration is built and warmed up first, then timed round-robin, one step each per
    round (a shared machine's load drifts: each configuration sees the same drift)."""
    import json
    import time

    import numpy as np

    from tiletrain.nn import GPT, GPTConfig
    from tiletrain.optim import AdamW
    from tiletrain.parallel import place, using
    from tiletrain.pipeline.model import ModelPipeline, action_times, pipeline_plan, rank_order_fraction
    from tiletrain.trace.metrics import compact
    from tiletrain.trace.records import recording

    tt.init(profile=True, sched=a.sched)
    me, world = tt.rank(), tt.world_size()
    cfg = GPTConfig(vocab_size=256, block_size=a.seq_len, n_layer=a.n_layer, n_head=4, n_embd=a.n_embd)
    rng = np.random.default_rng(0)
    data = [rng.integers(0, 256, size=(a.batch, a.seq_len + 1)) for _ in range(4)]
    m = a.micro_batches

    def split(ids, k):
        return [ids[j * a.batch // k:(j + 1) * a.batch // k] for j in range(k)]

    def plain(mode, k):
        model = GPT(cfg, seed=0)
        pl = place(model, mode)
        opt = AdamW(model.parameters(), lr=1e-3)

        def step(ids):
            with using(pl):   # each configuration's own layout (place() made the last one current)
                return placed_step(model, opt, ids, k)
        return step

    def scheduled(s, mech):
        model = GPT(cfg, seed=0)
        pl = place(model, pipeline_plan(model, s))
        opt = AdamW(model.parameters(), lr=1e-3)
        pp = ModelPipeline(model, s, mech)

        def step(ids):
            parts = split(ids, m)
            with using(pl):
                losses = pp.step([p[:, :-1] for p in parts], [p[:, 1:] for p in parts]).losses
                opt.step()
                opt.zero_grad()
            return losses
        return step

    configs = []   # (name, mechanism, step, schedule or None)
    if world == 1:
        configs.append(("1 process x 2 workers", "-", plain("single", 1), None))
        if m > 1:   # the same micro-batches without a pipeline: what the bubble bound m/(m+p-1) is of
            configs.append((f"1 process x 2 workers x{m}", "-", plain("single", m), None))
    else:
        configs.append(("rank 0 alone (1 worker)", "-", plain("single", 1), None))
        configs.append(("data", "-", plain("data", 1), None))
        configs.append((f"pipeline (place) x{m}", "dataflow", plain("pipeline", m), None))
    if world > 1 or not a.baseline_only:   # one process: worker groups as the schedule's ranks
        for name, kw in REAL_SCHEDULES.items():
            if a.schedules and name not in a.schedules:
                continue
            s = schedules.get(name, max(world, 2), m, **kw)
            for mech in (a.mechanisms if s.ordered else ["priority"]):
                configs.append((name, mech if s.ordered else "dataflow", scheduled(s, mech), s))

    def run(step, i):
        t0 = time.perf_counter()
        float(np.mean([float(v) for v in step(data[i % len(data)])]))
        tt.wait()   # the whole step (backward, update): a loss is ready before its backward has run
        return time.perf_counter() - t0

    times = [[] for _ in configs]
    for i in range(a.warmup):
        for c in configs:
            run(c[2], i)
    for i in range(a.steps):
        for k, c in enumerate(configs):
            run(c[2], i)   # untimed: the step after switching models refills the caches
            times[k].append(run(c[2], i + 1))
    for k, (name, mech, step, s) in enumerate(configs):
        res = {"step_s": float(np.median(times[k]))}
        if world == 1:   # the order alone: recorded durations without the gaps a loaded host added (median of 3)
            spans = []
            for i in range(3):
                with recording() as rec:
                    run(step, i)
                c = compact(rec.trace).tasks
                spans.append(float(c["end"].max() - c["start"].min()) / 1e6)
            res["compact_s"] = float(np.median(spans))
        if s is not None and s.ordered:   # the order each rank kept, from one recorded step
            if world > 1:
                with recording() as rec:
                    run(step, 0)
            start, _ = action_times(s, rec.trace)
            for r in range(s.ranks) if world == 1 else [me]:
                res[f"order_r{r}"] = rank_order_fraction(s, start, r)
        print("RESULT " + json.dumps({"rank": me, "config": name, "mechanism": mech, **res}), flush=True)
    tt.shutdown()


def real_launch(a, n_layer: int, nprocs: int, baseline_only: bool = False) -> list[dict]:
    import json
    import re
    import subprocess
    from pathlib import Path

    from tiletrain.utils import mpirun
    # ranks sharing the cores: no binding, one worker each (README "Running under mpirun")
    env = mpirun.environment(ranks=nprocs > 1, OPENBLAS_NUM_THREADS="1", STARPU_SILENT="1")
    env.setdefault("STARPU_HOME", str(Path(__file__).resolve().parents[1] / "build" / "starpu-home-bench"))
    args = [sys.executable, __file__, "--real-worker", "--n-layer", str(n_layer), "--n-embd", str(a.n_embd),
            "--batch", str(a.batch), "--seq-len", str(a.seq_len), "--micro-batches", str(a.micro_batches),
            "--steps", str(a.steps), "--warmup", str(a.warmup), "--sched", a.sched,
            "--mechanisms", *a.mechanisms] + (["--baseline-only"] if baseline_only else []) + \
        (["--schedules", *a.schedules] if a.schedules else [])
    if nprocs == 1:
        env["STARPU_NCPU"], env["TILETRAIN_MPI"] = "2", "0"
        cmd = args
    else:
        cmd = mpirun.command(nprocs, args)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
    out = p.stdout + p.stderr
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{out[-4000:]}")
    return [json.loads(x) for x in re.findall(r"RESULT (\{[^{}]*\})", out)]  # ranks may share a line


def real_main(a) -> int:
    print(environment(), flush=True)
    rows = []
    for L in a.n_layer:
        one = real_launch(a, L, 1)       # the plain step(s), then the schedules on 2 worker groups
        before = one[0]
        nbase = 2 if a.micro_batches > 1 else 1   # one micro-batch, and the pipeline's m without a pipeline
        if not a.one_process:
            res = real_launch(a, L, 2)
            after = real_launch(a, L, 1, baseline_only=True)   # before and after the job: the load drifts
            base, base_m = ({**one[k], "step_s": (one[k]["step_s"] + after[k]["step_s"]) / 2}
                            for k in (0, nbase - 1))
            print(f"\nGPT {L} x {a.n_embd}: one process x 2 workers {before['step_s']:.3f} s before, "
                  f"{after[0]['step_s']:.3f} s after the mpirun job (their mean is the baseline); with the "
                  f"{a.micro_batches} micro-batches: {one[nbase - 1]['step_s']:.3f} s, {after[nbase - 1]['step_s']:.3f} s",
                  flush=True)
        lines = [[f"{L}x{a.n_embd}", r["config"], r["mechanism"], f"{r['step_s']:.3f}",
                  f"{before['step_s'] / r['step_s']:.2f}x", f"{before['compact_s'] / r['compact_s']:.2f}x",
                  fmt(r.get("order_r0")), fmt(r.get("order_r1"))] for r in one]
        print("one process, the schedules on 2 worker groups of 1 worker (ratio: to the plain step of the "
              "same process; compact: one recorded step without the gaps the host added, trace.metrics.compact)\n"
              + table(["model", "configuration", "mechanism", "step_s", "vs plain", "compact vs plain", "order r0",
                       "order r1"], lines), flush=True)
        if a.one_process:
            continue
        print(f"\nGPT {L} x {a.n_embd}, batch {a.batch} x {a.seq_len}, {a.micro_batches} micro-batches in pipeline "
              f"rows, sched {a.sched}; median of {a.steps} steps after {a.warmup}", flush=True)
        merged: dict = {}
        for r in res:
            key = (r["config"], r["mechanism"])
            e = merged.setdefault(key, {"config": r["config"], "mechanism": r["mechanism"], "step_s": r["step_s"]})
            if r["rank"] == 0:
                e["step_s"] = r["step_s"]
            if r.get(f"order_r{r['rank']}") is not None:
                e[f"order_r{r['rank']}"] = r[f"order_r{r['rank']}"]
        m = a.micro_batches
        lines = [[f"{L}x{a.n_embd}", b["config"], "-", f"{b['step_s']:.3f}", f"{base['step_s'] / b['step_s']:.2f}x",
                  f"{base_m['step_s'] / b['step_s']:.2f}x", "-", "-"] for b in (base, base_m)[:nbase]]
        for e in merged.values():
            ratio, ratio_m = base["step_s"] / e["step_s"], base_m["step_s"] / e["step_s"]
            rows.append({"model": f"{L}x{a.n_embd}", **e, "vs_1process": ratio, f"vs_1process_x{m}": ratio_m})
            lines.append([f"{L}x{a.n_embd}", e["config"], e["mechanism"], f"{e['step_s']:.3f}", f"{ratio:.2f}x",
                          f"{ratio_m:.2f}x", fmt(e.get("order_r0")), fmt(e.get("order_r1"))])
        print(table(["model", "configuration", "mechanism", "step_s", "vs 1 process", f"vs 1 process x{m}",
                     "order r0", "order r1"], lines), flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--real", action="store_true", help="the schedules on the real GPT (see above)")
    ap.add_argument("--real-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--one-process", action="store_true", help="--real: no mpirun job (see above)")
    ap.add_argument("--baseline-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--n-layer", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--stages", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--microbatches", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--usec", type=float, default=5000.0)
    ap.add_argument("--mechanisms", nargs="+", default=list(MECHANISMS), choices=list(MECHANISMS))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--schedules", nargs="+", choices=list(REAL_SCHEDULES),
                    help="--real: only these schedules (default: all)")
    ap.add_argument("--sched", default="tt-cp")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = ap.parse_args()
    if args.real and min(args.n_layer) < 4:  # interleaved-1f1b, zb-v, dualpipe-v: 2 ranks x 2 chunks
        ap.error(f"--real needs --n-layer >= 4 (2 ranks x 2 virtual stages of at least one block), "
                 f"got {min(args.n_layer)}")
    if args.real and (args.micro_batches < 1 or args.batch % args.micro_batches):
        ap.error(f"--batch {args.batch} must split into --micro-batches {args.micro_batches} equal parts")
    if args.real_worker:
        args.n_layer = args.n_layer[0]
        real_worker(args)
        return 0
    if args.real:
        if args.mechanisms == list(MECHANISMS):
            args.mechanisms = ["priority", "deps"]
        return real_main(args)
    if min(args.stages + args.microbatches + [args.reps]) < 1 or not args.usec > 0:
        ap.error("--stages, --microbatches, --reps must be >= 1 and --usec > 0")
    print(environment(), flush=True)
    rows = measure(args)
    print()
    print(table(COLUMNS, [[fmt(r[c]) for c in COLUMNS] for r in rows]))
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, "pipeline_schedules")
    with open(base + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    plot(rows, base + ".png")
    print(f"\nCSV and PNG: {base}.csv (.png)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
