"""Every built-in pipeline schedule on sleeping synthetic tasks (F = I = W = --usec, B = 2x):
measured idle fraction against its paper's formula, peak live activations, and how much of
the written order each StarPU mechanism kept (submission order; + priorities from the action
order; + per-rank ordering dependencies).  One fresh runtime per stage count (p workers, so
p may exceed the cores); --reps runs per configuration, the median (by makespan) reported.

    python benchmarks/pipeline_schedules.py [--stages 2 4] [--microbatches 4 8 16] [--usec 5000]
                                            [--mechanisms submit priority deps] [--reps 3]
                                            [--out benchmarks/results]

Prints a table and writes pipeline_schedules.csv and .png under --out (gitignored).

--real: the schedules on the real GPT instead (tiletrain.pipeline.model.ModelPipeline).
First one process with 2 workers running every schedule x mechanism (--micro-batches) on 2
worker groups of 1 worker, against its own plain step (2 workers, one micro-batch) in the same
process.  Then the mpirun protocol of benchmarks/_common.py (mpi_scaling.py's too): one-process
jobs (the plain step, and the same --micro-batches without a pipeline) alternate with
`mpirun -np 2` jobs (1 worker per rank, ranks as stages, docs/howto/mpirun.md:
rank 0 alone, data mode, pipeline mode as ``tiletrain train --dist pipeline`` steps it
(tiletrain.pipeline.training: 1F1B through ModelPipeline), every schedule x mechanism), --repeats mpirun jobs each between two one-process jobs; in every job
the configurations step round-robin (--steps rounds after --warmup; in each round a
configuration steps twice and the second step is timed, as in a training loop that steps one
model, not right after another model's step); the ratio of an mpirun configuration is the
mean of the one-process steps before and after its job over its step, the median (range) over
the jobs reported; the order fraction each rank kept comes from one recorded step.

    python benchmarks/pipeline_schedules.py --real [--n-layer 4 8] [--n-embd 256] [--batch 8]
        [--seq-len 128] [--micro-batches 4] [--mechanisms priority deps] [--steps 4] [--warmup 2]
        [--repeats 3] [--schedules zb-h1 emergent emergent-zb] [--one-process]

--one-process: only the first part (the plain step and the schedules on 2 worker groups of
one process), no mpirun job.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from _common import (BASELINE, alternate_jobs, compare, emit_result, environment, launch_job,  # noqa: E402
                     median, protocol_init, ratio_text, reference_configs, step_data, table, timed_rounds,
                     timed_step)

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
    """One job of the protocol (benchmarks/_common.py), in one process or on one rank of the
    mpirun job: prints RESULT lines.  --baseline-only: the protocol's one-process job (its
    reference configurations only); else, in one process, those and every schedule on 2 worker
    groups."""
    import numpy as np

    from tiletrain.nn import GPT, GPTConfig
    from tiletrain.optim import AdamW
    from tiletrain.parallel import place, using
    from tiletrain.pipeline.model import ModelPipeline, action_times, pipeline_plan, rank_order_fraction
    from tiletrain.trace.metrics import compact
    from tiletrain.trace.records import recording

    protocol_init(a.sched)
    me, world = tt.rank(), tt.world_size()
    cfg = GPTConfig(vocab_size=256, block_size=a.seq_len, n_layer=a.n_layer, n_head=4, n_embd=a.n_embd)
    data = step_data(a.batch, a.seq_len)
    m = a.micro_batches

    def split(ids, k):
        return [ids[j * a.batch // k:(j + 1) * a.batch // k] for j in range(k)]

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

    configs = [(name, mech, step, None) for name, mech, step in reference_configs(cfg, m)]
    if world > 1 or not a.baseline_only:   # one process: worker groups as the schedule's ranks
        for name, kw in REAL_SCHEDULES.items():
            if a.schedules and name not in a.schedules:
                continue
            s = schedules.get(name, max(world, 2), m, **kw)
            for mech in (a.mechanisms if s.ordered else ["priority"]):
                configs.append((name, mech if s.ordered else "dataflow", scheduled(s, mech), s))

    times = timed_rounds([c[2] for c in configs], data, a.steps, a.warmup)
    for k, (name, mech, step, s) in enumerate(configs):
        res = {"step_s": median(times[k])}
        if world == 1 and not a.baseline_only:
            # the order alone: recorded durations without the gaps a loaded host added (median of 3)
            spans = []
            for i in range(3):
                with recording() as rec:
                    timed_step(step, data[i])
                c = compact(rec.trace).tasks
                spans.append(float(c["end"].max() - c["start"].min()) / 1e6)
            res["compact_s"] = float(np.median(spans))
        if s is not None and s.ordered:   # the order each rank kept, from one recorded step
            if world > 1:
                with recording() as rec:
                    timed_step(step, data[0])
            start, _ = action_times(s, rec.trace)
            for r in range(s.ranks) if world == 1 else [me]:
                res[f"order_r{r}"] = rank_order_fraction(s, start, r)
        emit_result(rank=me, config=name, mechanism=mech, **res)
    tt.shutdown()


def real_args(a, n_layer: int, baseline_only: bool = False) -> list[str]:
    return [sys.executable, __file__, "--real-worker", "--n-layer", str(n_layer), "--n-embd", str(a.n_embd),
            "--batch", str(a.batch), "--seq-len", str(a.seq_len), "--micro-batches", str(a.micro_batches),
            "--steps", str(a.steps), "--warmup", str(a.warmup), "--sched", a.sched,
            "--mechanisms", *a.mechanisms] + (["--baseline-only"] if baseline_only else []) + \
        (["--schedules", *a.schedules] if a.schedules else [])


def real_main(a) -> int:
    print(environment(), flush=True)
    m = a.micro_batches
    for L in a.n_layer:
        # the plain step(s), then the schedules on 2 worker groups
        one, _ = launch_job(real_args(a, L), 1, a.timeout)
        plain = next(r for r in one if r["config"] == BASELINE)
        lines = [[f"{L}x{a.n_embd}", r["config"], r["mechanism"], f"{r['step_s']:.3f}",
                  f"{plain['step_s'] / r['step_s']:.2f}x", f"{plain['compact_s'] / r['compact_s']:.2f}x",
                  fmt(r.get("order_r0")), fmt(r.get("order_r1"))] for r in one]
        print(f"\nGPT {L} x {a.n_embd}: one process, the schedules on 2 worker groups of 1 worker "
              "(ratio: to the plain step of the same process; compact: one recorded step without the gaps "
              "the host added, trace.metrics.compact)\n"
              + table(["model", "configuration", "mechanism", "step_s", "vs plain", "compact vs plain", "order r0",
                       "order r1"], lines), flush=True)
        if a.one_process:
            continue

        def launch(nprocs: int) -> list[dict]:
            res, _ = launch_job(real_args(a, L, baseline_only=nprocs == 1), nprocs, a.timeout)
            base = [r for r in res if r["config"] == BASELINE or r.get("rank", 0) == 0 and
                    r["config"] == "rank 0 alone (1 worker)"]
            print(f"  {'mpirun -np 2' if nprocs > 1 else 'one process '}: "
                  + ", ".join(f"{r['config']} {r['step_s']:.3f} s" for r in base), flush=True)
            return res

        base, jobs = alternate_jobs(launch, a.repeats)
        against = [BASELINE] + ([f"{BASELINE} x{m}"] if m > 1 else [])
        cmp = [compare(base, jobs, ref) for ref in against]
        print(f"\nGPT {L} x {a.n_embd}, batch {a.batch} x {a.seq_len}, {m} micro-batches in pipeline rows, "
              f"sched {a.sched}; per job the median of {a.steps} round-robin rounds after {a.warmup}; "
              f"{a.repeats} mpirun jobs alternating with {a.repeats + 1} one-process jobs: medians over the "
              "jobs, ratio median (range)", flush=True)
        lines = []
        for k, e in enumerate(cmp[0]):
            xm = cmp[-1][k]
            lines.append([f"{L}x{a.n_embd}", e["config"], e["mechanism"], f"{e['step_s']:.3f}",
                          ratio_text(e["ratios"]), ratio_text(xm["ratios"]), fmt(e.get("order_r0")),
                          fmt(e.get("order_r1"))])
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
    ap.add_argument("--repeats", type=int, default=3,
                    help="--real: mpirun jobs, each between two one-process jobs")
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
