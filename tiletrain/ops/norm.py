"""Normalisations over the last axis: layer_norm and rms_norm, forward and backward.

The last axis may be split into several tiles.  Statistics are per row (x without its last
axis): a reduction along the last axis (Chan's pairwise merge of each tile's mean and M2 for
layer_norm, the sum of squares for rms_norm), then an in-place finalisation into the inverse
standard deviation; a broadcast pass then normalises every tile, reading its row statistics
and its column tile of weight/bias.  The row statistics (mean, rstd) are saved for backward.
All passes go through one C expander, ``tt_norm_map`` (csrc/expand_norm.c)."""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..runtime.kernels import run_map, run_norm
from ..tensors import Tensor, TensorTraits
from .autograd import backward_rule, composite_grads, double_backward_rule, needs_grad, record
from .basic import _float_tensor
from .creation import full
from .shape import reshape, retile


def _rows_traits(x: Tensor) -> TensorTraits:
    return x.traits.drop_axis(x.ndim - 1)


def _cols_traits(x: Tensor) -> TensorTraits:
    return TensorTraits((x.shape[-1],), (x.tiles[-1],))


def _eps(eps, what: str) -> float:
    if type(eps) is float and 0.0 < eps < float("inf"):  # the common case, without the ABC check
        return eps
    if not isinstance(eps, numbers.Real) or isinstance(eps, bool):
        raise TypeError(f"{what}: eps must be a real number, got {type(eps).__name__}")
    eps = float(eps)
    if not eps > 0.0 or eps == float("inf"):
        raise ValueError(f"{what}: eps must be a positive finite number, got {eps}")
    return eps


def _check_x(x, what: str) -> Tensor:
    _float_tensor(x, what, "x")
    if x.ndim < 1:
        raise ValueError(f"{what}: x must have at least one axis (normalised over the last), "
                         "got a 0-d tensor")
    return x


def _param(p, x: Tensor, what: str, name: str) -> Tensor | None:
    """weight/bias: None, or a 1-D tensor of size C and x's dtype, returned tiled like x's
    last axis."""
    if p is None:
        return None
    _float_tensor(p, what, name)
    C, tc = x.shape[-1], x.tiles[-1]
    if p.ndim != 1 or p.shape[0] != C:
        raise ValueError(f"{what}: {name} must have shape ({C},) (x's last axis), got {p.shape}")
    if p.dtype != x.dtype:
        raise TypeError(f"{what}: {name} is {p.dtype} but x is {x.dtype}")
    return p if p.tiles == (tc,) else retile(p, (tc,))   # tiled like x's last axis (copy tasks)


def _stats(x: Tensor, eps: float, centred: bool):
    """Per-row (mean, rstd) for layer_norm, (None, rstd) for rms_norm."""
    C = x.shape[-1]
    rstd = Tensor(_rows_traits(x), x.dtype)
    if centred:
        mean = Tensor(_rows_traits(x), x.dtype)
        run_norm("layer_norm_stats", [x], [mean, rstd], [],
                  reduce=1)
    else:
        mean = None
        run_norm("rms_norm_stats", [x], [rstd], [], reduce=1)
    # rstd = 1 / sqrt(M2 / C + eps), or 1 / sqrt(sum(x^2) / C + eps)
    run_map("norm_rstd", rstd, alpha=1.0 / C, eps=eps)
    return mean, rstd


def _normalized_shape(normalized_shape, what: str) -> tuple[int, ...]:
    """torch's normalized_shape (an int or a sequence of ints) as a tuple of ints."""
    if isinstance(normalized_shape, numbers.Integral) and not isinstance(normalized_shape, bool):
        normalized_shape = (int(normalized_shape),)
    if not isinstance(normalized_shape, (tuple, list)) or not all(
            isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in normalized_shape):
        raise TypeError(f"{what}: normalized_shape must be an int or a sequence of ints (x's last dimensions), "
                        f"got {normalized_shape!r}")
    return tuple(int(d) for d in normalized_shape)


def _normalized(what: str, x, normalized_shape, *params):
    """torch's normalized_shape (an int or a sequence, x's last dimensions): x and the
    parameters as they are when it names the last axis alone; otherwise x with the named
    axes merged into one (reshape) and the parameters flattened, and the shape to restore."""
    x = _check_x(x, what)
    if type(normalized_shape) is tuple and all(type(d) is int for d in normalized_shape):
        ns = normalized_shape  # the common case (a LayerNorm module's), without the ABC checks
    else:
        ns = _normalized_shape(normalized_shape, what)
    if not ns or len(ns) > x.ndim or x.shape[x.ndim - len(ns):] != ns:
        raise ValueError(f"{what}: normalized_shape {ns} must be the last dimensions of the input, whose shape "
                         f"is {x.shape}")
    for p, name in zip(params, ("weight", "bias")):
        if p is not None and getattr(p, "shape", None) != ns:
            raise ValueError(f"{what}: {name} must have shape normalized_shape {ns}, got "
                             f"{getattr(p, 'shape', type(p).__name__)}")
    if len(ns) == 1:
        return x, params, None
    n = math.prod(ns)
    merged = reshape(x, x.shape[:x.ndim - len(ns)] + (n,))
    return merged, tuple(None if p is None else reshape(p, (n,)) for p in params), x.shape


def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,  # noqa: A002
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """torch.nn.functional.layer_norm: (x - mean) / sqrt(var + eps) * weight + bias over the
    last dimensions of x named by normalized_shape (biased variance).  weight and bias have
    the shape normalized_shape, or are None.  Several normalised dimensions are merged into
    one (a reshape) and the normalisation runs over the last axis."""
    x, (weight, bias), shape = _normalized("layer_norm", input, normalized_shape, weight, bias)
    y = _layer_norm(x, weight, bias, eps)
    return y if shape is None else reshape(y, shape)


def _layer_norm(x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None,
                eps: float = 1e-5) -> Tensor:
    """layer_norm over the last axis of x; weight and bias 1-D of size x.shape[-1] or None."""
    what = "layer_norm"
    _check_x(x, what)
    weight = _param(weight, x, what, "weight")
    bias = _param(bias, x, what, "bias")
    eps = _eps(eps, what)
    w = weight if weight is not None else full(_cols_traits(x), 1.0, dtype=x.dtype)
    b = bias if bias is not None else full(_cols_traits(x), 0.0, dtype=x.dtype)
    y = Tensor(x.traits, x.dtype)
    if x.grid[-1] == 1:  # whole rows in a tile: one task per tile computes all three
        rows = _rows_traits(x)
        mean, rstd = Tensor(rows, x.dtype), Tensor(rows, x.dtype)
        run_norm("layer_norm_row", [x, y], [mean, rstd], [w, b], reduce=1, eps=eps)
    else:
        mean, rstd = _stats(x, eps, centred=True)
        run_norm("layer_norm_fwd", [x, y], [mean, rstd], [w, b], reduce=0)
    return record("layer_norm", y, (x, weight, bias), saved=(x, mean, rstd, w), eps=eps)


@backward_rule("layer_norm")
def _layer_norm_bwd(node, g):
    x, mean, rstd, w = node.saved
    need_x, need_w, need_b = (t is not None for t in node.inputs)
    dx = dw = db = None
    if need_x:
        rows = _rows_traits(x)
        ra, rb = Tensor(rows, x.dtype), Tensor(rows, x.dtype)
        run_norm("layer_norm_bwd_rows", [g, x], [mean, rstd, ra, rb], [w], reduce=1, alpha=1.0 / x.shape[-1])
        dx = Tensor(x.traits, x.dtype)
        run_norm("layer_norm_bwd_x", [g, x, dx], [mean, rstd, ra, rb], [w], reduce=0)
    if need_w or need_b:
        cols = _cols_traits(x)
        dw, db = Tensor(cols, x.dtype), Tensor(cols, x.dtype)
        run_norm("layer_norm_bwd_w", [g, x], [mean, rstd], [dw, db], reduce=2)
    return (dx, dw if need_w else None, db if need_b else None)


@double_backward_rule("layer_norm")
def _layer_norm_double(node, g):
    """Differentiable form: the gradients of the layer norm recomputed with recorded ops,
    (x - mean) * rsqrt(mean((x - mean)^2) + eps) * w + b, for the inputs that need one."""
    from .elementwise import add, mul, rsqrt, sub
    from .reduce import mean as rmean
    x, _, _, w = node.saved
    eps = node.ctx["eps"]

    def forward(x, w, b):
        xc = sub(x, rmean(x, -1, keepdim=True))
        y = mul(mul(xc, rsqrt(add(rmean(mul(xc, xc), -1, keepdim=True), eps))), w)
        return y if b is None else add(y, b)   # (b's value does not change a gradient)
    return composite_grads(node, g, forward, x, w, node.inputs[2])


def rms_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,  # noqa: A002
             eps: float | None = None) -> Tensor:
    """torch.nn.functional.rms_norm: x / sqrt(mean(x^2) + eps) * weight over the last
    dimensions of x named by normalized_shape; weight has the shape normalized_shape, or is
    None; eps=None is torch's default, the machine epsilon of x's dtype
    (torch.finfo(x.dtype).eps)."""
    x, (weight,), shape = _normalized("rms_norm", input, normalized_shape, weight)
    y = _rms_norm(x, weight, _finfo_eps(x.dtype) if eps is None else eps)
    return y if shape is None else reshape(y, shape)


def _finfo_eps(dtype) -> float:
    try:
        return float(np.finfo(dtype).eps)
    except ValueError:  # bfloat16 (ml_dtypes' own finfo)
        import ml_dtypes
        return float(ml_dtypes.finfo(dtype).eps)


def _rms_norm(x: Tensor, weight: Tensor | None = None, eps: float = 1e-6) -> Tensor:
    """rms_norm over the last axis of x; weight 1-D of size x.shape[-1] or None."""
    what = "rms_norm"
    _check_x(x, what)
    weight = _param(weight, x, what, "weight")
    eps = _eps(eps, what)
    w = weight if weight is not None else full(_cols_traits(x), 1.0, dtype=x.dtype)
    y = Tensor(x.traits, x.dtype)
    if x.grid[-1] == 1:  # whole rows in a tile: one task per tile
        rstd = Tensor(_rows_traits(x), x.dtype)
        run_norm("rms_norm_row", [x, y], [rstd], [w], reduce=1, eps=eps)
    else:
        _, rstd = _stats(x, eps, centred=False)
        run_norm("rms_norm_fwd", [x, y], [rstd], [w], reduce=0)
    return record("rms_norm", y, (x, weight), saved=(x, rstd, w), eps=eps)


@backward_rule("rms_norm")
def _rms_norm_bwd(node, g):
    x, rstd, w = node.saved
    need_x, need_w = (t is not None for t in node.inputs)
    dx = dw = None
    if need_x:
        rb = Tensor(_rows_traits(x), x.dtype)
        run_norm("rms_norm_bwd_rows", [g, x], [rstd, rb], [w], reduce=1, alpha=1.0 / x.shape[-1])
        dx = Tensor(x.traits, x.dtype)
        run_norm("rms_norm_bwd_x", [g, x, dx], [rstd, rb], [w],
                  reduce=0)
    if need_w:
        dw = Tensor(_cols_traits(x), x.dtype)
        run_norm("rms_norm_bwd_w", [g, x], [rstd], [dw], reduce=2)
    return (dx, dw)


@double_backward_rule("rms_norm")
def _rms_norm_double(node, g):
    """Differentiable form: x * rsqrt(mean(x^2) + eps) * w recomputed with recorded ops."""
    from .elementwise import add, mul, rsqrt
    from .reduce import mean as rmean
    x, _, w = node.saved
    eps = node.ctx["eps"]
    return composite_grads(node, g, lambda x, w: mul(mul(x, rsqrt(add(rmean(mul(x, x), -1, keepdim=True), eps))), w),
                           x, w)


def _add_then(x, r, what: str, *params):
    """The checks of add_layer_norm / add_rms_norm; True when the fused task applies (rows
    whole in a tile, no gradient recorded, x and r of one layout)."""
    _check_x(x, what)
    _float_tensor(r, what, "r")
    if r.shape != x.shape or r.tiles != x.tiles or r.dtype != x.dtype:
        raise ValueError(f"{what}: r must have x's shape, tiles and dtype (x {x.shape} tiles {x.tiles} {x.dtype}, "
                         f"r {r.shape} tiles {r.tiles} {r.dtype})")
    return x.grid[-1] == 1 and not needs_grad(x, r, *params)


def add_layer_norm(x: Tensor, r: Tensor, weight: Tensor | None = None, bias: Tensor | None = None,
                   eps: float = 1e-5) -> tuple[Tensor, Tensor]:
    """(s, layer_norm(s, s.shape[-1:], weight, bias, eps)) with s = x + r: a residual add and the next norm
    (a decode step).  One task per row tile (add_layer_norm_row) when the rows are whole tiles
    and no gradient is recorded, the same values as add then layer_norm; otherwise exactly those
    two ops."""
    what = "add_layer_norm"
    if not _add_then(x, r, what, weight, bias):
        s = x + r
        return s, _layer_norm(s, weight, bias, eps)
    weight = _param(weight, x, what, "weight")
    bias = _param(bias, x, what, "bias")
    eps = _eps(eps, what)
    w = weight if weight is not None else full(_cols_traits(x), 1.0, dtype=x.dtype)
    b = bias if bias is not None else full(_cols_traits(x), 0.0, dtype=x.dtype)
    s, y = Tensor(x.traits, x.dtype), Tensor(x.traits, x.dtype)
    rows = _rows_traits(x)
    mean, rstd = Tensor(rows, x.dtype), Tensor(rows, x.dtype)
    run_norm("add_layer_norm_row", [x, r, s, y], [mean, rstd], [w, b], reduce=1, eps=eps)
    return s, y


def add_rms_norm(x: Tensor, r: Tensor, weight: Tensor | None = None,
                 eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    """(s, rms_norm(s, s.shape[-1:], weight, eps)) with s = x + r, as add_layer_norm
    (add_rms_norm_row)."""
    what = "add_rms_norm"
    if not _add_then(x, r, what, weight):
        s = x + r
        return s, _rms_norm(s, weight, eps)
    weight = _param(weight, x, what, "weight")
    eps = _eps(eps, what)
    w = weight if weight is not None else full(_cols_traits(x), 1.0, dtype=x.dtype)
    s, y = Tensor(x.traits, x.dtype), Tensor(x.traits, x.dtype)
    rstd = Tensor(_rows_traits(x), x.dtype)
    run_norm("add_rms_norm_row", [x, r, s, y], [rstd], [w], reduce=1, eps=eps)
    return s, y


__all__ = ["layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm"]
