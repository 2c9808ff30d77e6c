"""Dropout and linear, with their backward rules (the activations gelu, relu, silu, tanh,
sigmoid are rows of the element-wise op table, tiletrain/ops/elementwise.py)."""
from __future__ import annotations

import numpy as np

from ..runtime.kernels import run_map
from ..tensors import Tensor
from .autograd import backward_rule, record
from .basic import _float_tensor, _like, _scalar, add_broadcast, matmul
from .elementwise import gelu, relu, silu

__all__ = ["gelu", "relu", "silu", "dropout", "linear", "manual_seed"]

_seeds = np.random.default_rng(0)


def manual_seed(seed: int) -> None:
    """Seed the generator that gives every dropout call its own seed (default: 0)."""
    global _seeds
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"manual_seed: seed must be an int, got {type(seed).__name__}")
    _seeds = np.random.default_rng(int(seed))


def _next_seed() -> int:
    return int(_seeds.integers(0, 2**63 - 1))


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


