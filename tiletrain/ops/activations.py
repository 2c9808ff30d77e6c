"""Dropout and linear, with their backward rules (the activations gelu, relu, silu, tanh,
sigmoid are rows of the element-wise op table, tiletrain/ops/elementwise.py)."""
from __future__ import annotations

import contextlib
import threading

import numpy as np

from ..runtime.kernels import gemm_bias, gemm_bias_gelu, run_map
from ..tensors import Tensor, TensorTraits
# one seeding function for dropout and random tensors
from ..tensors.creation import default_generator, manual_seed
from .autograd import backward_rule, composite_grads, double_backward_rule, needs_grad, record
from .basic import _float_tensor, _like, _scalar, _sum_axes
from .creation import full
from .elementwise import _gelu_params, gelu, mul, relu, silu
from .linalg import matmul, matmul_leading
from .shape import getitem, retile, squeeze, unsqueeze

__all__ = ["gelu", "relu", "silu", "dropout", "dropout_positions", "linear", "manual_seed"]

_gelu_op = gelu  # affine's `gelu` argument shadows the op



def _next_seed() -> int:
    return default_generator.next_seed()


_window = threading.local()


@contextlib.contextmanager
def dropout_positions(start: int, length: int, batch_tile: int, time_tile: int):
    """Inside, ``dropout`` of a (B, T, ...) tensor applies the mask that a dropout with the
    same seed draws at positions start .. start + T - 1 of the whole (B, length, ...)
    sequence tiled (batch_tile, time_tile, x's other tiles): a sequence chunk gets its part
    of the whole sequence's mask (the mask of the whole is drawn, then cut)."""
    old = getattr(_window, "value", None)
    _window.value = (int(start), int(length), int(batch_tile), int(time_tile))
    try:
        yield
    finally:
        _window.value = old


def dropout_window():
    """The enclosing ``dropout_positions``' (start, length, batch_tile, time_tile), or None
    (checkpoint replays it with the generator state)."""
    return getattr(_window, "value", None)


def _chunk_mask(x: Tensor, p: float, seed: int, window) -> Tensor:
    """The (B, T, ...) part at ``window``'s positions of the whole sequence's dropout mask
    (0 or 1/(1-p)), tiled as x."""
    start, length, tb, tt_ = window
    if x.ndim < 2 or start < 0 or start + x.shape[1] > length:
        raise ValueError(f"dropout: a sequence chunk at positions {start}..{start + x.shape[1] - 1} of {length} "
                         f"(x of shape {x.shape})")
    traits = TensorTraits(x.shape[:1] + (length,) + x.shape[2:], (tb, tt_) + x.tiles[2:])
    ones = full(traits, 1.0, dtype=x.dtype)
    mask = _like(ones)
    run_map("dropout", ones, mask, p=p, seed=seed)
    mask = getitem(mask, (slice(None), slice(start, start + x.shape[1])))
    return mask if mask.tiles == x.tiles else retile(mask, x.tiles)


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
    window = getattr(_window, "value", None)
    if window is not None:   # a sequence chunk: its part of the whole sequence's mask
        return mul(x, _chunk_mask(x, p, seed, window))
    y = _like(x)
    run_map("dropout", x, y, p=p, seed=seed)
    return record("dropout", y, (x,), p=p, seed=seed)


@backward_rule("dropout")
def _dropout_bwd(node, g):
    # dropout is linear in x: its backward is the same mask and scale applied to g
    dx = _like(g)
    run_map("dropout", g, dx, p=node.ctx["p"], seed=node.ctx["seed"])
    return (dx,)


@double_backward_rule("dropout")
def _dropout_double(node, g):
    dx = _dropout_bwd(node, g)[0]
    return (record("dropout", dx, (g,), p=node.ctx["p"], seed=node.ctx["seed"]),)


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:  # noqa: A002
    """input @ weight^T + bias, as torch.nn.functional.linear: weight is (out_features,
    in_features), input (..., in_features), bias (out_features,)."""
    return affine(input, weight, bias, transposed=True, what="linear")


def affine(x: Tensor, weight: Tensor, bias: Tensor | None = None, *, transposed: bool = False,
           gelu: str | None = None, what: str = "affine") -> Tensor:
    """x @ weight + bias with weight (in, out) (GPT-2's Conv1D layout), or x @ weight^T + bias
    with weight (out, in) when ``transposed`` (torch's Linear).  x is (..., in) (or (in,): (out,));
    bias (out,) is added along the last axis.  Operands tiled differently from the weight are
    re-tiled (copy tasks): x's last axis to the weight's tile along `in`, bias to its tile along
    `out`.  ``gelu`` ('none' or 'tanh', F.gelu's ``approximate``): returns gelu of the result,
    applied by the last gemm task of each output tile (gemm_gelu) when there is a bias and the
    dtype is float32/float64, else by a separate gelu op."""
    if gelu is not None:
        approx = _gelu_params(gelu)["approx"]
        if bias is None or x.dtype not in (np.float32, np.float64):
            return _gelu_op(affine(x, weight, bias, transposed=transposed, what=what), approximate=gelu)
    _float_tensor(x, what, "input")
    _float_tensor(weight, what, "weight")
    i_ax, o_ax = (1, 0) if transposed else (0, 1)
    layout = "(out_features, in_features)" if transposed else "(in_features, out_features)"
    if weight.ndim != 2:
        raise ValueError(f"{what}: weight must be 2-D {layout}, got shape {weight.shape}")
    if x.ndim == 1:   # one sample (in_features,), as torch takes it: (out_features,)
        return squeeze(affine(unsqueeze(x, 0), weight, bias, transposed=transposed, gelu=gelu, what=what), 0)
    if x.ndim < 1:
        raise ValueError(f"{what}: input must have shape (..., in_features), got a 0-d tensor")
    if x.shape[-1] != weight.shape[i_ax]:
        raise ValueError(f"{what}: input's last dimension ({x.shape[-1]}) must equal weight's in_features "
                         f"({weight.shape[i_ax]}; weight {layout} has shape {weight.shape})")
    if x.dtype != weight.dtype:
        raise TypeError(f"{what}: dtype mismatch, input is {x.dtype} and weight is {weight.dtype}")
    if bias is not None:
        _float_tensor(bias, what, "bias")
        if bias.shape != (weight.shape[o_ax],):
            raise ValueError(f"{what}: bias must have shape ({weight.shape[o_ax]},), got {bias.shape}")
        if bias.dtype != weight.dtype:
            raise TypeError(f"{what}: dtype mismatch, weight is {weight.dtype} and bias is {bias.dtype}")
    if x.tiles[-1] != weight.tiles[i_ax]:
        x = retile(x, x.tiles[:-1] + (weight.tiles[i_ax],))
    if bias is None:
        return matmul(x, weight, transpose_b=transposed)
    if bias.tiles != (weight.tiles[o_ax],):
        bias = retile(bias, (weight.tiles[o_ax],))
    # one gemm_bias task per output tile (and gemm for the rest of its chain along `in`)
    y = Tensor(TensorTraits(x.shape[:-1] + (weight.shape[o_ax],), x.tiles[:-1] + (weight.tiles[o_ax],)), x.dtype)
    if gelu is not None:
        # one chain per output tile: gemm_bias, gemm..., gemm_gelu (or one gemm_gelu task);
        # when a backward may follow, the epilogue leaves gelu'(pre-activation) in d
        d = Tensor(y.traits, y.dtype)
        gemm_bias_gelu(1.0, x, weight, transposed, bias, approx, needs_grad(x, weight, bias), d, y)
        return record("affine_gelu", y, (x, weight, bias), saved=(x, weight, d, bias), transposed=transposed,
                      approximate=gelu)
    gemm_bias(1.0, x, weight, transposed, bias, y)
    return record("affine", y, (x, weight, bias), saved=(x, weight), transposed=transposed)


@backward_rule("affine", differentiable=True)
def _affine_bwd(node, g):
    """y = x op(W) + b over every leading axis of x: dx = g op(W)^T, dW = x^T g (or g^T x when
    W is (out, in)), db = g summed over the leading axes."""
    x, w = node.saved
    return _affine_grads(node, x, w, g)


@backward_rule("affine_gelu")
def _affine_gelu_bwd(node, g):
    """y = gelu(h), h = x op(W) + b: dh = gelu'(h) g with gelu'(h) saved by the forward's
    epilogue, then affine's gradients of dh."""
    x, w, d, _ = node.saved
    dh = Tensor(d.traits, d.dtype)
    run_map("mul", g, d, dh, alpha=1.0)
    return _affine_grads(node, x, w, dh)


@double_backward_rule("affine_gelu")
def _affine_gelu_double(node, g):
    """Differentiable form: the gradients of gelu(affine(x, W, b)) recomputed with recorded
    ops (affine, then gelu), for the inputs that need one."""
    x, w, _, b = node.saved
    c = node.ctx
    return composite_grads(node, g, lambda x, w, b: _gelu_op(affine(x, w, b, transposed=c["transposed"]),
                                                             approximate=c["approximate"]), x, w, b)


def _affine_grads(node, x, w, g):
    t = node.ctx["transposed"]
    need_x, need_w, need_b = (i is not None for i in node.inputs)
    dx = matmul(g, w, transpose_b=not t) if need_x else None
    dw = (matmul_leading(g, x) if t else matmul_leading(x, g)) if need_w else None
    db = _sum_axes(g, 0, g.ndim - 1) if need_b else None
    return dx, dw, db


