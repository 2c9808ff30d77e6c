"""The time from a fault to the job's exit, asserted (issue 29): README "Running under mpirun"
says an error on one rank ends the job in well under a second; every fault scenario of
tests/mpi and tests/reliability checks at most MAX_EXIT_S.

A script marks its fault by printing ``FAULT-AT <time.time()>`` (stderr, flushed) just before
it fails; the launcher takes the time when the job has exited."""
from __future__ import annotations

import re
import time

MAX_EXIT_S = 5.0
_MARK = re.compile(r"FAULT-AT (\d+\.\d+)")


def after_fault(output: str, exited: float) -> float | None:
    """Seconds from the first FAULT-AT mark in `output` to `exited` (a time.time()); None
    when nothing was marked."""
    marks = [float(m) for m in _MARK.findall(output)]
    return exited - min(marks) if marks else None


def exit_time_problem(after: float | None, until: str = "the job's exit") -> str | None:
    """What is wrong with a fault-to-exit time (None: nothing)."""
    if after is None:
        return "no FAULT-AT mark in the output (the failing script must print one)"
    if after > MAX_EXIT_S:
        return f"{after:.1f} s from the fault to {until} (at most {MAX_EXIT_S:g} s)"
    return None


def assert_quick_exit(output: str, exited: float | None = None) -> float:
    """Fails unless the job whose `output` this is exited (default: now) at most MAX_EXIT_S
    after its fault mark; returns the time."""
    after = after_fault(output, time.time() if exited is None else exited)
    problem = exit_time_problem(after)
    assert problem is None, f"{problem}\n{output[-3000:]}"
    return after
