"""Modules over tiletrain.functional.extras: the reflection, replication and circular padding
modules, Hardshrink, Softshrink, Threshold and more losses (torch.nn's names, arguments and
defaults)."""
from __future__ import annotations

from .. import functional as F
from ..tensors import Tensor
from .loss import _Loss
from .module import Module

__all__ = ["CircularPad1d", "CircularPad2d", "CircularPad3d", "Hardshrink", "HingeEmbeddingLoss",
           "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
           "ReplicationPad3d", "SoftMarginLoss", "Softshrink", "Threshold"]


class _ModePad(Module):
    """torch.nn.{Reflection,Replication,Circular}PadNd(padding): an int pads every side of the
    last N dims."""
    dims, mode = 1, "reflect"

    def __init__(self, padding):
        super().__init__()
        self.padding = (int(padding),) * (2 * self.dims) if isinstance(padding, int) else tuple(padding)
        if len(self.padding) != 2 * self.dims:
            raise ValueError(f"{type(self).__name__}: padding must be an int or {2 * self.dims} ints, "
                             f"got {padding!r}")

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.pad(input, self.padding, self.mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


def _pad_class(name: str, dims: int, mode: str):
    return type(name, (_ModePad,), {"dims": dims, "mode": mode, "__module__": __name__})


ReflectionPad1d, ReflectionPad2d, ReflectionPad3d = (_pad_class(f"ReflectionPad{n}d", n, "reflect") for n in (1, 2, 3))
ReplicationPad1d, ReplicationPad2d, ReplicationPad3d = (_pad_class(f"ReplicationPad{n}d", n, "replicate")
                                                        for n in (1, 2, 3))
CircularPad1d, CircularPad2d, CircularPad3d = (_pad_class(f"CircularPad{n}d", n, "circular") for n in (1, 2, 3))


class Hardshrink(Module):
    def __init__(self, lambd: float = 0.5) -> None:
        super().__init__()
        self.lambd = lambd

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.hardshrink(input, self.lambd)

    def extra_repr(self) -> str:
        return f"{self.lambd}"


class Softshrink(Hardshrink):
    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.softshrink(input, self.lambd)


class Threshold(Module):
    def __init__(self, threshold: float, value: float, inplace: bool = False) -> None:
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}" + (", inplace=True" if self.inplace else "")


class SoftMarginLoss(_Loss):
    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.soft_margin_loss(input, target, reduction=self.reduction)


class HingeEmbeddingLoss(_Loss):
    def __init__(self, margin: float = 1.0, size_average=None, reduce=None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.hinge_embedding_loss(input, target, margin=self.margin, reduction=self.reduction)
