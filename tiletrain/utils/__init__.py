"""Utilities shaped like torch.utils: ``tiletrain.utils.checkpoint.checkpoint`` (activation
recomputation)."""
from . import checkpoint

__all__ = ["checkpoint"]
