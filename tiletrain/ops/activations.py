"""Activations (gelu, relu, silu), dropout and linear, with their backward rules."""
from __future__ import annotations

from ..runtime.kernels import run_map
from ..tensors import Tensor
# one seeding function for dropout and random tensors
from ..tensors.creation import default_generator, manual_seed
from .autograd import backward_rule, record
from .basic import _float_tensor, _like, _scalar, add_broadcast, matmul

__all__ = ["gelu", "relu", "silu", "dropout", "linear", "manual_seed"]

_GELU_APPROX = {"none": 0, "tanh": 1}


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU: x * Phi(x) (approximate="none", erf form) or the tanh approximation
    (approximate="tanh", as GPT-2)."""
    _float_tensor(x, "gelu", "x")
    if approximate not in _GELU_APPROX:
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    y = _like(x)
    run_map("gelu", x, y, approx=_GELU_APPROX[approximate])
    return record("gelu", y, (x,), saved=(x,), approx=_GELU_APPROX[approximate])


@backward_rule("gelu")
def _gelu_bwd(node, g):
    (x,) = node.saved
    dx = _like(x)
    run_map("gelu_backward", x, g, dx, approx=node.ctx["approx"])
    return (dx,)


def relu(x: Tensor) -> Tensor:
    _float_tensor(x, "relu", "x")
    y = _like(x)
    run_map("relu", x, y)
    return record("relu", y, (x,), saved=(x,))


@backward_rule("relu")
def _relu_bwd(node, g):
    (x,) = node.saved
    dx = _like(x)
    run_map("relu_backward", x, g, dx)
    return (dx,)


def silu(x: Tensor) -> Tensor:
    """x * sigmoid(x)"""
    _float_tensor(x, "silu", "x")
    y = _like(x)
    run_map("silu", x, y)
    return record("silu", y, (x,), saved=(x,))


@backward_rule("silu")
def _silu_bwd(node, g):
    (x,) = node.saved
    dx = _like(x)
    run_map("silu_backward", x, g, dx)
    return (dx,)


def _next_seed() -> int:
    return default_generator.next_seed()


def dropout(x: Tensor, p: float = 0.5, training: bool = True, seed: int | None = None) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p).  The mask comes
    from a counter-based generator keyed by (seed, tile, element): reproducible for a given
    seed (drawn from ``manual_seed``'s generator when not given) and tiling.  p = 0 or
    training=False is the identity (the input itself is returned)."""
    _float_tensor(x, "dropout", "x")
    p = _scalar(p, "dropout", "p")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if p == 0.0 or not training:
        return x
    seed = _next_seed() if seed is None else int(seed)
    if not 0 <= seed < 2**63:
        raise ValueError(f"dropout: seed must be in [0, 2**63), got {seed}")
    y = _like(x)
    run_map("dropout", x, y, p=p, seed=seed)
    return record("dropout", y, (x,), p=p, seed=seed)


@backward_rule("dropout")
def _dropout_bwd(node, g):
    # dropout is linear in x: its backward is the same mask and scale applied to g
    dx = _like(g)
    run_map("dropout", g, dx, p=node.ctx["p"], seed=node.ctx["seed"])
    return (dx,)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ weight + bias, weight in (in_features, out_features) layout (as GPT-2's Conv1D;
    note torch.nn.functional.linear takes (out, in)).  x is (..., in); bias (out,) is
    broadcast over every leading axis.  weight's tile along `in` must equal x's last tile;
    bias's tile equals weight's tile along `out`."""
    _float_tensor(x, "linear", "x")
    _float_tensor(weight, "linear", "weight")
    if weight.ndim != 2:
        raise ValueError(f"linear: weight must be 2-D (in, out), got shape {weight.shape}")
    if x.ndim < 1 or x.shape[-1] != weight.shape[0]:
        raise ValueError(f"linear: x's last dimension ({x.shape[-1] if x.ndim else None}) must equal "
                         f"weight's in_features ({weight.shape[0]})")
    if bias is not None:
        _float_tensor(bias, "linear", "bias")
        if bias.shape != (weight.shape[1],) or bias.tiles != (weight.tiles[1],):
            raise ValueError(f"linear: bias must have shape ({weight.shape[1]},) and tiles ({weight.tiles[1]},), "
                             f"got shape {bias.shape} and tiles {bias.tiles}")
        if bias.dtype != weight.dtype:
            raise TypeError(f"linear: dtype mismatch, weight is {weight.dtype} and bias is {bias.dtype}")
    if x.ndim == 1:
        raise ValueError("linear: x must have a batch axis, shape (..., in_features) with rank >= 2")
    y = matmul(x, weight)
    if bias is not None:
        y = add_broadcast(y, bias, tuple(range(y.ndim - 1)))
    return y


