"""Utilities shaped like torch.utils: ``tiletrain.utils.checkpoint.checkpoint`` (activation
recomputation); ``tiletrain.utils.mpirun`` (the mpirun command and per-rank environment of
one machine's ranks)."""
from . import checkpoint, mpirun

__all__ = ["checkpoint", "mpirun"]
