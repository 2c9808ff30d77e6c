"""Chrome trace-event JSON (opens in https://ui.perfetto.dev and chrome://tracing).

One process per rank, one thread (track) per worker; each task is a complete event ("X")
whose args carry the whole record (id, predecessors, priority, FLOPs, tags, submit time),
so that ``load(save(trace))`` gives the trace back.  Perfetto colours a slice by a hash of
its name and ignores ``cname``: slices are therefore named after their phase tag ("fwd",
"bwd", "opt", ...: one colour per phase) and fall back to the kernel name for untagged
tasks; the kernel is the event's category.  chrome://tracing also uses the ``cname`` colours
below.  ``flows=True`` adds the DAG as flow arrows (large files).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from .records import TASK_DTYPE, Trace, TraceError

# chrome://tracing reserved colour names per phase
PHASE_CNAME = {"fwd": "good", "bwd": "bad", "wgrad": "olive", "opt": "yellow", "": "generic_work"}
FORMAT = "tiletrain-trace-1"


def to_chrome(trace: Trace, flows: bool = False) -> dict:
    t = trace.tasks
    events: list[dict] = []
    ranks = sorted({int(r) for r in t["rank"]} | {int(w.get("rank", 0)) for w in trace.workers} or {0})
    for r in ranks:
        events.append({"ph": "M", "name": "process_name", "pid": r, "tid": 0, "args": {"name": f"rank {r}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": r, "tid": 0,
                       "args": {"sort_index": r}})
    names = {int(w["id"]): w.get("name", f"worker {w['id']}") for w in trace.workers}
    for w in sorted(set(names) | {int(x) for x in t["worker"]}):
        rank = next((int(x.get("rank", 0)) for x in trace.workers if int(x["id"]) == w), 0)
        events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": w,
                       "args": {"name": f"{w}: {names.get(w, f'worker {w}')}"}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": w,
                       "args": {"sort_index": w}})
    for i in range(len(t)):
        r = t[i]
        phase = str(r["phase"])
        kernel = str(r["kernel"])
        events.append({
            "name": phase or kernel, "cat": kernel, "ph": "X", "pid": int(r["rank"]), "tid": int(r["worker"]),
            "ts": float(r["start"]), "dur": float(r["end"] - r["start"]),
            "cname": PHASE_CNAME.get(phase, "generic_work"),
            "args": {"id": int(r["id"]), "kernel": kernel, "phase": phase,
                     "deps": trace.predecessors(i).tolist(), "priority": int(r["priority"]),
                     "flops": float(r["flops"]), "layer": int(r["layer"]), "microbatch": int(r["microbatch"]),
                     "stage": int(r["stage"]), "submit": float(r["submit"]), "memnode": int(r["memnode"]),
                     "iargs": r["iargs"].tolist(), "cpu": float(r["cpu"])},
        })
    if flows:
        for i in range(len(t)):
            for d in trace.predecessors(i).tolist():
                events.append({"ph": "s", "id": f"{d}-{i}", "name": "dep", "cat": "dep",
                               "pid": int(t["rank"][d]), "tid": int(t["worker"][d]),
                               "ts": float(t["end"][d])})
                events.append({"ph": "f", "bp": "e", "id": f"{d}-{i}", "name": "dep", "cat": "dep",
                               "pid": int(t["rank"][i]), "tid": int(t["worker"][i]),
                               "ts": float(t["start"][i])})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"format": FORMAT, "workers": trace.workers, "meta": trace.meta}}


def save(trace: Trace, path: str | os.PathLike, flows: bool = False) -> Path:
    """Write the Chrome trace-event JSON file; returns its path."""
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(to_chrome(trace, flows=flows), f, separators=(",", ":"))
    return path


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _workers(other: dict) -> list[dict]:
    """otherData.workers of a trace file: [{"id": int, "name": str, "rank": int, ...}]."""
    workers = other.get("workers")
    if workers is None:
        return []
    if not isinstance(workers, list) or not all(
            isinstance(w, dict) and _int(w.get("id")) and _int(w.get("rank", 0))
            and isinstance(w.get("name", ""), str) for w in workers):
        raise TraceError("otherData.workers must be a list of objects with an int id (and an int rank, a "
                         "string name)")
    return workers


def from_chrome(doc) -> Trace:
    """A Trace from a parsed Chrome trace (a tiletrain file round-trips exactly; other
    traces give their complete events, without dependencies unless args.deps is there).
    TraceError says what is wrong with a document that is not one."""
    if isinstance(doc, dict):
        if "traceEvents" not in doc:
            raise TraceError("not a Chrome trace: a JSON object without 'traceEvents'")
        events, other = doc["traceEvents"], doc.get("otherData") or {}
    elif isinstance(doc, list):
        events, other = doc, {}
    else:
        raise TraceError(f"not a Chrome trace: the JSON top level is a {type(doc).__name__}")
    if not isinstance(events, list):
        raise TraceError("not a Chrome trace: 'traceEvents' is not a list")
    if not isinstance(other, dict) or not isinstance(other.get("meta") or {}, dict):
        raise TraceError("'otherData' and its 'meta' must be JSON objects")
    xs = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    if not xs:
        raise TraceError("the trace has no task events (no complete 'X' events)")
    ours = all(isinstance(e.get("args"), dict) and "id" in e["args"] for e in xs)
    n = len(xs)
    tasks = np.zeros(n, dtype=TASK_DTYPE)
    deps: list[int] = []
    i = 0
    try:
        if ours:
            if not all(_int(e["args"]["id"]) for e in xs):
                raise TraceError("task ids (args.id) must be ints")
            xs.sort(key=lambda e: e["args"]["id"])
        else:
            xs.sort(key=lambda e: (float(e.get("ts", 0.0)), str(e.get("name", ""))))
        for i, e in enumerate(xs):
            a = e.get("args") if isinstance(e.get("args"), dict) else {}
            if ours and a["id"] != i:
                raise TraceError(f"task ids are not 0..{n - 1} (found {a['id']} at position {i})")
            ts, dur = float(e["ts"]), float(e.get("dur", 0.0))
            if not (math.isfinite(ts) and math.isfinite(dur)):
                raise TraceError(f"task event {i}: ts {ts} and dur {dur} must be finite")
            if not isinstance(a.get("deps", []), list) or not isinstance(a.get("iargs", []), list):
                raise TraceError(f"task event {i}: args.deps and args.iargs must be lists")
            d = [int(x) for x in a.get("deps", [])]
            iargs = [int(x) for x in a.get("iargs", [])]
            if len(iargs) > 8:
                raise TraceError(f"task event {i}: args.iargs has {len(iargs)} values, at most 8")
            tasks[i] = (i, str(a.get("kernel", e.get("cat", e.get("name", "")))), str(a.get("phase", "")),
                        int(e.get("tid", 0)), int(a.get("memnode", 0)), int(e.get("pid", 0)),
                        int(a.get("priority", 0)), int(a.get("layer", -1)), int(a.get("microbatch", -1)),
                        int(a.get("stage", -1)), float(a.get("submit", ts)), ts, ts + dur,
                        float(a.get("flops", 0.0)), len(deps), len(d), iargs + [0] * (8 - len(iargs)),
                        float(a.get("cpu", -1.0)))
            deps.extend(d)
        deps_array = np.asarray(deps, dtype=np.int64)
    except TraceError:
        raise
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # (Overflow: beyond an int32/int64 field)
        raise TraceError(f"corrupt task event {i}: {exc!r:.300}") from None
    workers = _workers(other)
    if not workers:
        workers = [{"id": int(w), "name": f"worker {int(w)}", "rank": 0} for w in np.unique(tasks["worker"])]
    meta = dict(other.get("meta") or {})
    return Trace(tasks, deps_array, workers, meta)


def load(path: str | os.PathLike) -> Trace:
    """Read a trace file written by save() (or another Chrome trace-event JSON file)."""
    path = Path(path)
    if not path.exists():
        raise TraceError(f"trace file {path} does not exist")
    text = path.read_text(errors="replace")
    if not text.strip():
        raise TraceError(f"trace file {path} is empty")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"trace file {path} is not valid JSON ({exc.msg} at line {exc.lineno}, column "
                         f"{exc.colno}): truncated or corrupt?") from None
    except (ValueError, RecursionError) as exc:  # an int of over 4300 digits; nested too deeply
        raise TraceError(f"trace file {path} is not valid JSON ({exc})") from None
    try:
        return from_chrome(doc)
    except TraceError as exc:
        raise TraceError(f"trace file {path}: {exc}") from None


__all__ = ["to_chrome", "from_chrome", "save", "load", "PHASE_CNAME"]
