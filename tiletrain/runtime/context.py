"""The submission context: what C attaches to every task submitted from now on -- its
priority, its tags (phase, layer, micro-batch, stage), the workers it may run on, a planned
priority sequence -- and the worker count.  Plain get/set calls; the user-facing contexts are
``tiletrain.priority`` (runtime), ``tiletrain.tag`` (trace.tags) and the pipeline's
affinity, stage and priority_plan (pipeline.priorities)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._ffi import check, cstr, ffi, lib


def nworkers() -> int:
    """StarPU workers of the running session (0 before init)."""
    return int(lib.tt_nworkers())


# -- priority ----------------------------------------------------------------------------

def get_priority() -> int:
    return int(lib.tt_get_priority())


def set_priority(value: int) -> None:
    lib.tt_set_priority(int(value))


def check_priority(value: int) -> None:
    """Raise ValueError unless ``value`` lies in the running policy's priority range."""
    check(lib.tt_priority_check(int(value)))


def set_priority_plan(priorities: np.ndarray) -> None:
    """The next len(priorities) submissions get these priorities (int32, in order); an empty
    array clears the plan."""
    arr = np.ascontiguousarray(priorities, dtype=np.int32)  # (C copies it)
    if len(arr):
        check(lib.tt_priority_plan_set(len(arr), ffi.cast("int32_t *", ffi.from_buffer(arr))))
    else:  # clearing cannot fail (it is done on the way out, session or not)
        lib.tt_priority_plan_set(0, ffi.NULL)


def priority_plan_used() -> int:
    """Submissions that took a planned priority since the plan was set."""
    return int(lib.tt_priority_plan_used())


# -- tags ----------------------------------------------------------------------------------

def get_tags() -> tuple[int, int, int, int]:
    """(phase id, layer, microbatch, stage) of the next task; -1 where unset."""
    ph, la, mb, st = (ffi.new("int *") for _ in range(4))
    lib.tt_tags_get(ph, la, mb, st)
    return ph[0], la[0], mb[0], st[0]


def set_tags(phase: int, layer: int, microbatch: int, stage: int) -> None:
    lib.tt_tags_set(phase, layer, microbatch, stage)


def intern_tag(name: str) -> int:
    """The C id of a tag string (C keeps one copy of each)."""
    return check(lib.tt_tag_intern(name.encode()))


def tag_name(i: int) -> str:
    """The string of tag id ``i`` ("" for -1)."""
    return cstr(lib.tt_tag_name(i)) if i >= 0 else ""


def tag_count() -> int:
    return int(lib.tt_tag_count())


# -- worker affinity -------------------------------------------------------------------------

def get_affinity() -> list[int]:
    """The workers the next tasks may run on ([]: any)."""
    buf = ffi.new("int[]", 64)
    n = lib.tt_affinity_get(buf, 64)
    return [buf[i] for i in range(min(n, 64))]


def set_affinity(workers: Sequence[int]) -> None:
    """Restrict the next tasks to these workers ([]: any, which cannot fail)."""
    ws = list(workers)
    if ws:
        check(lib.tt_affinity_set(len(ws), ffi.new("int[]", ws)))
    else:
        lib.tt_affinity_set(0, ffi.NULL)


__all__ = ["check_priority", "get_affinity", "get_priority", "get_tags", "intern_tag", "nworkers",
           "priority_plan_used", "set_affinity", "set_priority", "set_priority_plan", "set_tags", "tag_count",
           "tag_name"]
