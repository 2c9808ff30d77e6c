"""Resident-memory probes for the memory tests (Linux /proc): a process's RSS figures and
the peak growth of one phase of work."""
from __future__ import annotations

import tiletrain as tt


def rss(key: str) -> int:
    """Bytes of /proc/self/status's ``key`` (VmRSS, VmHWM, ...)."""
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) << 10
    raise KeyError(f"no {key} in /proc/self/status")


def peak_growth(fn):
    """Run fn between two waits of the runtime; (its result, how far the peak RSS rose above
    the RSS at its start).  The wait before gives it a quiet start (collective under MPI)."""
    tt.wait()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak (VmHWM) restarts from the current RSS
    base = rss("VmRSS")
    out = fn()
    tt.wait()
    return out, rss("VmHWM") - base
