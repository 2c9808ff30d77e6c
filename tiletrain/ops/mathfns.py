"""More torch functions composed of the recorded ops (their gradients come from those ops):
hyperbolic and inverse-hyperbolic functions, exp2/frac/deg2rad/rad2deg, lerp, hypot,
logaddexp, clamp_min/clamp_max, addcmul/addcdiv, xlogy, logit, sgn, signbit, copysign, fmax/fmin,
heaviside, float_power, diff, swapaxes, concat/concatenate, tile, unflatten, take_along_dim,
kron, tensordot, inner, vdot, diagonal, diagflat, fliplr/flipud, rot90, atleast_1d/2d/3d,
nansum/nanmean, aminmax, msort, tensor_split/hsplit/vsplit, dstack/column_stack, addbmm, cummax/cummin,
kthvalue, median, block_diag, cartesian_prod, logspace, matrix_power, diag_embed, cross, cdist."""
from __future__ import annotations

import math
import numbers
from collections import namedtuple

import numpy as np

from ..tensors import Tensor, bool_, float64, is_float
from ..tensors.tensor import get_default_dtype
from .basic import _tensor
from .composite import _dim, flip, isnan, movedim, repeat
from .elementwise import (abs as _abs, add, clamp, convert, div, eq, exp, expm1, gt, host_tensor, log,
                          log1p, lt, maximum, minimum, mul, pow, sign, sqrt, sub, trunc, where)
from .linalg import matmul
from .reduce import amax, amin, sum as _sum
from .shape import cat, getitem, permute, reshape, stack, transpose, unsqueeze

__all__ = ["acosh", "addbmm", "addcdiv", "addcmul", "aminmax", "asinh", "atanh", "atleast_1d",
           "atleast_2d", "atleast_3d", "block_diag", "cartesian_prod", "cdist", "clamp_max", "clamp_min",
           "column_stack", "concat", "concatenate", "copysign", "cosh", "cross", "cummax", "cummin",
           "deg2rad", "diag_embed", "diagflat", "diagonal", "diff", "dstack", "exp2", "fliplr",
           "flipud", "float_power", "fmax", "fmin", "frac", "heaviside", "hsplit", "hypot", "inner",
           "kron", "kthvalue", "lerp", "logaddexp", "logit", "logspace", "matrix_power", "median", "msort",
           "nanmean", "nansum", "rad2deg", "rot90", "sgn", "signbit", "sinh", "swapaxes", "take_along_dim",
           "tensor_split", "tensordot", "tile", "unflatten", "vdot", "vsplit", "xlogy"]

_aminmax = namedtuple("aminmax", ["min", "max"])


def _t(x, what):
    return _tensor(x, what, "input")


# -- element-wise ----------------------------------------------------------------------------

def sinh(input: Tensor) -> Tensor:  # noqa: A002 - torch's names
    x = _t(input, "sinh")
    return mul(sub(expm1(x), expm1(mul(x, -1.0))), 0.5)


def cosh(input: Tensor) -> Tensor:  # noqa: A002
    x = _t(input, "cosh")
    return mul(add(exp(x), exp(mul(x, -1.0))), 0.5)


def asinh(input: Tensor) -> Tensor:  # noqa: A002
    x = _t(input, "asinh")
    a = _abs(x)
    r = log1p(add(a, div(mul(a, a), add(sqrt(add(mul(a, a), 1.0)), 1.0))))
    return where(eq(x, 0.0), x, where(lt(x, 0.0), mul(r, -1.0), r))  # at 0: x itself, slope 1 as torch


def acosh(input: Tensor) -> Tensor:  # noqa: A002
    x = _t(input, "acosh")
    u = sub(x, 1.0)
    return log1p(add(u, sqrt(mul(u, add(x, 1.0)))))


def atanh(input: Tensor) -> Tensor:  # noqa: A002
    x = _t(input, "atanh")
    return mul(sub(log1p(x), log1p(mul(x, -1.0))), 0.5)


def exp2(input: Tensor) -> Tensor:  # noqa: A002
    return exp(mul(_t(input, "exp2"), math.log(2.0)))


def deg2rad(input: Tensor) -> Tensor:  # noqa: A002
    return mul(_t(input, "deg2rad"), math.pi / 180.0)


def rad2deg(input: Tensor) -> Tensor:  # noqa: A002
    return mul(_t(input, "rad2deg"), 180.0 / math.pi)


def frac(input: Tensor) -> Tensor:  # noqa: A002
    x = _t(input, "frac")
    return sub(x, trunc(x))


def lerp(input: Tensor, end: Tensor, weight) -> Tensor:  # noqa: A002
    x = _t(input, "lerp")
    d = sub(end, x)
    if not isinstance(weight, Tensor):  # torch's two forms: exact at weight 0 and at weight 1
        return add(x, mul(d, weight)) if abs(weight) < 0.5 else sub(end, mul(d, 1.0 - weight))
    return where(lt(_abs(weight), 0.5), add(x, mul(weight, d)), sub(end, mul(d, sub(1.0, weight))))


def hypot(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    x = _t(input, "hypot")
    return sqrt(add(mul(x, x), mul(other, other)))


def logaddexp(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    x = _t(input, "logaddexp")
    m = maximum(x, other)
    d = where(eq(x, other), 0.0, sub(x, other))  # equal infinities: that infinity, as torch
    return add(m, log1p(exp(mul(_abs(d), -1.0))))


def clamp_min(input: Tensor, min) -> Tensor:  # noqa: A002
    return clamp(input, min=min)


def clamp_max(input: Tensor, max) -> Tensor:  # noqa: A002
    return clamp(input, max=max)


def addcmul(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value=1) -> Tensor:  # noqa: A002
    return add(_t(input, "addcmul"), mul(mul(tensor1, tensor2), value))


def addcdiv(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value=1) -> Tensor:  # noqa: A002
    return add(_t(input, "addcdiv"), mul(div(tensor1, tensor2), value))


def xlogy(input, other) -> Tensor:  # noqa: A002
    """torch's xlogy: 0 where input is 0 (unless other is nan), else input * log(other)."""
    if not isinstance(input, Tensor) and not isinstance(other, Tensor):
        raise TypeError("xlogy(): expected at least one Tensor argument")
    logy = log(other) if isinstance(other, Tensor) else (math.log(other) if other > 0 else
                                                          (-math.inf if other == 0 else math.nan))
    r = mul(input, logy) if isinstance(input, Tensor) else mul(logy, input)
    zero = eq(input, 0.0) if isinstance(input, Tensor) else (input == 0)
    if isinstance(other, Tensor):
        zero = where(isnan(other), False, zero)
    elif other != other:
        return r
    return where(zero, 0.0, r) if isinstance(zero, Tensor) else (mul(r, 0.0) if zero else r)


def logit(input: Tensor, eps=None) -> Tensor:  # noqa: A002
    x = _t(input, "logit")
    if eps is not None:
        x = clamp(x, eps, 1.0 - eps)
    return log(div(x, sub(1.0, x)))


def sgn(input: Tensor) -> Tensor:  # noqa: A002
    return sign(_t(input, "sgn"))


def signbit(input: Tensor) -> Tensor:  # noqa: A002
    return host_tensor(np.signbit(_t(input, "signbit").numpy(force=True)))


def copysign(input, other) -> Tensor:  # noqa: A002
    neg = signbit(other) if isinstance(other, Tensor) else math.copysign(1.0, other) < 0
    a = _abs(_float(input, "copysign"))
    return where(neg, mul(a, -1.0), a) if isinstance(neg, Tensor) else (mul(a, -1.0) if neg else a)


def _float(x, what):
    x = _t(x, what)
    return x if is_float(x.dtype) else convert(x, _default())


def _default():
    return get_default_dtype()


def fmax(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    x = _t(input, "fmax")
    return where(isnan(other), x, where(isnan(x), other, maximum(x, other)))


def fmin(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    x = _t(input, "fmin")
    return where(isnan(other), x, where(isnan(x), other, minimum(x, other)))


def heaviside(input: Tensor, values: Tensor) -> Tensor:  # noqa: A002
    x = _t(input, "heaviside")
    if not isinstance(values, Tensor):
        raise TypeError(f"heaviside(): argument 'values' must be Tensor, not {type(values).__name__}")
    if x.dtype != values.dtype:
        raise RuntimeError(f"heaviside is not yet implemented for tensors with different dtypes, "
                           f"got {x.dtype} and {values.dtype}")
    one = convert(gt(x, 0.0), x.dtype)
    return where(eq(x, 0.0), values.detach(), one)  # no gradient, as torch (which refuses one)


def float_power(input, exponent) -> Tensor:  # noqa: A002
    f64 = float64
    b = convert(input, f64) if isinstance(input, Tensor) else float(input)
    e = convert(exponent, f64) if isinstance(exponent, Tensor) else float(exponent)
    return pow(b, e)


# -- shape -----------------------------------------------------------------------------------

def swapaxes(input: Tensor, axis0: int, axis1: int) -> Tensor:  # noqa: A002
    return transpose(input, axis0, axis1)


def concat(tensors, dim: int = 0) -> Tensor:
    return cat(tensors, dim)


def concatenate(tensors, axis: int = 0) -> Tensor:
    return cat(tensors, axis)


def tile(input: Tensor, dims) -> Tensor:  # noqa: A002
    x = _t(input, "tile")
    dims = tuple(dims)
    if len(dims) < x.ndim:
        dims = (1,) * (x.ndim - len(dims)) + dims
    return repeat(x, *dims)


def unflatten(input: Tensor, dim: int, sizes) -> Tensor:  # noqa: A002
    x = _t(input, "unflatten")
    d = _dim(dim, x.ndim, "unflatten")
    sizes = list(sizes)
    if sizes.count(-1) == 1:
        known = int(np.prod([s for s in sizes if s != -1]))
        sizes[sizes.index(-1)] = x.shape[d] // known if known else 0
    if int(np.prod(sizes)) != x.shape[d]:
        raise RuntimeError(f"unflatten: Provided sizes {list(sizes)} don't multiply up to the size of dim "
                           f"{dim} ({x.shape[d]}) in the input tensor")
    return reshape(x, tuple(x.shape[:d]) + tuple(sizes) + tuple(x.shape[d + 1:]))


def take_along_dim(input: Tensor, indices: Tensor, dim=None) -> Tensor:  # noqa: A002
    from .index import gather
    from .shape import expand
    x = _t(input, "take_along_dim")
    if dim is None:
        return gather(reshape(x, (-1,)), 0, reshape(indices, (-1,)))
    d = _dim(dim, x.ndim, "take_along_dim")
    xs, js = list(x.shape), list(indices.shape)
    xs[d] = js[d] = 1
    b = list(np.broadcast_shapes(tuple(xs), tuple(js)))
    bx, bi = list(b), list(b)
    bx[d], bi[d] = x.shape[d], indices.shape[d]
    return gather(expand(x, tuple(bx)), d, expand(indices, tuple(bi)))


def fliplr(input: Tensor) -> Tensor:  # noqa: A002
    x = _t(input, "fliplr")
    if x.ndim < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return flip(x, (1,))


def flipud(input: Tensor) -> Tensor:  # noqa: A002
    x = _t(input, "flipud")
    if x.ndim < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return flip(x, (0,))


def rot90(input: Tensor, k: int = 1, dims=(0, 1)) -> Tensor:  # noqa: A002
    x = _t(input, "rot90")
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    d0, d1 = _dim(dims[0], x.ndim, "rot90"), _dim(dims[1], x.ndim, "rot90")
    if d0 == d1:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {d0} and dim1 = {d1}")
    k %= 4
    if k == 1:
        return transpose(flip(x, (d1,)), d0, d1)
    if k == 2:
        return flip(x, (d0, d1))
    if k == 3:
        return flip(transpose(x, d0, d1), (d1,))
    return x


def _atleast(n, tensors):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        return tuple(_atleast(n, (t,)) for t in tensors[0])
    out = []
    for t in tensors:
        if t.ndim < n:
            shape = tuple(t.shape)
            if t.ndim == 0:
                shape = (1,) * n
            elif n == 2 or t.ndim == 1:
                shape = (1,) + shape + ((1,) if n == 3 else ())
            else:
                shape = shape + (1,)
            t = reshape(t, shape)
        out.append(t)
    return out[0] if len(out) == 1 else tuple(out)


def atleast_1d(*tensors):
    return _atleast(1, tensors)


def atleast_2d(*tensors):
    return _atleast(2, tensors)


def atleast_3d(*tensors):
    return _atleast(3, tensors)


def dstack(tensors) -> Tensor:
    return cat(list(atleast_3d(tuple(tensors))), 2)


def column_stack(tensors) -> Tensor:
    ts = [reshape(t, (-1, 1)) if t.ndim <= 1 else t for t in tensors]
    return cat(ts, 1)


def tensor_split(input: Tensor, indices_or_sections, dim: int = 0):  # noqa: A002
    x = _t(input, "tensor_split")
    d = _dim(dim, x.ndim, "tensor_split")
    n = x.shape[d]
    if isinstance(indices_or_sections, numbers.Integral):
        s = int(indices_or_sections)
        if s <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {s}")
        q, r = divmod(n, s)
        sizes = [q + 1] * r + [q] * (s - r)
    else:
        idx = [min(max(int(i), 0), n) for i in indices_or_sections] + [n]
        sizes, prev = [], 0
        for i in idx:
            sizes.append(max(i - prev, 0))
            prev = max(i, prev)
    return tuple(_slice(x, d, sizes))


def _slice(x, d, sizes):
    start = 0
    for s in sizes:
        key = (slice(None),) * d + (slice(start, start + s),)
        yield getitem(x, key)
        start += s


def hsplit(input: Tensor, indices_or_sections):  # noqa: A002
    x = _t(input, "hsplit")
    return _even_split(x, indices_or_sections, 1 if x.ndim > 1 else 0, "torch.hsplit")


def vsplit(input: Tensor, indices_or_sections):  # noqa: A002
    x = _t(input, "vsplit")
    if x.ndim < 2:
        raise RuntimeError(f"torch.vsplit requires a tensor with at least 2 dimension, but got a tensor with "
                           f"{x.ndim} dimensions!")
    return _even_split(x, indices_or_sections, 0, "torch.vsplit")


def _even_split(x, s, d, what):
    if isinstance(s, numbers.Integral) and x.shape[d] % s:
        raise RuntimeError(f"{what} attempted to split along dimension {d}, but the size of the dimension "
                           f"{x.shape[d]} is not divisible by the split_size {s}!")
    return tensor_split(x, s, d)


def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:  # noqa: A002
    x = _t(input, "diagonal")
    d1, d2 = _dim(dim1, x.ndim, "diagonal"), _dim(dim2, x.ndim, "diagonal")
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    rest = [i for i in range(x.ndim) if i not in (d1, d2)]
    y = permute(x, tuple(rest) + (d1, d2))
    n, m = x.shape[d1], x.shape[d2]
    r0, c0 = (0, offset) if offset >= 0 else (-offset, 0)
    k = max(min(n - r0, m - c0), 0)
    lead = tuple(x.shape[i] for i in rest)
    if k == 0:
        return getitem(reshape(y, lead + (n * m,)), (Ellipsis, slice(0, 0)))
    flat = reshape(y, lead + (n * m,))
    start = r0 * m + c0
    return getitem(flat, (Ellipsis, slice(start, start + (k - 1) * (m + 1) + 1, m + 1)))


def diagflat(input: Tensor, offset: int = 0) -> Tensor:  # noqa: A002
    from .composite import eye
    v = reshape(_t(input, "diagflat"), (-1,))
    k, o = v.shape[0], abs(offset)
    m = mul(unsqueeze(v, 1), eye(k, dtype=v.dtype))
    if o == 0:
        return m
    zc, zr = _zeros((k, o), v.dtype), _zeros((o, k + o), v.dtype)
    if offset > 0:
        return cat([cat([zc, m], 1), zr], 0)
    return cat([zr, cat([m, zc], 1)], 0)


def _zeros(shape, dtype):
    from .creation import zeros
    return zeros(shape, dtype=dtype)


# -- products ---------------------------------------------------------------------------------

def inner(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    x = _t(input, "inner")
    if x.ndim == 0 or other.ndim == 0:
        return mul(x, other)
    if x.shape[-1] != other.shape[-1]:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but got shapes "
                           f"{list(x.shape)} and {list(other.shape)}")
    return tensordot(x, other, ([-1], [-1]))


def vdot(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    from .composite import dot
    return dot(input, other)


def tensordot(a: Tensor, b: Tensor, dims=2, out=None) -> Tensor:
    if isinstance(dims, numbers.Integral):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    elif isinstance(dims, Tensor):
        return tensordot(a, b, dims.numpy(force=True).tolist())
    else:
        da, db = dims
        da, db = ([da], [db]) if isinstance(da, numbers.Integral) else (list(da), list(db))
    da = [_dim(d, a.ndim, "tensordot") for d in da]
    db = [_dim(d, b.ndim, "tensordot") for d in db]
    for i, j in zip(da, db):
        if a.shape[i] != b.shape[j]:
            raise RuntimeError(f"contracted dimensions need to match, but first has size {a.shape[i]} in dim "
                               f"{i} and second has size {b.shape[j]} in dim {j}")
    ra = [i for i in range(a.ndim) if i not in da]
    rb = [j for j in range(b.ndim) if j not in db]
    k = int(np.prod([a.shape[i] for i in da]))
    am = reshape(permute(a, tuple(ra + da)), (-1, k))
    bm = reshape(permute(b, tuple(db + rb)), (k, -1))
    return reshape(matmul(am, bm), tuple(a.shape[i] for i in ra) + tuple(b.shape[j] for j in rb))


def kron(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    a, b = _t(input, "kron"), other
    n = max(a.ndim, b.ndim)
    a = reshape(a, (1,) * (n - a.ndim) + tuple(a.shape))
    b = reshape(b, (1,) * (n - b.ndim) + tuple(b.shape))
    ai = reshape(a, tuple(s for d in a.shape for s in (d, 1)))
    bi = reshape(b, tuple(s for d in b.shape for s in (1, d)))
    return reshape(mul(ai, bi), tuple(p * q for p, q in zip(a.shape, b.shape)))


def addbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta=1, alpha=1) -> Tensor:  # noqa: A002
    from .composite import _plus_product, bmm
    return _plus_product(input, _sum(bmm(batch1, batch2), 0), beta, alpha)


# -- reductions -------------------------------------------------------------------------------

def nansum(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A002
    x = _t(input, "nansum")
    z = where(isnan(x), 0.0, x) if is_float(x.dtype) else x
    return _sum(z, dim, keepdim, dtype=dtype) if dim is not None else _sum(z, dtype=dtype)


def nanmean(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A002
    x = _t(input, "nanmean")
    if not is_float(x.dtype):
        raise RuntimeError("nanmean(): expected input to have floating point or complex dtype but got "
                           f"{x.dtype}")
    keep = convert(logical_not_nan(x), x.dtype)
    return div(nansum(x, dim, keepdim, dtype=dtype), nansum(keep, dim, keepdim, dtype=dtype))


def logical_not_nan(x):
    return eq(x, x)


def aminmax(input: Tensor, *, dim=None, keepdim: bool = False):  # noqa: A002
    x = _t(input, "aminmax")
    if dim is None:
        lo, hi = amin(x), amax(x)
        if keepdim:
            lo, hi = reshape(lo, (1,) * x.ndim), reshape(hi, (1,) * x.ndim)
        return _aminmax(lo, hi)
    return _aminmax(amin(x, dim, keepdim), amax(x, dim, keepdim))


def msort(input: Tensor) -> Tensor:  # noqa: A002
    from .composite import sort
    return sort(input, 0).values


def diff(input: Tensor, n: int = 1, dim: int = -1, prepend=None, append=None) -> Tensor:  # noqa: A002
    x = _t(input, "diff")
    d = _dim(dim, x.ndim, "diff")
    parts = [p for p in (prepend, x, append) if p is not None]
    if any(p.ndim != x.ndim for p in parts):
        raise RuntimeError("diff expects prepend or append to be the same dimension as input")
    if len(parts) > 1:
        x = cat(parts, d)
    for _ in range(n):
        m = x.shape[d]
        if m == 0:
            break
        a = getitem(x, (slice(None),) * d + (slice(1, m),))
        b = getitem(x, (slice(None),) * d + (slice(0, m - 1),))
        x = logical_ne(a, b) if x.dtype == bool_dtype() else sub(a, b)
    return x


def logical_ne(a, b):
    from .elementwise import ne
    return ne(a, b)


def bool_dtype():
    return bool_


# -- orders: indices on the host (as sort and topk), values gathered so gradients flow ---------

_cummax = namedtuple("cummax", ["values", "indices"])
_cummin = namedtuple("cummin", ["values", "indices"])
_kthvalue = namedtuple("kthvalue", ["values", "indices"])
_median = namedtuple("median", ["values", "indices"])


def _cum_index(a: np.ndarray, d: int, ismin: bool) -> np.ndarray:
    a = np.moveaxis(a, d, 0)
    idx = np.zeros(a.shape, np.int64)
    best = a[0].copy() if a.shape[0] else None
    for i in range(1, a.shape[0]):
        new = (a[i] <= best) if ismin else (a[i] >= best)  # ties: the later index, as torch
        if a.dtype.kind == "f":  # a nan is kept once met, each later nan taking the index
            new = np.isnan(a[i]) | (~np.isnan(best) & new)
        idx[i] = np.where(new, i, idx[i - 1])
        best = np.where(new, a[i], best)
    return np.moveaxis(idx, 0, d)


def _cum(x, dim, ismin, what, cls):
    x = _t(x, what)
    _dim(dim, max(x.ndim, 1), what)
    if x.ndim == 0:
        return cls(x, host_tensor(np.zeros((), np.int64)))
    d = _dim(dim, x.ndim, what)
    i = _cum_index(x.numpy(force=True), d, ismin)
    return cls(_gather(x, d, i), host_tensor(i))


def cummax(input: Tensor, dim: int):  # noqa: A002
    return _cum(input, dim, False, "cummax", _cummax)


def cummin(input: Tensor, dim: int):  # noqa: A002
    return _cum(input, dim, True, "cummin", _cummin)


def _gather(x, d, i: np.ndarray) -> Tensor:
    """x's values at the host indices i along d: recorded (a gradient) for floats, on the host else."""
    from .index import gather
    if is_float(x.dtype):
        return gather(x, d, host_tensor(i))
    return host_tensor(np.take_along_axis(x.numpy(force=True), i, d))


def _pick(x, d, i, keepdim, cls):
    """values x[..., i, ...] along d for the host index array i (keepdim shape), gathered."""
    from .shape import squeeze
    it = host_tensor(i)
    v = _gather(x, d, i)
    return cls(v, it) if keepdim else cls(squeeze(v, d), host_tensor(np.squeeze(i, d)))


def kthvalue(input: Tensor, k: int, dim: int = -1, keepdim: bool = False):  # noqa: A002
    x = _t(input, "kthvalue")
    xv = reshape(x, (1,)) if x.ndim == 0 else x
    d = _dim(dim, xv.ndim, "kthvalue")
    if not 1 <= k <= xv.shape[d]:
        raise IndexError(f"kthvalue(): selected number k out of range for dimension {dim}")
    order = np.argsort(xv.numpy(force=True), axis=d, kind="stable")
    r = _pick(xv, d, np.take(order, [k - 1], axis=d), True, _kthvalue)
    if x.ndim == 0:
        return _kthvalue(reshape(r.values, ()), host_tensor(np.zeros((), np.int64)))
    return r if keepdim else _squeezed(r, xv, d, _kthvalue)


def _squeezed(r, x, d, cls):
    shape = tuple(s for j, s in enumerate(x.shape) if j != d)
    return cls(reshape(r.values, shape), reshape(r.indices, shape))


def median(input: Tensor, dim=None, keepdim: bool = False):  # noqa: A002
    """torch.median: the lower median; nan when a nan is present (as torch)."""
    x = _t(input, "median")
    if dim is None:
        a = x.numpy(force=True).reshape(-1)
        if a.size == 0:
            return host_tensor(np.array(np.nan, a.dtype))
        nan = np.flatnonzero(np.isnan(a)) if a.dtype.kind == "f" else []
        j = nan[0] if len(nan) else np.argsort(a, kind="stable")[(a.size - 1) // 2]
        return reshape(_gather(reshape(x, (-1,)), 0, np.array([j])), ())
    xv = reshape(x, (1,)) if x.ndim == 0 else x
    d = _dim(dim, xv.ndim, "median")
    a = xv.numpy(force=True)
    n = a.shape[d]
    order = np.argsort(a, axis=d, kind="stable")  # numpy sorts nan last
    j = np.take(order, [(n - 1) // 2], axis=d)
    if a.dtype.kind == "f":
        has = np.isnan(a).any(axis=d, keepdims=True)
        j = np.where(has, np.expand_dims(np.argmax(np.isnan(a), axis=d), d), j)
    r = _pick(xv, d, j, True, _median)
    if x.ndim == 0:
        return _median(reshape(r.values, ()), host_tensor(np.zeros((), np.int64)))
    return r if keepdim else _squeezed(r, xv, d, _median)


# -- builders ---------------------------------------------------------------------------------

def block_diag(*tensors) -> Tensor:
    ts = [reshape(t, (1, 1)) if t.ndim == 0 else (reshape(t, (1, -1)) if t.ndim == 1 else t) for t in tensors]
    for t in ts:
        if t.ndim != 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer dimensions. "
                               f"Input {ts.index(t)} has {t.ndim} dimensions")
    if not ts:
        raise ValueError("block_diag: tiletrain has no empty tensors (torch returns a 0 x 0 one)")
    dt = ts[0].dtype
    cols = sum(t.shape[1] for t in ts)
    rows, left = [], 0
    for t in ts:
        t = convert(t, dt) if t.dtype != dt else t
        right = cols - left - t.shape[1]
        parts = ([_zeros((t.shape[0], left), dt)] if left else []) + [t] + (
            [_zeros((t.shape[0], right), dt)] if right else [])
        rows.append(cat(parts, 1) if len(parts) > 1 else parts[0])
        left += t.shape[1]
    return cat(rows, 0)


def cartesian_prod(*tensors) -> Tensor:
    from .composite import meshgrid
    for t in tensors:
        if t.ndim != 1:
            raise RuntimeError(f"Expect a 1D vector, but got shape {list(t.shape)}")
    if len(tensors) == 1:
        return tensors[0]
    grids = meshgrid(*tensors, indexing="ij")
    return stack([reshape(g, (-1,)) for g in grids], 1)


def logspace(start, end, steps, base=10.0, *, dtype=None, requires_grad: bool = False, **kwargs) -> Tensor:
    from .creation import linspace
    e = linspace(start, end, steps, dtype=float64)
    out = pow(float(base), e)
    out = convert(out, dtype or get_default_dtype()) if (dtype or get_default_dtype()) != float64 else out
    return out.requires_grad_() if requires_grad else out


def matrix_power(input: Tensor, n: int) -> Tensor:  # noqa: A002
    from .composite import eye
    from .shape import expand
    x = _t(input, "matrix_power")
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise RuntimeError("linalg.matrix_power: A must be batches of square matrices, but they are "
                           f"{x.shape[-2] if x.ndim >= 2 else x.shape} by {x.shape[-1] if x.ndim else 0} matrices")
    if n < 0:
        raise NotImplementedError("matrix_power: a negative power needs a matrix inverse, which tiletrain "
                                  "has not")
    if n == 0:
        return expand(eye(x.shape[-1], dtype=x.dtype), tuple(x.shape))
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result


def diag_embed(input: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:  # noqa: A002
    from .composite import eye
    x = _t(input, "diag_embed")
    nd = x.ndim + 1
    d1, d2 = _dim(dim1, nd, "diag_embed"), _dim(dim2, nd, "diag_embed")
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    k, o = x.shape[-1], abs(offset)
    m = mul(unsqueeze(x, -1), eye(k, dtype=x.dtype))
    lead = tuple(x.shape[:-1])
    if o:
        zc, zr = _zeros(lead + (k, o), x.dtype), _zeros(lead + (o, k + o), x.dtype)
        m = cat([cat([zc, m], -1), zr], -2) if offset > 0 else cat([zr, cat([m, zc], -1)], -2)
    return movedim(m, (nd - 2, nd - 1), (d1, d2))


def cross(input: Tensor, other: Tensor, dim=None) -> Tensor:  # noqa: A002
    """torch.cross: without dim, the first dimension of size 3 (torch's deprecated default, warned)."""
    import warnings
    from .shape import broadcast_to
    x = _t(input, "cross")
    if x.ndim != other.ndim:
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    shape = tuple(np.broadcast_shapes(tuple(x.shape), tuple(other.shape)))
    if dim is None:
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated.\nPlease either pass the "
                      "dim explicitly or simply use torch.linalg.cross.\nThe default value of dim will change to "
                      "agree with that of linalg.cross in a future release.", UserWarning, stacklevel=2)
        sizes3 = [i for i, s in enumerate(shape) if s == 3]
        if not sizes3:
            raise RuntimeError("no dimension of size 3 in input")
        dim = sizes3[0]
    d = _dim(dim, len(shape), "cross")
    if shape[d] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got {x.shape[d]} and "
                           f"{other.shape[d]}")
    a, b = broadcast_to(x, shape), broadcast_to(other, shape)
    ai, bi = [_take(a, d, j) for j in range(3)], [_take(b, d, j) for j in range(3)]
    c = [sub(mul(ai[1], bi[2]), mul(ai[2], bi[1])), sub(mul(ai[2], bi[0]), mul(ai[0], bi[2])),
         sub(mul(ai[0], bi[1]), mul(ai[1], bi[0]))]
    return cat(c, d)


def _take(x, d, j):
    return getitem(x, (slice(None),) * d + (slice(j, j + 1),))


def cdist(x1: Tensor, x2: Tensor, p: float = 2.0, compute_mode=None) -> Tensor:
    """torch.cdist: the p-norm distance between each row of x1 and each row of x2 (batched)."""
    if x1.ndim < 2 or x2.ndim < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1.ndim}D")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} "
                           f"X2: {x2.shape[-1]}")
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    dlt = _abs(sub(unsqueeze(x1, -2), unsqueeze(x2, -3)))
    if p == 0:
        return _sum(convert(gt(dlt, 0.0), x1.dtype), -1)
    if p == math.inf:
        return amax(dlt, -1)
    if p == 1:
        return _sum(dlt, -1)
    total = _sum(mul(dlt, dlt) if p == 2 else pow(dlt, float(p)), -1)
    zero = eq(total, 0.0)  # a zero distance: torch's gradient 0, not the root's infinite slope
    safe = where(zero, 1.0, total)
    return where(zero, 0.0, sqrt(safe) if p == 2 else pow(safe, 1.0 / p))
