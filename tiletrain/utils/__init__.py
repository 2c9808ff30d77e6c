"""Utilities shaped like torch.utils: ``tiletrain.utils.checkpoint.checkpoint`` (activation
recomputation); ``tiletrain.utils.mpirun`` (the mpirun command and per-rank environment of
one machine's ranks); ``tiletrain.utils.data`` (torch.utils.data's Dataset and
DataLoader); ``tiletrain.utils.RunLogger`` (a run directory's metrics.jsonl,
run.json and TensorBoard event files: tiletrain/utils/runlog.py, docs/runs.md)."""
from . import checkpoint, data, mpirun, runlog
from .runlog import RunLogger

__all__ = ["checkpoint", "data", "mpirun", "runlog", "RunLogger"]
