"""User tags on tasks: ``tiletrain.tag(phase=..., layer=..., microbatch=..., stage=...)``.

Tags are set in C for every task submitted inside the context (a string is interned once,
then each task carries small ints); nested contexts override the fields they name and keep
the others.  autograd's backward() runs under ``tag(phase="bwd")`` and optimizer steps
under ``tag(phase="opt")``; forward code tags itself (``with tt.tag(phase="fwd", layer=i)``).

Priority hints (tiletrain.pipeline.priority_hints) turn the tags into a task priority
when a tag context is entered: e.g. backward and optimizer above the next micro-batch's
forward.  An explicit ``tiletrain.priority(p)`` inside the context wins over the hint.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Optional

from ..runtime import context, is_initialized

# (phase, layer, microbatch, stage) -> priority or None; installed by pipeline.priority_hints
PriorityHint = Callable[[Optional[str], Optional[int], Optional[int], Optional[int]], Optional[int]]
_hint: PriorityHint | None = None


intern = context.intern_tag  # the C id of a tag string (interned once per process)


tag_name = context.tag_name


def current_tags() -> dict:
    """The tags that the next submitted task will carry (None where unset)."""
    ph, la, mb, st = context.get_tags()
    return {"phase": tag_name(ph) or None, "layer": None if la < 0 else la,
            "microbatch": None if mb < 0 else mb, "stage": None if st < 0 else st}


def _check_index(name: str, v) -> None:
    if v is None:
        return
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"tag {name} must be an int, got {type(v).__name__}")
    if v < 0:
        raise ValueError(f"tag {name} must be >= 0, got {v}")


@contextlib.contextmanager
def tag(phase: str | None = None, layer: int | None = None, microbatch: int | None = None,
        stage: int | None = None):
    """Tasks submitted inside carry these tags (recorded in traces, used by priority hints).

    phase: any short string; the conventional ones are "fwd", "bwd", "opt" (and "wgrad" for
    weight-gradient tasks split from backward).  layer, microbatch, stage: ints >= 0."""
    if phase is not None and (not isinstance(phase, str) or not phase or len(phase) > 64):
        raise ValueError(f"tag phase must be a non-empty string of at most 64 characters, got {phase!r}")
    for name, v in (("layer", layer), ("microbatch", microbatch), ("stage", stage)):
        _check_index(name, v)
    old = context.get_tags()
    new = (old[0] if phase is None else intern(phase), old[1] if layer is None else layer,
           old[2] if microbatch is None else microbatch, old[3] if stage is None else stage)
    old_prio = context.get_priority()
    prio = None
    if _hint is not None:
        prio = _hint(tag_name(new[0]) or None, None if new[1] < 0 else new[1], None if new[2] < 0 else new[2],
                     None if new[3] < 0 else new[3])
        if prio is not None:
            if is_initialized():
                context.check_priority(int(prio))
    context.set_tags(*new)
    if prio is not None:
        context.set_priority(int(prio))
    try:
        yield
    finally:
        context.set_tags(*old)
        if prio is not None:
            context.set_priority(old_prio)


__all__ = ["tag", "current_tags", "intern", "tag_name"]
