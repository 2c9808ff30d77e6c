"""Every built-in pipeline schedule on sleeping synthetic tasks (F = I = W = --usec, B = 2x):
measured idle fraction against its paper's formula, peak live activations, and how much of
the written order each StarPU mechanism kept (submission order; + priorities from the action
order; + per-rank ordering dependencies).  One fresh runtime per stage count (p workers, so
p may exceed the cores); --reps runs per configuration, the median (by makespan) reported.

    python benchmarks/pipeline_schedules.py [--stages 2 4] [--microbatches 4 8 16] [--usec 5000]
                                            [--mechanisms submit priority deps] [--reps 3]
                                            [--out benchmarks/results]

Prints a table and writes pipeline_schedules.csv and .png under --out (gitignored).
"""
from __future__ import annotations

import argparse
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from _common import environment, table  # noqa: E402

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stages", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--microbatches", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--usec", type=float, default=5000.0)
    ap.add_argument("--mechanisms", nargs="+", default=list(MECHANISMS), choices=list(MECHANISMS))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sched", default="tt-cp")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = ap.parse_args()
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
