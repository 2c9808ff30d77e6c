"""Reductions with torch's signatures: sum, mean, var, std, amax, amin, max, min, argmax,
argmin, logsumexp, norm.

``dim`` is an int or a tuple of ints (any order, negatives allowed, not necessarily
consecutive); None (or an empty tuple, where torch allows it) reduces every axis.  A set of
reduced axes is split into runs of consecutive axes, reduced one run after another, highest
run first (so the lower runs keep their axis numbers), each run by one span expander call
(csrc/expand.c, tt_span_map: one task per tile pair).  ``keepdim`` results cost no copy: the
span expander writes a reduced operand that keeps the reduced axes with size 1 (tiles of 1)
as well as one without them.

Gradients: sum, mean and logsumexp over several runs are chains of recorded single-run
reductions (the chain rule composes them); amax/amin (torch's gradient: evenly distributed
among the tied extremes of the whole reduced set), var/std and norm record one node for the
whole set and broadcast back over every run (_expand)."""
from __future__ import annotations

import math
import numbers
from collections import namedtuple
from typing import NamedTuple

import numpy as np

from ..runtime.kernels import run_map, run_span, tensor_view, view_tiles
from ..tensors import Tensor, TensorTraits, as_dtype, from_numpy, is_float, is_half
from . import basic
from .autograd import backward_rule, composite_grads, double_backward_rule, record
from .basic import _float_tensor
from .elementwise import BINARY_OPS, convert, host_tensor, maximum, minimum
from .shape import _reshape, _view, retile, squeeze

_mul, _div, _sub = BINARY_OPS["mul"], BINARY_OPS["div"], BINARY_OPS["sub"]  # same-layout, with the kernels' alpha

# torch.return_types.max / min / topk: (values, indices)
return_types = type("return_types", (), {
    "max": namedtuple("max", ["values", "indices"]),
    "min": namedtuple("min", ["values", "indices"]),
    "topk": namedtuple("topk", ["values", "indices"]),
    "sort": namedtuple("sort", ["values", "indices"]),
})


def _c(a) -> np.ndarray:
    """a as a C-contiguous array that keeps 0-d arrays 0-d (np.ascontiguousarray makes them 1-d)."""
    return np.array(a, order="C")


# ---- dims, runs, stages -------------------------------------------------------------------

def _dim_index(x: Tensor, d, what: str) -> int:
    if not isinstance(d, numbers.Integral) or isinstance(d, bool):
        raise TypeError(f"{what}: dim must be an int or a tuple of ints, got {type(d).__name__}")
    lo, hi = (-1, 0) if x.ndim == 0 else (-x.ndim, x.ndim - 1)
    if not lo <= d <= hi:
        raise IndexError(f"{what}: Dimension out of range (expected to be in range of [{lo}, {hi}], but got {d})")
    return int(d) % x.ndim if x.ndim else 0


def _dims(x: Tensor, dim, what: str) -> tuple[int, ...]:
    """The sorted axes to reduce (every axis for None or ())."""
    if dim is None:
        return tuple(range(x.ndim))
    if isinstance(dim, (tuple, list)):
        out = [_dim_index(x, d, what) for d in dim]
        for d in out:
            if out.count(d) > 1:
                raise ValueError(f"{what}: dim {d} appears multiple times in the list of dims")
        dims = tuple(sorted(out)) if out else tuple(range(x.ndim))
    else:
        dims = (_dim_index(x, dim, what),)
    return dims if x.ndim else ()  # a 0-d tensor takes dim 0 or -1 and has nothing to reduce


class _Stage(NamedTuple):
    """One run of consecutive axes [start, start + naxes) and the traits before and after it."""
    start: int
    naxes: int
    src: TensorTraits
    dst: TensorTraits


def _stages(traits: TensorTraits, dims, keepdim: bool, split: bool = True) -> list[_Stage]:
    """The runs of ``dims`` (sorted), highest first, with the traits before and after each.
    With ``split``, a run that starts at axis 0 and spans several tiles along it is reduced in
    two stages, its other axes first: one chain of tasks per tile along axis 0 runs in
    parallel, instead of a single chain over every tile (whole-tensor reductions)."""
    runs: list[list[int]] = []
    for d in dims:
        if runs and runs[-1][-1] == d - 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    if split and runs and runs[0][0] == 0 and len(runs[0]) > 1 and traits.grid[0] > 1:
        runs[:1] = [[0], runs[0][1:]]
    out, t = [], traits
    for r in reversed(runs):
        dst = t.keep_axis(r[0], len(r)) if keepdim else t.drop_axis(r[0], len(r))
        out.append(_Stage(r[0], len(r), t, dst))
        t = dst
    return out


def _count(x: Tensor, dims) -> int:
    return math.prod(x.shape[d] for d in dims)


def _regroup_shape(x: Tensor, st: _Stage) -> tuple[int, ...] | None:
    """x's shape with st's axis split in two, (tile along it, position in the tile), when st
    reduces one axis of whole tiles into fewer result tiles than there are tiles along it and
    the split is a view (no copy); else None.  Reducing within the tiles first, then across
    them, runs one task per tile at once instead of chains of tasks as long as the axis's grid
    (e.g. amax over axis 0 of a (64, 512, 512) tensor in tiles of (8, 512, 512): one chain of
    8 tasks)."""
    a = st.start
    g, t = x.traits.grid[a], x.traits.tiles[a]
    if st.naxes != 1 or g < 2 or t < 2 or x.shape[a] != g * t or st.dst.ntiles >= g:
        return None
    shape = x.shape[:a] + (g, t) + x.shape[a + 1:]
    return shape if view_tiles(x, shape) is not None else None


def _span_reduce(kernel: str, x: Tensor, stages, regroup: bool = False, **fields) -> Tensor:
    """``kernel`` (a span reduction) along each stage in turn; nothing recorded.  ``regroup``
    (a kernel that also combines its own partial results, such as max_axis): a stage whose
    result has few tiles reduces within x's tiles first (_regroup_shape)."""
    for st in stages:
        y = Tensor(st.dst, x.dtype)
        shape = _regroup_shape(x, st) if regroup else None
        if shape is not None:
            v = _view(x, tensor_view(x, shape), shape, view_tiles(x, shape))
            x = Tensor(v.traits.drop_axis(st.start + 1), x.dtype)
            run_span(kernel, st.start + 1, 1, [v], [x], reduce=True, **fields)
        run_span(kernel, st.start, st.naxes, [x], [y], reduce=True, **fields)
        x = y
    return x


def _expand(t: Tensor, stages) -> Tensor:
    """t (the result of ``stages``) repeated back over every stage's axes: the first stage's
    input layout.  Nothing recorded."""
    for st in reversed(stages):
        y = Tensor(st.src, t.dtype)
        run_span("bcast", st.start, st.naxes, [y], [t], reduce=False, alpha=1.0)
        t = y
    return t


def _keepdim(v, what: str) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"{what}: keepdim must be a bool, got {type(v).__name__}")
    return v


def _noop(x: Tensor) -> Tensor:
    """A 0-d (or empty-dims) reduction: x itself, as a new tensor."""
    return basic.copy(x)


# ---- sum, mean ----------------------------------------------------------------------------

def _sum_stages(x: Tensor, stages, alpha: float) -> Tensor:
    for st in stages:
        shape = None if is_half(x.dtype) else _regroup_shape(x, st)  # half types: one rounding
        if shape is not None:  # within the tiles first (a recorded view: gradients flow back)
            x = basic._sum_axes(_reshape(x, shape), st.start + 1, 1, alpha)
            alpha = 1.0
        x = basic._sum_axes(x, st.start, st.naxes, alpha, out=st.dst)
        alpha = 1.0
    return x


def _cast_to(x: Tensor, dtype, what: str) -> Tensor:
    if dtype is None:
        return x
    dt = as_dtype(dtype)
    if not is_float(dt):
        raise TypeError(f"{what}: dtype must be a float dtype, got {dt}")
    return x if dt == x.dtype else basic.astype(x, dt)


def _sum_like(x, dim, keepdim, dtype, what: str, mean: bool) -> Tensor:
    basic._tensor(x, what, "input")
    if not is_float(x.dtype):  # bool and int64, as torch: sums are int64, means need a float dtype=
        if dtype is not None and is_float(as_dtype(dtype)):
            x = convert(x, dtype)
        elif mean:
            raise RuntimeError(f"{what}(): could not infer output dtype. Input dtype must be either a floating "
                               f"point or complex dtype. Got: {x.dtype}")
        else:
            if dtype is not None and as_dtype(dtype) != np.int64:
                raise TypeError(f"{what}: dtype must be int64 or a float dtype for a {x.dtype} input, got {dtype}")
            dims = _dims(x, dim, what)
            out = np.sum(x.numpy(force=True), axis=dims, keepdims=_keepdim(keepdim, what), dtype=np.int64)
            return from_numpy(_c(out))
    basic._any_float_tensor(x, what, "input")
    dims = _dims(x, dim, what)
    keepdim = _keepdim(keepdim, what)
    x = _cast_to(x, dtype, what)
    n = _count(x, dims)
    alpha = (1.0 / n if n else math.nan) if mean else 1.0
    if x.ndim == 0:
        return basic.scale(x, alpha) if alpha != 1.0 else _noop(x)
    half = is_half(x.dtype)  # half types: one float32 accumulation, rounded once
    if len(dims) == x.ndim and not keepdim and (half or x.ndim == 1):
        return basic._sum_axes(x, None, 0, alpha)
    return _sum_stages(x, _stages(x.traits, dims, keepdim, split=not half), alpha)


@basic.dim_alias
def sum(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A001
    """torch.sum: the sum over ``dim`` (None: every element, a 0-d tensor)."""
    return _sum_like(input, dim, keepdim, dtype, "sum", mean=False)


@basic.dim_alias
def mean(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """torch.mean."""
    return _sum_like(input, dim, keepdim, dtype, "mean", mean=True)


# ---- broadcasting's backward ----------------------------------------------------------------

@backward_rule("expand", differentiable=True)
def _expand_bwd(node, g):
    """shape.expand_to's backward: the sum over the broadcast axes, re-tiled as the input."""
    return (retile(sum_to(g, node.ctx["shape"]), node.ctx["tiles"]),)


def sum_to(g: Tensor, shape) -> Tensor:
    """(internal) The gradient of a broadcast: g summed over the axes along which ``shape``
    was broadcast to g's shape (new leading axes, expanded size-1 axes), reshaped to
    ``shape``.  g itself when the shapes are equal."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    if lead < 0 or any(s != 1 and s != n for s, n in zip(shape, g.shape[lead:])):
        raise ValueError(f"sum_to: shape {shape} does not broadcast to g's shape {g.shape}")
    if not shape:
        return sum(g)
    dims = tuple(range(lead)) + tuple(lead + a for a, s in enumerate(shape) if s == 1 and g.shape[lead + a] != 1)
    g = sum(g, dims, keepdim=True)  # keepdim: the same tiles, no copy
    return squeeze(g, tuple(range(lead))) if lead else g


# ---- amax, amin, max, min -----------------------------------------------------------------

def _extreme(x: Tensor, dim, keepdim, ismin: int, what: str) -> Tensor:
    _float_tensor(x, what, "input")
    dims = _dims(x, dim, what)
    keepdim = _keepdim(keepdim, what)
    if x.ndim == 0:
        return _noop(x)
    stages = _stages(x.traits, dims, keepdim)
    y = _span_reduce("min_axis" if ismin else "max_axis", x, stages, regroup=True)
    return record("amax", y, (x,), saved=(x, y), stages=stages)


@backward_rule("amax")
def _amax_bwd(node, g):
    """torch: the gradient is split evenly among the elements equal to the result."""
    return _amax_grad(node, g, _expand)


def _amax_grad(node, g, expand):
    x, y = node.saved
    stages = node.ctx["stages"]
    mask = Tensor(x.traits, x.dtype)  # (the mask and the count are constants: zero derivatives)
    run_map("eq_mask", x, _expand(y, stages), mask)
    count = _span_reduce("sum_axis", mask, stages, alpha=1.0)
    return (_mul(mask, expand(_div(g, count, alpha=1.0), stages), alpha=1.0),)


@basic.dim_alias
def amax(input: Tensor, dim=(), keepdim: bool = False) -> Tensor:
    """torch.amax: the maximum over ``dim`` (() or None: every axis); NaN propagates."""
    return _extreme(input, dim, keepdim, 0, "amax")


@basic.dim_alias
def amin(input: Tensor, dim=(), keepdim: bool = False) -> Tensor:
    """torch.amin."""
    return _extreme(input, dim, keepdim, 1, "amin")


def _arg_dim(x: Tensor, dim, keepdim, ismin: int, what: str) -> tuple[Tensor, Tensor]:
    """(values, int64 indices) along one axis, as torch.max(x, dim)."""
    _float_tensor(x, what, "input")
    if isinstance(dim, (tuple, list)):
        raise TypeError(f"{what}: dim must be an int, got {type(dim).__name__}")
    axis = _dim_index(x, dim, what)
    keepdim = _keepdim(keepdim, what)
    if x.ndim == 0:
        i = Tensor(TensorTraits(()), np.int64)
        run_map("fill", i, value=0.0)
        i.value_range = (0, 0)
        return _noop(x), i
    (st,) = _stages(x.traits, (axis,), keepdim)
    v, i = Tensor(st.dst, x.dtype), Tensor(st.dst, np.int64)
    run_span("arg_axis", axis, 1, [x], [v, i], reduce=True, ismin=ismin)
    i.value_range = (0, x.shape[axis] - 1)
    return record("max_dim", v, (x,), saved=(i,), traits=x.traits, axis=axis), i


@backward_rule("max_dim")
def _max_dim_bwd(node, g):
    (i,) = node.saved
    dx = Tensor(node.ctx["traits"], g.dtype)
    run_span("arg_scatter", node.ctx["axis"], 1, [dx], [i, g], reduce=False)
    return (dx,)


def _int_extreme(x: Tensor, dim, keepdim, ismin: int, what: str, arg: bool = False):
    """max/min/argmax/argmin of an int64 or bool tensor, in NumPy (exact int64 values; the
    first index among ties, as torch)."""
    a = x.numpy(force=True)
    if a.size == 0:
        raise RuntimeError(f"{what}(): Expected reduction dim to be specified for input.numel() == 0.")
    if dim is None:
        if arg:
            return _host(np.argmin(a) if ismin else np.argmax(a), a.ndim if keepdim else 0)
        return _host(a.min() if ismin else a.max())
    d = _dim_index(x, dim, what)
    if a.ndim == 0:
        v, i = a, np.zeros((), np.int64)
    else:
        i = np.argmin(a, axis=d) if ismin else np.argmax(a, axis=d)
        v = np.take_along_axis(a, np.expand_dims(i, d), d).squeeze(d)
        if keepdim:
            v, i = np.expand_dims(v, d), np.expand_dims(i, d)
    if arg:
        return _host(i)
    return getattr(return_types, what)(_host(v), _host(i))


def _host(a, keep_ndim: int = 0) -> Tensor:
    return host_tensor(np.reshape(a, (1,) * keep_ndim) if keep_ndim else a)

# (max_dim's differentiable form, a recorded scatter_add, is in ops/index.py)


def _max_min(x, dim, keepdim, ismin: int, what: str):
    if isinstance(x, Tensor) and not is_float(x.dtype) and not isinstance(dim, Tensor):
        return _int_extreme(x, dim, keepdim, ismin, what)
    if dim is None:
        if keepdim:
            raise TypeError(f"{what}: keepdim needs a dim (torch.{what}(input) reduces every element)")
        return _extreme(x, None, False, ismin, what)
    if isinstance(dim, Tensor):
        raise TypeError(f"{what}: dim must be an int (the element-wise {what} of two tensors is "
                        f"{'minimum' if ismin else 'maximum'})")
    return getattr(return_types, what)(*_arg_dim(x, dim, keepdim, ismin, what))


@basic.dim_alias
def max(input: Tensor, dim=None, keepdim: bool = False):  # noqa: A001
    """torch.max: max(input) is the maximum element (0-d, gradient as amax); max(input, dim,
    keepdim=False) is a (values, indices) namedtuple, int64 indices of the first maximum
    (the first NaN), the gradient flowing to the selected index; max(input, other) of two
    tensors is the element-wise maximum."""
    if isinstance(dim, Tensor):
        return maximum(input, dim)
    return _max_min(input, dim, keepdim, 0, "max")


@basic.dim_alias
def min(input: Tensor, dim=None, keepdim: bool = False):  # noqa: A001
    """torch.min (see max)."""
    if isinstance(dim, Tensor):
        return minimum(input, dim)
    return _max_min(input, dim, keepdim, 1, "min")


def _argext(x: Tensor, dim, keepdim, ismin: int, what: str) -> Tensor:
    if isinstance(x, Tensor) and not is_float(x.dtype):
        return _int_extreme(x, dim, keepdim, ismin, what, arg=True)
    if dim is not None:
        return _arg_dim(x, dim, keepdim, ismin, what)[1]
    _float_tensor(x, what, "input")
    keepdim = _keepdim(keepdim, what)
    if x.ndim == 0:
        return _arg_dim(x, 0, False, ismin, what)[1]
    # the flat index: the last axis first, then each earlier axis carrying the index chosen so
    # far (index = position * inner + carried), so ties keep the first index in row-major order
    v, i, inner = x, None, 1
    for axis in reversed(range(x.ndim)):
        (st,) = _stages(v.traits, (axis,), keepdim)
        nv, ni = Tensor(st.dst, x.dtype), Tensor(st.dst, np.int64)
        if i is None:
            run_span("arg_axis", axis, 1, [v], [nv, ni], reduce=True, ismin=ismin)
        else:
            run_span("arg_carry", axis, 1, [v, i], [nv, ni], reduce=True, inner=inner, ismin=ismin)
        v, i, inner = nv, ni, inner * x.shape[axis]
    i.value_range = (0, inner - 1)
    return i


@basic.dim_alias
def argmax(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """torch.argmax: int64 index of the first maximum along ``dim`` (None: in the flattened
    tensor)."""
    return _argext(input, dim, keepdim, 0, "argmax")


@basic.dim_alias
def argmin(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """torch.argmin."""
    return _argext(input, dim, keepdim, 1, "argmin")


# ---- var, std -----------------------------------------------------------------------------

def _var(x: Tensor, dim, correction, keepdim, root: bool, what: str) -> Tensor:
    _float_tensor(x, what, "input")
    dims = _dims(x, dim, what)
    keepdim = _keepdim(keepdim, what)
    correction = basic._scalar(correction, what, "correction")
    n = _count(x, dims)
    div = n - correction
    alpha = 1.0 / div if div > 0 else math.inf  # torch: 0/0 = nan, s/0 = inf
    if x.ndim == 0:  # one element
        out = Tensor(x.traits, x.dtype)
        run_map("fill", out, value=math.nan if div <= 0 else 0.0)
        return out
    stages = _stages(x.traits, dims, keepdim)
    mu = _span_reduce("sum_axis", _span_reduce("sum_axis", x, stages[:1], alpha=1.0 / n), stages[1:], alpha=1.0)
    first = stages[0]
    sq = Tensor(first.dst, x.dtype)  # two-pass: sum((x - mean)^2), the mean read as a reduced operand
    run_span("sqdev_axis", first.start, first.naxes, [x], [_expand(mu, stages[1:]), sq], reduce=True, alpha=alpha)
    y = _span_reduce("sum_axis", sq, stages[1:], alpha=1.0)
    if root:
        r = Tensor(y.traits, y.dtype)
        run_map("sqrt_scalar", y, r)
        y = r
    return record("var", y, (x,), saved=(x, mu, y), stages=stages, scale=2.0 / div if div > 0 else math.inf,
                  root=root)


@backward_rule("var")
def _var_bwd(node, g):
    """d var = 2 (x - mean) / (N - correction) g;  d std = d var / (2 std)."""
    x, mu, y = node.saved
    c = node.ctx
    if c["root"]:
        g = _div(g, y, alpha=0.5)
    stages = c["stages"]
    d = _sub(x, _expand(mu, stages), alpha=1.0, beta=-1.0)
    return (_mul(d, _expand(g, stages), alpha=c["scale"]),)


def _correction(dim, unbiased, keepdim, correction):
    """torch's two signatures: (dim, *, correction, keepdim) and the older (dim, unbiased,
    keepdim) -- var(x, False) passes unbiased where dim would be."""
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    if unbiased is not None:
        if correction is not None:
            raise TypeError("var/std: give either unbiased or correction, not both")
        correction = 1 if unbiased else 0
    return dim, keepdim, 1 if correction is None else correction


@basic.dim_alias
def var(input: Tensor, dim=None, unbiased=None, keepdim: bool = False, *, correction=None) -> Tensor:
    """torch.var: sum((x - mean)^2) / max(0, N - correction), two passes (unbiased=False is
    correction=0)."""
    dim, keepdim, correction = _correction(dim, unbiased, keepdim, correction)
    return _var(input, dim, correction, keepdim, False, "var")


@basic.dim_alias
def std(input: Tensor, dim=None, unbiased=None, keepdim: bool = False, *, correction=None) -> Tensor:
    """torch.std: sqrt(var)."""
    dim, keepdim, correction = _correction(dim, unbiased, keepdim, correction)
    return _var(input, dim, correction, keepdim, True, "std")


# ---- logsumexp ----------------------------------------------------------------------------

@basic.dim_alias
def logsumexp(input: Tensor, dim, keepdim: bool = False) -> Tensor:
    """torch.logsumexp: log(sum(exp(x))) over ``dim``, as max + log(sum(exp(x - max))) in two
    passes (the max, then one exp per element); several runs of axes are chained (logsumexp is
    associative)."""
    what = "logsumexp"
    x = _float_tensor(input, what, "input")
    dims = _dims(x, dim, what)
    keepdim = _keepdim(keepdim, what)
    if x.ndim == 0:
        return _noop(x)
    for st in _stages(x.traits, dims, keepdim):
        mx, s, y = (Tensor(st.dst, x.dtype) for _ in range(3))
        run_span("max_axis", st.start, st.naxes, [x], [mx], reduce=True)
        run_span("expsum_axis", st.start, st.naxes, [x], [mx, s], reduce=True)
        run_map("lse_finish", mx, s, y)
        x = record("logsumexp", y, (x,), saved=(x, mx, s), start=st.start, naxes=st.naxes)
    return x


@backward_rule("logsumexp")
def _logsumexp_bwd(node, g):
    x, mx, s = node.saved
    c = node.ctx
    p = Tensor(x.traits, x.dtype)  # softmax over the span: exp(x - logsumexp)
    run_span("softmax_apply", c["start"], c["naxes"], [x, p], [mx, s], reduce=False, islog=0)
    ge = Tensor(x.traits, x.dtype)
    run_span("bcast", c["start"], c["naxes"], [ge], [g], reduce=False, alpha=1.0)
    return (_mul(p, ge, alpha=1.0),)


# ---- norm ---------------------------------------------------------------------------------

def _abs(x: Tensor) -> Tensor:
    zero = Tensor(x.traits, x.dtype)
    run_map("fill", zero, value=0.0)
    y = Tensor(x.traits, x.dtype)
    run_map("absdiff", x, zero, y)
    return record("abs_", y, (x,), saved=(x, zero))


@backward_rule("abs_")
def _abs_bwd(node, g):
    x, zero = node.saved
    dx = Tensor(x.traits, x.dtype)
    run_map("absdiff_bwd", x, zero, g, dx, alpha=1.0)
    return (dx,)


@double_backward_rule("abs_")
def _abs_double(node, g):
    from .elementwise import sign
    return (_mul(g, sign(node.saved[0].detach()), alpha=1.0),)


@basic.dim_alias
def norm(input: Tensor, p="fro", dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """torch.norm, vector norms over ``dim``: p = "fro" (= 2), inf, -inf or any real p
    (0: the count of nonzeros).  "nuc" is not supported."""
    what = "norm"
    x = _float_tensor(input, what, "input")
    x = _cast_to(x, dtype, what)
    if p == "fro":
        p = 2.0
    if isinstance(p, str) or not isinstance(p, numbers.Real) or isinstance(p, bool):
        raise ValueError(f"{what}: p must be 'fro', inf, -inf or a real number, got {p!r}")
    p = float(p)
    if math.isinf(p):
        return _extreme(_abs(x), dim, keepdim, int(p < 0), what)
    dims = _dims(x, dim, what)
    keepdim = _keepdim(keepdim, what)
    if x.ndim == 0:
        return _abs(x) if p != 0 else _nonzero0(x)
    stages = _stages(x.traits, dims, keepdim)
    s = _span_reduce("sum_axis", _span_reduce("pnorm_axis", x, stages[:1], p=p), stages[1:], alpha=1.0)
    y = Tensor(s.traits, s.dtype)
    run_map("pnorm_root", s, y, p=p)
    return record("norm", y, (x,), saved=(x, y), stages=stages, p=p)


def _nonzero0(x: Tensor) -> Tensor:
    """A 0-d x's 0-norm: 1 if x != 0 else 0 (no gradient)."""
    zero = Tensor(x.traits, x.dtype)
    run_map("fill", zero, value=0.0)
    eq = Tensor(x.traits, x.dtype)
    run_map("eq_mask", x, zero, eq)
    return basic.add_scalar(eq.detach(), 1.0, alpha=-1.0)


@backward_rule("norm")
def _norm_bwd(node, g):
    x, y = node.saved
    stages = node.ctx["stages"]
    dx = Tensor(x.traits, x.dtype)
    run_map("pnorm_bwd", x, _expand(y, stages), _expand(g, stages), dx, p=node.ctx["p"])
    return (dx,)


# ---- double backward: the reductions recomputed with recorded ops (composite_grads) -------

def _rsum(t: Tensor, stages, alpha: float = 1.0) -> Tensor:
    """alpha * the sum of t over ``stages``, recorded."""
    for st in stages:
        t = basic._sum_axes(t, st.start, st.naxes, alpha, out=st.dst)
        alpha = 1.0
    return t


def _rexpand(t: Tensor, stages) -> Tensor:
    """_expand, recorded."""
    for st in reversed(stages):
        t = basic.broadcast(t, st.src, tuple(range(st.start, st.start + st.naxes)))
    return t


@double_backward_rule("amax")
def _amax_double(node, g):
    return _amax_grad(node, g, _rexpand)


@double_backward_rule("var")
def _var_double(node, g):
    from .elementwise import mul, sqrt, sub
    x = node.saved[0]
    c = node.ctx
    stages = c["stages"]
    n = x.traits.size // stages[-1].dst.size

    def forward(x):
        d = sub(x, _rexpand(_rsum(x, stages, 1.0 / n), stages))
        v = _rsum(mul(d, d), stages, c["scale"] / 2.0)
        return sqrt(v) if c["root"] else v
    return composite_grads(node, g, forward, x)


@double_backward_rule("logsumexp")
def _logsumexp_double(node, g):
    from .elementwise import add, exp, log, sub
    x, mx, _ = node.saved
    c = node.ctx
    axes = tuple(range(c["start"], c["start"] + c["naxes"]))
    # log(sum(exp(x - mx))) + mx with the row max a constant (it does not change the value)
    return composite_grads(node, g, lambda x: add(log(basic._sum_axes(exp(sub(x, basic.broadcast(mx, x.traits, axes))),
                                                                      c["start"], c["naxes"], out=mx.traits)), mx), x)


@double_backward_rule("norm")
def _norm_double(node, g):
    from .elementwise import abs as eabs, mul, pow as epow
    x = node.saved[0]
    p, stages = node.ctx["p"], node.ctx["stages"]
    if p == 0.0:
        return (basic.fill_(Tensor(x.traits, x.dtype), 0.0),)
    t = (lambda x: mul(x, x)) if p == 2.0 else (lambda x: epow(eabs(x), p))
    return composite_grads(node, g, lambda x: epow(_rsum(t(x), stages), 1.0 / p), x)


__all__ = ["sum", "mean", "var", "std", "amax", "amin", "max", "min", "argmax", "argmin", "logsumexp", "norm",
           "return_types"]
