"""The submission context: what C attaches to every task submitted from now on -- its
priority, its tags (phase, layer, micro-batch, stage), the workers it may run on, an order
token, a planned priority sequence -- and the worker count.  Plain get/set calls, and
``submission(...)``, the one context manager that sets some of them for a block and restores
them after (what the pipeline executor, the synthetic pipelines and parallel's micro-batches
use); the user-facing contexts are ``tiletrain.priority`` (runtime), ``tiletrain.tag``
(trace.tags) and the pipeline's affinity, stage and priority_plan (pipeline.priorities)."""
from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence

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


_tag_ids: dict[str, int] = {}   # tag string -> C id, interned once per process


def intern_tag(name: str) -> int:
    """The C id of a tag string (C keeps one copy of each; interned once per process)."""
    i = _tag_ids.get(name)
    if i is None:
        i = _tag_ids[name] = check(lib.tt_tag_intern(name.encode()))
    return i


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


# -- order token ---------------------------------------------------------------------------

def set_order(token) -> None:
    """Every task submitted from now on also reads the order token ``token`` (a C tensor
    pointer: a Tensor's ``_ptr``); None stops it (csrc/submit.c ``tt_order_set``)."""
    if token is None:
        lib.tt_order_set(ffi.NULL)
    else:
        check(lib.tt_order_set(token))


def order_barrier(token) -> None:
    """A task that writes the order token after the tasks that read it (``tt_order_barrier``):
    the next tasks reading it start after them."""
    check(lib.tt_order_barrier(token))


# -- the one submission context --------------------------------------------------------------

_TAG_FIELDS = ("phase", "layer", "microbatch", "stage")


def _tag_values(tags: Mapping) -> tuple[int, int, int, int]:
    """The C tag values after applying ``tags`` to the current ones (phase: a name, interned,
    or a tag id; the indices ints, -1 unset; a missing key or None keeps the current value)."""
    unknown = set(tags) - set(_TAG_FIELDS)
    if unknown:
        raise ValueError(f"submission(tags=...): unknown tag(s) {sorted(unknown)}; the tags are {_TAG_FIELDS}")
    new = list(get_tags())
    for i, key in enumerate(_TAG_FIELDS):
        v = tags.get(key)
        if v is None:
            continue
        if key == "phase" and isinstance(v, str):
            v = intern_tag(v) if v else -1
        if isinstance(v, bool) or not isinstance(v, int) or v < -1:
            raise ValueError(f"submission(tags=...): {key} must be an int >= -1{' or a name' * (key == 'phase')}, "
                             f"got {v!r}")
        new[i] = v
    return new[0], new[1], new[2], new[3]


@contextlib.contextmanager
def submission(tags: Mapping | None = None, priority: int | None = None, affinity: Sequence[int] | None = None,
               order=None):
    """Tasks submitted inside carry what is given, restored on the way out (None: left as it
    is).  ``tags``: {phase, layer, microbatch, stage} (any of them; phase a name or a tag id,
    the others ints, -1 unset); ``priority``: checked against the policy's range first;
    ``affinity``: the worker ids the tasks may run on (an empty list: any); ``order``: an
    order token (a C tensor pointer): every task inside reads it, and on a normal exit a
    barrier task writes it, so the next block ordered by the same token starts after this
    one's tasks."""
    new_tags = None if tags is None else _tag_values(tags)
    if priority is not None:
        check_priority(int(priority))
    old_tags = get_tags() if new_tags is not None else None
    old_prio = get_priority() if priority is not None else None
    old_aff = get_affinity() if affinity is not None else None
    try:
        if new_tags is not None:
            set_tags(*new_tags)
        if priority is not None:
            set_priority(int(priority))
        if affinity is not None:
            set_affinity(affinity)
        if order is not None:
            set_order(order)
        yield
        if order is not None:   # (inside this block's affinity and priority)
            set_order(None)
            order_barrier(order)
    finally:
        if order is not None:
            set_order(None)
        if old_aff is not None:
            set_affinity(old_aff)
        if old_prio is not None:
            set_priority(old_prio)
        if old_tags is not None:
            set_tags(*old_tags)


__all__ = ["check_priority", "get_affinity", "get_priority", "get_tags", "intern_tag", "nworkers", "order_barrier",
           "priority_plan_used", "set_affinity", "set_order", "set_priority", "set_priority_plan", "set_tags",
           "submission", "tag_count", "tag_name"]
