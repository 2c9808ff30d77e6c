"""The scheduling experiment: policy x tile size x workers x priority mode over a workload.

For every configuration: a fresh runtime (profiling on), the workload's tensors, perf-model
calibration steps first (dm* policies learn their history models), then ``reps`` recorded
steps; each step's trace gives makespan, GFLOP/s, the critical-path and area bounds,
efficiency = bound / makespan and the mean worker idle fraction.  Medians are reported.
Writes CSV and a PNG, returns the rows; ``format_table`` prints them.

Priority modes: none (every task 0), hints (backward and optimizer above forward:
tiletrain.pipeline.ONE_F_ONE_B), bottom-level (each task's critical-path priority from a
recorded step, replayed on the next steps).  Policies that ignore priorities (range
[0, 0]: eager, random) only run mode none.
"""
from __future__ import annotations

import contextlib
import csv
import os
import statistics
import time
from pathlib import Path

import numpy as np

PRIORITY_MODES = ("none", "hints", "bottom-level")
COLUMNS = ["workload", "sched", "tile", "ncpu", "prio", "reps", "ntasks", "makespan_ms", "wall_ms", "gflops",
           "critical_path_ms", "area_ms", "bound_ms", "efficiency", "idle_pct"]


def _one_config(workload: str, sched: str, tile: int, ncpu: int, prios, reps: int, calib: int, params: dict,
                log) -> list[dict]:
    import tiletrain as tt
    from ..pipeline.priorities import ONE_F_ONE_B, bottom_level_priorities, priority_hints, priority_plan
    from ..trace.metrics import metrics
    from ..trace.records import recording
    from .workloads import make

    rows = []
    with tt.init(ncpu=ncpu, sched=sched, profile=True) as rt:
        lo, hi = rt.priority_range()
        wl = make(workload, tile, **params)
        wl.setup()
        tt.wait()
        for _ in range(calib):  # perf-model calibration / warm-up
            wl.step()
            tt.wait()
        for mode in prios:
            if mode != "none" and lo == hi:
                log(f"  {sched}: priority range [{lo}, {hi}] (ignores priorities): skipping prio={mode}")
                continue
            plan = None
            if mode == "bottom-level":
                with recording() as rec:
                    wl.step()
                plan = bottom_level_priorities(rec.trace)
            ms = []
            for _ in range(reps):
                tt.wait()
                ctx = (priority_hints(ONE_F_ONE_B) if mode == "hints" else
                       priority_plan(plan) if mode == "bottom-level" else contextlib.nullcontext())
                with recording() as rec:
                    t0 = time.perf_counter()
                    with ctx:
                        wl.step()
                    tt.wait()
                    wall = time.perf_counter() - t0
                m = metrics(rec.trace)
                ms.append((m, wall))
            med = statistics.median

            def mm(f):
                return med([f(m) for m, _ in ms])
            rows.append({
                "workload": workload, "sched": rt.sched, "tile": tile, "ncpu": ncpu, "prio": mode,
                "reps": reps,
                "ntasks": ms[0][0].ntasks, "makespan_ms": mm(lambda m: m.makespan_us) / 1e3,
                "wall_ms": med([w for _, w in ms]) * 1e3, "gflops": mm(lambda m: m.gflops),
                "critical_path_ms": mm(lambda m: m.critical_path_us) / 1e3,
                "area_ms": mm(lambda m: m.area_bound_us) / 1e3,
                "bound_ms": mm(lambda m: m.bound_us) / 1e3, "efficiency": mm(lambda m: m.efficiency),
                "idle_pct": 100 * mm(lambda m: m.mean_idle_fraction)})
            log(f"  {workload} sched={rt.sched} tile={tile} ncpu={ncpu} prio={mode}: "
                f"makespan {rows[-1]['makespan_ms']:.2f} ms, efficiency {rows[-1]['efficiency']:.2f}")
        wl.teardown()
    return rows


def run_sweep(workload: str = "gemm", scheds=("lws", "dmda", "tt-cp"), tiles=(256, 512), ncpus=(2,),
              prios=("none",), reps: int = 5, calib: int = 3, params: dict | None = None,
              out_dir: str | os.PathLike | None = "benchmarks/results", log=print) -> list[dict]:
    """Run the grid; write <out_dir>/sched_<workload>.csv and .png (out_dir None: no files)."""
    from ..config import RuntimeConfig
    if reps < 1 or calib < 0:
        raise ValueError(f"reps must be >= 1 and calib >= 0, got {reps}, {calib}")
    for p in prios:
        if p not in PRIORITY_MODES:
            raise ValueError(f"unknown priority mode {p!r}; choose from {', '.join(PRIORITY_MODES)}")
    for s in scheds:
        RuntimeConfig(sched=s).validate()  # unknown policy names fail before anything runs
    import tiletrain as tt
    if tt.is_initialized():
        tt.shutdown()
    rows: list[dict] = []
    for ncpu in ncpus:
        for tile in tiles:
            for sched in scheds:
                rows += _one_config(workload, sched, tile, ncpu, prios, reps, calib, dict(params or {}), log)
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_csv(rows, out / f"sched_{workload}.csv")
        try:
            plot(rows, out / f"sched_{workload}.png", title=f"{workload}: medians of {reps} steps")
        except ImportError as exc:
            log(f"(no PNG: {exc})")
    return rows


def write_csv(rows: list[dict], path) -> Path:
    path = Path(path)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items() if k in COLUMNS})
    return path


def format_table(rows: list[dict]) -> str:
    head = ["sched", "tile", "ncpu", "prio", "tasks", "makespan ms", "wall ms", "GFLOP/s", "bound ms",
            "efficiency", "idle %"]
    cells = [head] + [[r["sched"], r["tile"], r["ncpu"], r["prio"], r["ntasks"], f"{r['makespan_ms']:.2f}",
                       f"{r['wall_ms']:.2f}", f"{r['gflops']:.1f}", f"{r['bound_ms']:.2f}",
                       f"{r['efficiency']:.2f}", f"{r['idle_pct']:.1f}"] for r in rows]
    cells = [[str(c) for c in row] for row in cells]
    widths = [max(len(row[i]) for row in cells) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def plot(rows: list[dict], path, title: str = "") -> Path:
    from ..trace.plot import _figure
    groups = sorted({(r["tile"], r["ncpu"]) for r in rows})
    fig = _figure(figsize=(4.5 * len(groups) + 1, 4))
    axes = fig.subplots(1, len(groups), squeeze=False)
    for ax, (tile, ncpu) in zip(axes[0], groups):
        sub = [r for r in rows if r["tile"] == tile and r["ncpu"] == ncpu]
        labels = [f"{r['sched']}\n{r['prio']}" for r in sub]
        x = np.arange(len(sub))
        ax.bar(x, [r["makespan_ms"] for r in sub], color="#30638e", label="makespan")
        ax.scatter(x, [r["bound_ms"] for r in sub], color="#d1495b", zorder=3, label="lower bound")
        for xi, r in zip(x, sub):
            ax.annotate(f"{r['efficiency']:.2f}", (xi, r["makespan_ms"]), ha="center", va="bottom",
                        fontsize=8)
        ax.set_xticks(x)
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_title(f"tile {tile}, {ncpu} workers", fontsize=9)
        ax.set_ylabel("ms")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title + " (numbers: efficiency = bound / makespan)", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    return path


__all__ = ["run_sweep", "format_table", "write_csv", "plot", "PRIORITY_MODES", "COLUMNS"]
