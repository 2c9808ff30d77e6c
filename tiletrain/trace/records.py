"""Task records read back from C in bulk, as a NumPy structured array plus the task DAG.

A ``Trace`` is plain data: ``tasks`` (one row per task, row i is task i in submission order),
``deps`` (the predecessors of task i are ``deps[tasks["dep_start"][i] : ... + tasks["ndeps"][i]]``,
earlier task ids), ``workers`` (id, name, kind, memory node, rank and StarPU's busy/sleeping
counters) and ``meta`` (policy, versions).  Times are microseconds on the trace clock (0 =
the last reset).  Everything else in tiletrain.trace is a pure function of a Trace.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np

from .._ffi import check, cstr, ffi, lib
from ..runtime import current, wait as _wait
from ..runtime.mpi import rank as _rank
from ..runtime.registry import kernel_names

# Mirror of tt_task_record (csrc/include/tiletrain.h); checked against cffi at import.
RECORD_DTYPE = np.dtype([
    ("id", "<i8"), ("dep_start", "<i8"), ("submit_us", "<f8"), ("start_us", "<f8"), ("end_us", "<f8"),
    ("flops", "<f8"), ("kernel", "<i4"), ("worker", "<i4"), ("memnode", "<i4"), ("rank", "<i4"),
    ("priority", "<i4"), ("phase", "<i4"), ("layer", "<i4"), ("microbatch", "<i4"), ("stage", "<i4"),
    ("ndeps", "<i4"), ("done", "<i4"), ("reserved", "<i4"), ("iargs", "<i8", (8,)),
    ("cpu_us", "<f8"),
])
if RECORD_DTYPE.itemsize != ffi.sizeof("tt_task_record") or any(
        RECORD_DTYPE.fields[f][1] != ffi.offsetof("tt_task_record", f) for f in RECORD_DTYPE.names):
    raise ImportError("tiletrain.trace: RECORD_DTYPE does not match tt_task_record in tiletrain.h; rebuild")

# What users get: strings for kernel and phase ("" = untagged), -1 = no layer/microbatch/stage.
TASK_DTYPE = np.dtype([
    ("id", "<i8"), ("kernel", "U32"), ("phase", "U16"), ("worker", "<i4"), ("memnode", "<i4"),
    ("rank", "<i4"),
    ("priority", "<i4"), ("layer", "<i4"), ("microbatch", "<i4"), ("stage", "<i4"), ("submit", "<f8"),
    ("start", "<f8"), ("end", "<f8"), ("flops", "<f8"), ("dep_start", "<i8"), ("ndeps", "<i4"),
    ("iargs", "<i8", (8,)),  # the kernel's integer arguments (dtype, then kernels.def's ints; 0 past them)
    ("cpu", "<f8"),  # worker thread CPU µs since its previous completion (tiletrain.h cpu_us); -1: unknown
])


class TraceError(ValueError):
    """A trace file or record set that cannot be used (empty, corrupt, inconsistent)."""


@dataclass
class Trace:
    tasks: np.ndarray                 # TASK_DTYPE
    deps: np.ndarray                  # int64 predecessor ids
    workers: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        self.tasks = np.asarray(self.tasks, dtype=TASK_DTYPE)
        self.deps = np.asarray(self.deps, dtype=np.int64)
        validate(self)

    def __len__(self) -> int:
        return len(self.tasks)

    def __repr__(self) -> str:
        return (f"<Trace {len(self)} tasks, {len(self.deps)} dependencies, {len(self.workers)} workers, "
                f"sched={self.meta.get('sched', '?')}>")

    def predecessors(self, i: int) -> np.ndarray:
        s = int(self.tasks["dep_start"][i])
        return self.deps[s:s + int(self.tasks["ndeps"][i])]

    def dep_lists(self) -> list[np.ndarray]:
        return [self.predecessors(i) for i in range(len(self))]

    @property
    def duration(self) -> np.ndarray:
        return self.tasks["end"] - self.tasks["start"]

    def select(self, mask) -> "Trace":
        """The sub-trace of the tasks where ``mask`` is true (ids renumbered, edges to tasks
        left out dropped): e.g. ``trace.select(trace.tasks["phase"] == "bwd")``."""
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (len(self),):
            raise ValueError(f"mask has shape {mask.shape}, the trace has {len(self)} tasks")
        new_id = np.full(len(self), -1, dtype=np.int64)
        keep = np.nonzero(mask)[0]
        new_id[keep] = np.arange(len(keep))
        tasks = self.tasks[keep].copy()
        deps: list[np.ndarray] = []
        start = 0
        for row, i in enumerate(keep):
            d = new_id[self.predecessors(int(i))]
            d = d[d >= 0]
            tasks["dep_start"][row] = start
            tasks["ndeps"][row] = len(d)
            deps.append(d)
            start += len(d)
        tasks["id"] = np.arange(len(keep))
        return Trace(tasks, np.concatenate(deps) if deps else np.zeros(0, np.int64), list(self.workers),
                     dict(self.meta))


def validate(trace: Trace) -> None:
    """Raise TraceError unless the records are consistent (ids, times, dependency ranges)."""
    t = trace.tasks
    n = len(t)
    if n and not np.array_equal(t["id"], np.arange(n)):
        raise TraceError("trace: task ids must be 0..n-1 in row order")
    if n and (t["end"] < t["start"]).any():
        bad = int(np.nonzero(t["end"] < t["start"])[0][0])
        raise TraceError(f"trace: task {bad} ends before it starts")
    cnt = t["ndeps"].astype(np.int64)
    if (cnt < 0).any() or int(cnt.sum()) != len(trace.deps) or (
            n and not np.array_equal(t["dep_start"], np.concatenate([[0], np.cumsum(cnt)[:-1]]))):
        raise TraceError("trace: the dependency ranges do not tile the dependency array in task order")
    owner = np.repeat(np.arange(n, dtype=np.int64), cnt)
    if len(trace.deps) and ((trace.deps < 0) | (trace.deps >= owner)).any():
        k = int(np.nonzero((trace.deps < 0) | (trace.deps >= owner))[0][0])
        raise TraceError(f"trace: task {int(owner[k])} depends on task {int(trace.deps[k])}, which is not an "
                         "earlier task")


# ---------------------------------------------------------------- reading from the runtime

def profiling_enabled() -> bool:
    return bool(lib.tt_profiling_enabled())


def _need_profiling(what: str) -> None:
    current()
    if not profiling_enabled():
        raise RuntimeError(f"{what} needs profiling, and profiling is off: start the runtime with "
                           "tiletrain.init(profile=True) (or TILETRAIN_PROFILE=1)")


def start() -> None:
    """Drop the records so far (waiting for running tasks) and record from now on."""
    _need_profiling("tracing")
    check(lib.tt_trace_start())


def stop() -> None:
    """Stop recording (the records stay readable)."""
    check(lib.tt_trace_stop())


def reset() -> None:
    """Wait for all tasks, then drop the records and restart the trace clock."""
    _need_profiling("tracing")
    check(lib.tt_trace_reset())


def is_recording() -> bool:
    return bool(lib.tt_trace_is_recording())


def _kernel_names() -> np.ndarray:
    return np.array(kernel_names() + ["?"])


def _phase_names() -> np.ndarray:
    return np.array([""] + [cstr(lib.tt_tag_name(i)) for i in range(lib.tt_tag_count())])


def read_raw() -> tuple[np.ndarray, np.ndarray]:
    """The C records (RECORD_DTYPE) and the dependency array, as they are now (no waiting)."""
    n = lib.tt_trace_count()
    raw = np.zeros(n, dtype=RECORD_DTYPE)
    if n:
        check(lib.tt_trace_read(0, n, ffi.cast("tt_task_record *", ffi.from_buffer(raw))))
    nd = lib.tt_trace_ndeps()
    deps = np.zeros(nd, dtype=np.int64)
    if nd:
        check(lib.tt_trace_read_deps(0, nd, ffi.cast("int64_t *", ffi.from_buffer(deps))))
    return raw, deps


def worker_stats() -> list[dict]:
    """Per worker: id, name, kind, memory node, rank and StarPU's counters since the last
    reset (total, executing, sleeping and idle = total - executing - sleeping, in µs)."""
    _need_profiling("worker statistics")
    rt = current()
    total, ex, sl = (ffi.new("double *") for _ in range(3))
    nt = ffi.new("int64_t *")
    out = []
    for w in rt.workers():
        check(lib.tt_worker_profile(w.id, total, ex, sl, nt))
        out.append({"id": w.id, "name": w.name, "kind": w.kind, "memnode": w.memory_node, "rank": _rank(),
                    "total_us": total[0], "executing_us": ex[0], "sleeping_us": sl[0],
                    "idle_us": max(0.0, total[0] - ex[0] - sl[0]), "ntasks": int(nt[0])})
    return out


def read(wait: bool = True) -> Trace:
    """The tasks recorded since the last reset, as a Trace.  Waits for every task first
    (``wait=False``: only the tasks that have already run, the rest left out)."""
    _need_profiling("reading task records")
    rt = current()
    if wait:
        _wait()
    raw, deps = read_raw()
    tasks = np.zeros(len(raw), dtype=TASK_DTYPE)
    for f in ("id", "worker", "memnode", "rank", "priority", "layer", "microbatch", "stage", "flops",
              "dep_start", "ndeps", "iargs"):
        tasks[f] = raw[f]
    tasks["submit"], tasks["start"], tasks["end"] = raw["submit_us"], raw["start_us"], raw["end_us"]
    tasks["cpu"] = raw["cpu_us"]
    kn = _kernel_names()
    tasks["kernel"] = kn[np.where((raw["kernel"] >= 0) & (raw["kernel"] < len(kn) - 1), raw["kernel"], -1)]
    tasks["phase"] = _phase_names()[raw["phase"] + 1]
    meta = {"sched": rt.sched, "ncpu": sum(1 for w in rt.workers() if w.kind == "cpu"),
            "tiletrain": cstr(lib.tt_version()), "starpu": cstr(lib.tt_starpu_version()),
            "dropped": int(lib.tt_trace_dropped()), "clock": "us since the last trace reset"}
    ran = raw["done"] == 1
    tasks["start"][~ran] = tasks["end"][~ran] = 0.0
    trace = Trace(tasks, deps, worker_stats(), meta)
    if not ran.all():
        meta["not_run"] = int((~ran).sum())
        trace = trace.select(ran)
    return trace


class Recording:
    """Holder filled when a ``recording()`` block ends: ``.trace``."""
    trace: Trace | None = None


@contextlib.contextmanager
def recording():
    """Record exactly the tasks submitted inside the block (waits for earlier tasks at the
    start, for the block's tasks at the end):

        with tt.trace.recording() as rec:
            step()
        print(tt.trace.metrics(rec.trace))
    """
    was = is_recording()
    start()
    holder = Recording()
    try:
        yield holder
        holder.trace = read()
    finally:
        if not was:
            stop()


__all__ = ["Trace", "TraceError", "RECORD_DTYPE", "TASK_DTYPE", "read", "read_raw", "start", "stop", "reset",
           "is_recording", "recording", "worker_stats", "validate", "profiling_enabled"]
