"""Task traces and schedule metrics.

    rt = tt.init(profile=True)              # records every task in C from here
    with tt.trace.recording() as rec:       # or tt.trace.read() for everything since init
        step()
    tr = rec.trace                          # Trace: tasks (NumPy structured array) + DAG
    print(tt.trace.metrics(tr))             # makespan, idle, critical path, bounds, bubbles
    tt.trace.save(tr, "step.json")          # Chrome trace-event JSON: open in ui.perfetto.dev
    tt.trace.gantt(tr, "step.png")          # matplotlib Gantt + utilisation

``tiletrain.trace(x)`` is also torch.trace (the sum of a matrix's main diagonal).
``tiletrain.tag(phase=..., layer=..., microbatch=..., stage=...)`` tags tasks; see also
``tiletrain trace --help``, tiletrain.pipeline (priorities, stage affinity, schedules) and
tiletrain.experiments (workloads, sweeps, pipeline experiments: the drivers above nn).
"""
import sys
import types

from ..runtime import provide_trace
from .chrome import from_chrome, load, save, to_chrome
from .metrics import (IDLE_CAUSES, Metrics, area_bound, bottom_levels, busy_per_worker, compact, critical_path,
                      format_metrics, idle_causes, idle_fractions, makespan, metrics, stage_bubbles)
from .records import (TASK_DTYPE, Trace, TraceError, is_recording, profiling_enabled, read, recording, reset,
                      start, stop, worker_stats)
from .plot import gantt
from .tags import current_tags, tag

provide_trace(sys.modules[__name__])  # Runtime.records() and Runtime.trace() read with this module


class _TracePackage(types.ModuleType):
    """This package is also torch.trace: ``tiletrain.trace(x)`` is the sum of the main
    diagonal of the matrix x (``x.trace()``), so a program written for torch runs unchanged."""

    def __call__(self, input):  # noqa: A002
        if not hasattr(input, "trace") or not callable(getattr(input, "trace")):
            raise TypeError(f"trace(): argument 'input' must be Tensor, not {type(input).__name__}")
        return input.trace()


sys.modules[__name__].__class__ = _TracePackage


__all__ = ["Trace", "TraceError", "TASK_DTYPE", "read", "recording", "start", "stop", "reset", "is_recording",
           "profiling_enabled", "worker_stats", "tag", "current_tags", "save", "load", "to_chrome",
           "from_chrome",
           "gantt", "Metrics", "metrics", "format_metrics", "makespan", "busy_per_worker", "idle_fractions",
           "idle_causes", "IDLE_CAUSES",
           "critical_path", "bottom_levels", "area_bound", "stage_bubbles", "compact"]
