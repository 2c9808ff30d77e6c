"""Priorities and stage affinity: the knobs that shape a dataflow schedule without writing one.

  affinity(workers)           tasks submitted inside run only on these workers
  stage(s, workers=None)      tag(stage=s) + affinity(workers or [s % nworkers])
  priority_hints(phase=...)   tag contexts turn (phase, layer, microbatch, stage) into a
                              priority, e.g. backward and optimizer before the next forward
  bottom_level_priorities(tr) the critical-path priorities of a recorded run (the longest
                              chain of measured durations from each task to the end)
  priority_plan(prios)        give the next submissions these priorities, in submission
                              order: replay a recorded step's bottom levels on the next step
  PRIORITIES, action_priority THE priority table: per mode, phase (or action kind) ->
                              priority; what schedules without an order (schedule.py), the
                              executor (enforce.py) and the synthetic pipelines
                              (synthetic.py) read

Priorities must lie in the policy's range (``Runtime.priority_range()``: prio, lws, ws, dm*
and tt-cp accept any int; eager and random have [0, 0] and ignore priorities): outside it
raises ValueError.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Mapping, Sequence

import numpy as np

from ..runtime import context, current
from ..trace import tags as _tags
from ..trace.metrics import bottom_levels
from ..trace.records import Trace


def priority_range() -> tuple[int, int]:
    return current().priority_range()


@contextlib.contextmanager
def affinity(workers: int | Sequence[int]):
    """Tasks submitted inside may run only on these workers (StarPU's per-task worker mask,
    honoured by every policy)."""
    ws = [workers] if isinstance(workers, int) else list(workers)
    if not ws or any(not isinstance(w, int) or isinstance(w, bool) for w in ws):
        raise ValueError(f"affinity: expected a worker id or a non-empty list of them, got {workers!r}")
    current()
    with context.submission(affinity=ws):
        yield


@contextlib.contextmanager
def stage(s: int, workers: int | Sequence[int] | None = None):
    """Pipeline stage ``s``: tasks are tagged stage=s and run on ``workers`` (default: worker
    s modulo the number of workers)."""
    if not isinstance(s, int) or s < 0:
        raise ValueError(f"stage must be an int >= 0, got {s!r}")
    if workers is None:
        workers = s % max(1, context.nworkers())
    with _tags.tag(stage=s), affinity(workers):
        yield


def make_hint(phase: Mapping[str, int] | None = None, layer: int | Callable[[int], int] = 0,
              microbatch: int = 0, base: int = 0) -> _tags.PriorityHint:
    """priority = base + phase[phase] + layer term + microbatch * microbatch_weight.

    layer: a weight (priority += weight * layer) or a function of the layer."""
    phase = dict(phase or {})

    def hint(ph, la, mb, st):
        p = base + phase.get(ph or "", 0)
        if la is not None:
            p += layer(la) if callable(layer) else layer * la
        if mb is not None:
            p += microbatch * mb
        return int(p)
    return hint


# THE priority table (docs/architecture.md principle 15: one of each mechanism): per mode, the
# task priority of each phase (larger runs first among a worker's ready tasks).
PRIORITIES: dict[str, dict[str, int]] = {
    "none": {},
    # backward and optimizer before the next micro-batch's forward
    "1f1b": {"fwd": 0, "wgrad": 1, "bwd": 2, "opt": 3},
    # zero-bubble style: input gradients (and whole backwards) first, then forwards; weight
    # gradients last: a stage's ready dW work fills the time it would idle (it is off the
    # path between stages).  What schedules without an order (emergent, emergent-zb) run with.
    "zb": {"wgrad": 0, "fwd": 1, "bwd": 2, "opt": 3},
}
ONE_F_ONE_B = PRIORITIES["1f1b"]
ZERO_BUBBLE = PRIORITIES["zb"]
# action kinds -> phase: a schedule's F/B/I/W (schedule.py) and the synthetic pipelines'
# B split into Bx (input gradient) + Bw (weight gradient), and O (optimizer; synthetic.py)
PHASE = {"F": "fwd", "B": "bwd", "I": "bwd", "W": "wgrad", "Bx": "bwd", "Bw": "wgrad", "O": "opt"}


def action_priority(kind: str, mode: str = "zb") -> int:
    """The priority of an action (or task) kind, or of a phase name, under ``mode`` (a key of
    PRIORITIES; a phase the mode does not name gets 0)."""
    if mode not in PRIORITIES:
        raise ValueError(f"priority mode must be one of {', '.join(PRIORITIES)}, got {mode!r}")
    return PRIORITIES[mode].get(PHASE.get(kind, kind), 0)


@contextlib.contextmanager
def priority_hints(phase: Mapping[str, int] | None = None, layer: int | Callable[[int], int] = 0,
                   microbatch: int = 0, base: int = 0):
    """Inside, every ``tiletrain.tag(...)`` context sets the task priority from its tags
    (see make_hint).  Example: ``priority_hints(phase={"fwd": 0, "bwd": 1, "opt": 2})``."""
    old = _tags._hint
    _tags._hint = make_hint(phase, layer, microbatch, base)
    try:
        yield
    finally:
        _tags._hint = old


def bottom_level_priorities(trace: Trace, lo: int | None = None, hi: int | None = None,
                            levels: int = 1 << 16) -> np.ndarray:
    """Priorities (int32, one per task of ``trace`` in submission order) ranking tasks by
    bottom level: the longest chain of recorded durations from the task to the end of the
    DAG.  Mapped onto [lo, hi] (default: the current policy's range, capped at ``levels``
    distinct values; ties keep equal priorities)."""
    if len(trace) == 0:
        return np.zeros(0, dtype=np.int32)
    if lo is None or hi is None:
        rlo, rhi = priority_range()
        lo = rlo if lo is None else lo
        hi = rhi if hi is None else hi
    if hi < lo:
        raise ValueError(f"priority range [{lo}, {hi}] is empty")
    bl = bottom_levels(trace)
    uniq, rank = np.unique(bl, return_inverse=True)
    span = min(int(hi) - int(lo), levels - 1, len(uniq) - 1)
    if span <= 0 or len(uniq) == 1:
        return np.full(len(bl), lo if span < 0 else max(lo, min(hi, 0)), dtype=np.int32)
    base = max(int(lo), min(0, int(hi) - span))  # start at 0 when the range allows
    scaled = base + np.floor(rank * (span / (len(uniq) - 1)) + 0.5).astype(np.int64)
    return scaled.astype(np.int32)


@contextlib.contextmanager
def priority_plan(priorities: Sequence[int] | np.ndarray):
    """The next len(priorities) submissions get these priorities, in order (a recorded step's
    bottom levels replayed on the next, identical step).  On exit the plan is cleared; a
    warning says when the number of submissions differed (the step changed shape)."""
    arr = np.ascontiguousarray(np.asarray(priorities, dtype=np.int32))
    if arr.ndim != 1:
        raise ValueError("priority_plan: expected a 1-D sequence of priorities")
    current()
    context.set_priority_plan(arr)
    try:
        yield
    finally:
        used = context.priority_plan_used()
        context.set_priority_plan(arr[:0])
        if 0 < used < len(arr) or used == 0 and len(arr):
            import warnings
            warnings.warn(f"priority_plan: {len(arr)} priorities planned, only {used} submissions used them "
                          "(the step submitted fewer tasks than the recorded one)", RuntimeWarning,
                          stacklevel=3)


__all__ = ["affinity", "stage", "priority_hints", "make_hint", "ONE_F_ONE_B", "ZERO_BUBBLE", "PRIORITIES", "PHASE",
           "action_priority",
           "bottom_level_priorities", "priority_plan", "priority_range"]
