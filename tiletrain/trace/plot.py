"""A quick look at a trace: Gantt chart (one row per worker, tasks coloured by phase) over a
utilisation curve (busy workers over time).  Needs matplotlib (pip install 'tiletrain[trace]')."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .records import Trace

PHASE_COLORS = {"fwd": "#4c9f38", "bwd": "#d1495b", "wgrad": "#edae49", "opt": "#8d5a97", "": "#7f8c8d"}
_OTHER = ["#00798c", "#30638e", "#003d5b", "#b56576", "#6d597a"]


def _figure(needs: str = "plotting traces needs", **kw):
    """A matplotlib Figure drawn off-screen (no pyplot: the user's backend is left alone);
    without matplotlib an ImportError beginning with ``needs`` (what is being drawn)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(f"{needs} matplotlib: pip install 'tiletrain[trace]' "
                          "(or pip install matplotlib)") from None
    return Figure(**kw)


def utilisation(trace: Trace, bins: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """(time points in µs, mean number of busy workers in each bin)."""
    t = trace.tasks
    t0, t1 = float(t["start"].min()), float(t["end"].max())
    edges = np.linspace(t0, t1, bins + 1)
    busy = np.zeros(bins)
    width = edges[1] - edges[0] if t1 > t0 else 1.0
    for s, e in zip(t["start"], t["end"]):
        lo = np.clip(edges[:-1], s, e)
        hi = np.clip(edges[1:], s, e)
        busy += (hi - lo) / width
    return 0.5 * (edges[:-1] + edges[1:]), busy


def gantt(trace: Trace, path: str | os.PathLike, title: str | None = None) -> Path:
    """Write a PNG: Gantt chart by worker, coloured by phase, and utilisation below."""
    if len(trace) == 0:
        raise ValueError("gantt: the trace has no tasks")
    t = trace.tasks
    t0 = float(t["start"].min())
    workers = sorted({int(w["id"]) for w in trace.workers} | {int(w) for w in t["worker"]})
    row = {w: i for i, w in enumerate(workers)}
    phases = [str(p) for p in np.unique(t["phase"])]
    colors = {p: PHASE_COLORS.get(p, _OTHER[i % len(_OTHER)]) for i, p in enumerate(phases)}
    fig = _figure(figsize=(11, 2.0 + 0.45 * len(workers) + 1.6))
    ax, ax2 = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [max(1, len(workers)), 2]})
    scale = 1e-3  # ms
    for p in phases:
        sel = t["phase"] == p
        bars = [((s - t0) * scale, (e - s) * scale) for s, e in zip(t["start"][sel], t["end"][sel])]
        ys = [row[int(w)] for w in t["worker"][sel]]
        for y in sorted(set(ys)):
            ax.broken_barh([b for b, yy in zip(bars, ys) if yy == y], (y - 0.4, 0.8), facecolors=colors[p],
                           edgecolor="black", linewidth=0.2)
    names = {int(w["id"]): w.get("name", str(w["id"])) for w in trace.workers}
    ax.set_yticks(range(len(workers)))
    ax.set_yticklabels([f"{w}: {names.get(w, '')}"[:28] for w in workers])
    ax.invert_yaxis()
    from matplotlib.patches import Rectangle
    handles = [Rectangle((0, 0), 1, 1, color=colors[p]) for p in phases]
    ax.legend(handles, [p or "untagged" for p in phases], loc="upper right", fontsize=8, ncol=len(phases))
    ax.set_title(title or f"{len(trace)} tasks, sched={trace.meta.get('sched', '?')}")
    x, u = utilisation(trace)
    ax2.fill_between((x - t0) * scale, u, step="mid", color="#30638e", alpha=0.6)
    ax2.set_ylim(0, max(1, len(workers)) * 1.05)
    ax2.set_ylabel("busy workers")
    ax2.set_xlabel("time (ms)")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


__all__ = ["gantt", "utilisation", "PHASE_COLORS"]
