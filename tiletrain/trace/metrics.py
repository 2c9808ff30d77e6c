"""Schedule metrics: pure functions of a Trace (tiletrain.trace.records).

  makespan          last end - first start (µs) of the tasks in the trace
  busy / idle       per worker: time running tasks / the rest of the makespan window
  critical path     longest chain of recorded durations through the recorded DAG: no
                    schedule of these tasks can be shorter (a lower bound)
  area bound        total work / number of workers: the other lower bound
  bound             max(critical path, area); efficiency = bound / makespan (<= 1)
  compact           the same per-worker order with the recorded durations, each task started
                    as soon as its worker and its predecessors allow: what the order alone
                    gives, without the latency of the runtime or of the host's thread wake-ups
  bubble per stage  idle time of the workers that ran a stage's tasks (the `stage` tag; the
                    worker when tasks carry no stage): idle_over_total = idle / (window x
                    workers), bubble_over_ideal = idle / busy (the two definitions in use)
  idle by cause     each worker's idle time before each of its tasks, by what that task was
                    still waiting for: a predecessor ("dependencies"), its submission by the
                    submitting thread ("submission"), or nothing -- ready, not yet started
                    ("ready"): the runtime's latency, or the worker's core lent to another
                    thread (the submitting thread where threads outnumber cores); and the
                    time after a worker's last task ("tail"); fractions of window x workers
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from .records import Trace


def _need_tasks(trace: Trace, what: str) -> None:
    if len(trace) == 0:
        raise ValueError(f"{what}: the trace has no tasks")


def makespan(trace: Trace) -> float:
    _need_tasks(trace, "makespan")
    return float(trace.tasks["end"].max() - trace.tasks["start"].min())


def busy_per_worker(trace: Trace) -> dict[int, float]:
    t = trace.tasks
    out: dict[int, float] = {int(w["id"]): 0.0 for w in trace.workers}
    for w in np.unique(t["worker"]):
        out[int(w)] = float((t["end"] - t["start"])[t["worker"] == w].sum())
    return out


def idle_fractions(trace: Trace) -> dict[int, float]:
    """Per worker: 1 - busy / makespan, over the window [first start, last end].  Workers that
    ran nothing count (idle 1.0) when the trace lists them."""
    T = makespan(trace)
    return {w: (1.0 - b / T) if T > 0 else 0.0 for w, b in busy_per_worker(trace).items()}


IDLE_CAUSES = ("dependencies", "submission", "ready", "tail")


def idle_causes(trace: Trace, nworkers: int | None = None) -> dict[str, float]:
    """The workers' idle time split by cause (the module docstring), as fractions of the
    window [first start, last end] x ``nworkers`` (default: the workers the trace lists, or
    those that ran tasks); the four add up to the mean idle fraction.  A task without a
    recorded submission time (a Chrome file from elsewhere) counts as submitted when it
    started, so its gap reads as submission."""
    _need_tasks(trace, "idle_causes")
    t = trace.tasks
    start, end, submit = t["start"], t["end"], t["submit"]
    T0, T1 = float(start.min()), float(end.max())
    # the end of each task's last predecessor (-inf: none)
    n = t["ndeps"].astype(np.int64)
    owner = np.repeat(np.arange(len(t)), n)
    pos = np.repeat(t["dep_start"], n) + np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
    dep_ready = np.full(len(t), -np.inf)
    np.maximum.at(dep_ready, owner, end[trace.deps[pos]])
    out = dict.fromkeys(IDLE_CAUSES, 0.0)
    workers = np.unique(t["worker"])
    for w in workers:
        idx = np.flatnonzero(t["worker"] == w)
        idx = idx[np.argsort(start[idx], kind="stable")]
        g1 = start[idx]
        g0 = np.concatenate([[T0], np.maximum.accumulate(end[idx])[:-1]])  # free from here
        gap = g1 > g0
        ready = np.maximum(dep_ready[idx], submit[idx])
        a = np.clip(ready, g0, g1)  # waiting until a, then ready but not started until g1
        waiting = np.where(gap, a - g0, 0.0)
        by_submit = submit[idx] >= dep_ready[idx]
        out["submission"] += float(waiting[by_submit].sum())
        out["dependencies"] += float(waiting[~by_submit].sum())
        out["ready"] += float(np.where(gap, g1 - a, 0.0).sum())
        out["tail"] += T1 - float(end[idx].max())
    nw = nworkers or len(trace.workers) or len(workers)
    out["tail"] += max(0, nw - len(workers)) * (T1 - T0)  # listed workers that ran nothing
    window = (T1 - T0) * nw
    return {k: v / window if window > 0 else 0.0 for k, v in out.items()}


def successors(trace: Trace) -> list[list[int]]:
    succ: list[list[int]] = [[] for _ in range(len(trace))]
    t = trace.tasks
    owner = np.repeat(np.arange(len(trace)), t["ndeps"])
    for d, o in zip(trace.deps.tolist(), owner.tolist()):
        succ[d].append(o)
    return succ


def _earliest_finish(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Longest path ending at each task (µs, with its own duration) and the predecessor on it."""
    dur = trace.duration
    n = len(trace)
    ef = np.zeros(n)
    via = np.full(n, -1, dtype=np.int64)
    starts, counts, deps = trace.tasks["dep_start"], trace.tasks["ndeps"], trace.deps
    for i in range(n):  # predecessors always have smaller ids: one pass in id order
        c = counts[i]
        if c:
            d = deps[starts[i]:starts[i] + c]
            k = int(np.argmax(ef[d])) if c > 1 else 0
            via[i] = d[k]
            ef[i] = ef[d[k]] + dur[i]
        else:
            ef[i] = dur[i]
    return ef, via


def critical_path(trace: Trace) -> tuple[float, list[int]]:
    """Length (µs) and task ids of the longest chain of recorded durations through the DAG."""
    _need_tasks(trace, "critical path")
    ef, via = _earliest_finish(trace)
    i = int(np.argmax(ef))
    length = float(ef[i])
    path = []
    while i >= 0:
        path.append(i)
        i = int(via[i])
    return length, path[::-1]


def compact(trace: Trace) -> Trace:
    """The trace with each worker's tasks in the recorded order and with their recorded
    durations, each started at the end of its worker's previous task or of its last
    predecessor, whichever is later (times from the first start).  The gaps that remain are
    the order's; the ones removed were the runtime's or the host's (a sleeper woken late)."""
    _need_tasks(trace, "compact")
    t = trace.tasks
    dur = trace.duration
    end = np.zeros(len(t))
    free: dict[int, float] = {}
    t0 = float(t["start"].min())
    for i in np.lexsort((t["id"], t["start"])):       # each worker's tasks in the order they ran
        w = int(t["worker"][i])
        preds = trace.predecessors(int(i))
        ready = max(free.get(w, 0.0), float(end[preds].max()) if len(preds) else 0.0)
        end[i] = ready + dur[i]
        free[w] = end[i]
    out = t.copy()
    out["start"] = t0 + end - dur
    out["end"] = t0 + end
    return Trace(out, trace.deps.copy(), list(trace.workers), dict(trace.meta))


def bottom_levels(trace: Trace) -> np.ndarray:
    """Per task: the longest chain of recorded durations from the task (included) to the end
    of the DAG.  The classic critical-path priority (HLFET): larger = more urgent."""
    dur = trace.duration
    bl = dur.copy()
    succ = successors(trace)
    for i in range(len(trace) - 1, -1, -1):  # successors have larger ids
        if succ[i]:
            bl[i] = dur[i] + max(bl[s] for s in succ[i])
    return bl


def area_bound(trace: Trace, nworkers: int | None = None) -> float:
    """Total task time / workers (µs).  nworkers: the trace's workers by default."""
    _need_tasks(trace, "area bound")
    n = nworkers or len(trace.workers) or len(np.unique(trace.tasks["worker"]))
    if n < 1:
        raise ValueError("area bound: no worker")
    return float(trace.duration.sum() / n)


def stage_bubbles(trace: Trace) -> dict[int, dict]:
    """Per stage (the `stage` tag, or the worker when no task has one): busy and idle time
    (µs) of the workers that ran it within the makespan window, idle_over_total and
    bubble_over_ideal."""
    _need_tasks(trace, "bubbles")
    t = trace.tasks
    T = makespan(trace)
    tagged = (t["stage"] >= 0).any()
    key = t["stage"] if tagged else t["worker"]
    out = {}
    for s in np.unique(key[key >= 0]):
        sel = key == s
        nw = len(np.unique(t["worker"][sel]))
        busy = float((t["end"] - t["start"])[sel].sum())
        idle = max(0.0, T * nw - busy)
        out[int(s)] = {"workers": nw, "busy_us": busy, "idle_us": idle,
                       "idle_over_total": idle / (T * nw) if T > 0 else 0.0,
                       "bubble_over_ideal": idle / busy if busy > 0 else float("inf")}
    return out


@dataclass
class Metrics:
    ntasks: int
    nworkers: int
    makespan_us: float
    work_us: float
    gflops: float                     # GFLOP/s over the makespan
    critical_path_us: float
    area_bound_us: float
    bound_us: float
    efficiency: float                 # bound / makespan
    idle_fraction: dict = field(default_factory=dict)    # worker -> fraction
    mean_idle_fraction: float = 0.0
    idle_causes: dict = field(default_factory=dict)      # cause -> fraction (idle_causes)
    bubbles: dict = field(default_factory=dict)          # stage (or worker) -> {...}
    phases: dict = field(default_factory=dict)           # phase -> task time (µs)

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return format_metrics(self)


def metrics(trace: Trace, nworkers: int | None = None) -> Metrics:
    """All the numbers at once (see the module docstring)."""
    _need_tasks(trace, "metrics")
    T = makespan(trace)
    cp, _ = critical_path(trace)
    nw = nworkers or len(trace.workers) or len(np.unique(trace.tasks["worker"]))
    area = area_bound(trace, nw)
    bound = max(cp, area)
    idle = idle_fractions(trace)
    dur = trace.duration
    phases = {}
    for ph in np.unique(trace.tasks["phase"]):
        phases[str(ph) or "untagged"] = float(dur[trace.tasks["phase"] == ph].sum())
    return Metrics(
        ntasks=len(trace), nworkers=nw, makespan_us=T, work_us=float(dur.sum()),
        gflops=float(trace.tasks["flops"].sum() / (T * 1e3)) if T > 0 else 0.0,
        critical_path_us=cp, area_bound_us=area, bound_us=bound, efficiency=bound / T if T > 0 else 1.0,
        idle_fraction=idle, mean_idle_fraction=float(np.mean(list(idle.values()))) if idle else 0.0,
        idle_causes=idle_causes(trace, nw), bubbles=stage_bubbles(trace), phases=phases)


def format_metrics(m: Metrics) -> str:
    lines = [
        f"tasks {m.ntasks} on {m.nworkers} workers; makespan {m.makespan_us / 1e3:.3f} ms, "
        f"work {m.work_us / 1e3:.3f} ms, {m.gflops:.2f} GFLOP/s",
        f"bounds: critical path {m.critical_path_us / 1e3:.3f} ms, area {m.area_bound_us / 1e3:.3f} ms; "
        f"efficiency {m.efficiency:.3f}",
        "idle per worker: " + ", ".join(f"{w}: {f:.1%}" for w, f in sorted(m.idle_fraction.items())),
    ]
    if m.idle_causes:
        lines.append("idle by cause (of all workers' time): " + ", ".join(
            f"{c} {m.idle_causes[c]:.1%}" for c in IDLE_CAUSES))
    if m.bubbles:
        lines.append("bubble per stage (idle/total, bubble/ideal): " + ", ".join(
            f"{s}: {b['idle_over_total']:.1%}, {b['bubble_over_ideal']:.2f}"
            for s, b in sorted(m.bubbles.items())))
    if m.phases:
        lines.append("time per phase: " + ", ".join(f"{p} {v / 1e3:.3f} ms"
                                                    for p, v in sorted(m.phases.items())))
    return "\n".join(lines)


__all__ = ["IDLE_CAUSES", "Metrics", "metrics", "format_metrics", "makespan", "busy_per_worker", "idle_fractions",
           "idle_causes",
           "critical_path", "bottom_levels", "area_bound", "stage_bubbles", "successors"]
