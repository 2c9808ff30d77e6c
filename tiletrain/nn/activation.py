"""Parameter-free modules: activations and Flatten, each a thin shell over the function of
the same name (torch.nn's names, arguments and defaults)."""
from __future__ import annotations

from .. import functional as F
from ..tensors import Tensor
from .module import Module


class _Elementwise(Module):
    """``inplace`` is accepted as torch's; the result is always a new tensor (tiles are freed by
    dataflow, so nothing is saved by overwriting the input)."""
    fn = None

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = bool(inplace)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return type(self).fn(input)


class ReLU(_Elementwise):
    fn = staticmethod(F.relu)


class SiLU(_Elementwise):
    fn = staticmethod(F.silu)


class Tanh(Module):
    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.tanh(input)


class Sigmoid(Module):
    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.sigmoid(input)


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Identity(Module):
    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return input


class Flatten(Module):
    """Flattens dims start_dim..end_dim into one (default: all but the batch dim)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.flatten(input, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


__all__ = ["Flatten", "GELU", "Identity", "ReLU", "SiLU", "Sigmoid", "Tanh"]
