"""torch functions made of the other ops (their gradients come from those ops) or, for orders
and integer results, computed on the host from the values as topk is: shape helpers (flip,
repeat, roll, unbind, narrow, hstack, vstack, movedim, broadcast_tensors), products (mm, bmm,
mv, dot), cumsum, sort and argsort, nonzero and masked_select, tests (isnan, isinf, isfinite,
all, any, count_nonzero, equal, allclose, isclose), square, log2, log10, nan_to_num, index_fill,
add-products (addmm, addmv, baddbmm), diag, argwhere, triu/tril_indices, randperm and eye."""
from __future__ import annotations

import builtins
import math
import numbers

import numpy as np

from ..tensors import Tensor, from_numpy, is_float
from ..tensors.creation import _generator
from ..tensors.tensor import get_default_dtype
from .basic import _tensor
from .contract import triu
from .creation import ones
from .elementwise import (abs as _abs, add, div, eq, exp, host_tensor, log, logical_not, masked_fill, mul, ne, sub,
                          where)
from .index import gather, index_get, index_select
from .linalg import matmul
from .reduce import sum as _sum, return_types
from .shape import cat, expand, permute, reshape, stack, unsqueeze

__all__ = ["addmm", "addmv", "all", "allclose", "any", "argsort", "argwhere", "baddbmm", "bincount", "bmm",
           "broadcast_tensors", "bucketize", "count_nonzero", "cumprod", "cumsum", "diag", "dot", "equal",
           "eye", "flip", "hstack", "index_fill", "isclose", "isfinite", "isinf", "isnan", "log10", "log2",
           "masked_select", "meshgrid", "mm", "movedim", "mv", "nan_to_num", "narrow", "nonzero", "prod",
           "randperm", "repeat", "repeat_interleave", "roll", "searchsorted", "sort", "square", "tril_indices",
           "triu_indices", "unbind", "unfold", "unique", "vstack"]


def _c(a) -> np.ndarray:
    return np.array(a, order="C")


def _dim(d, ndim: int, what: str) -> int:
    if isinstance(d, bool) or not isinstance(d, numbers.Integral):
        raise TypeError(f"{what}: dim must be an int, got {type(d).__name__}")
    n = max(ndim, 1)
    if not -n <= d < n:
        raise IndexError(f"{what}: Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})")
    return int(d) % n


def _index(n: int, values) -> Tensor:
    return from_numpy(np.ascontiguousarray(np.asarray(values, dtype=np.int64).reshape(n)))


# -- shape ---------------------------------------------------------------------------------

def flip(input: Tensor, dims) -> Tensor:  # noqa: A002 - torch's names
    """input with the order of its elements reversed along each of dims."""
    x = _tensor(input, "flip", "input")
    dims = (dims,) if isinstance(dims, numbers.Integral) else tuple(dims)
    for d in {_dim(d, x.ndim, "flip") for d in dims}:
        n = x.shape[d]
        x = index_select(x, d, _index(n, np.arange(n - 1, -1, -1)))
    return x


def roll(input: Tensor, shifts, dims=None) -> Tensor:  # noqa: A002
    """input's elements shifted along dims (flattened first when dims is None), wrapping around."""
    x = _tensor(input, "roll", "input")
    if dims is None:
        return reshape(roll(reshape(x, (-1,)), shifts, 0), x.shape)
    shifts = (shifts,) if isinstance(shifts, numbers.Integral) else tuple(shifts)
    dims = (dims,) if isinstance(dims, numbers.Integral) else tuple(dims)
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    for s, d in zip(shifts, dims):
        d = _dim(d, x.ndim, "roll")
        n = x.shape[d]
        x = index_select(x, d, _index(n, (np.arange(n) - int(s)) % n))
    return x


def repeat(input: Tensor, *sizes) -> Tensor:  # noqa: A002
    """torch's Tensor.repeat: input tiled sizes[i] times along each dim (leading new dims for
    extra sizes)."""
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    x = _tensor(input, "repeat", "input")
    if len(sizes) < x.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor")
    x = reshape(x, (1,) * (len(sizes) - x.ndim) + tuple(x.shape))
    for d, k in enumerate(sizes):
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0:
            raise RuntimeError(f"repeat: sizes must be non-negative ints, got {sizes}")
        if k != 1:
            x = cat([x] * int(k), d) if k else index_select(x, d, _index(0, []))
    return x


def unbind(input: Tensor, dim: int = 0) -> tuple[Tensor, ...]:  # noqa: A002
    """The slices of input along dim, without that dim."""
    x = _tensor(input, "unbind", "input")
    d = _dim(dim, x.ndim, "unbind")
    return tuple(index_get(x, (slice(None),) * d + (i,)) for i in range(x.shape[d]))


def narrow(input: Tensor, dim: int, start: int, length: int) -> Tensor:  # noqa: A002
    """input[..., start:start + length, ...] along dim."""
    x = _tensor(input, "narrow", "input")
    d = _dim(dim, x.ndim, "narrow")
    n = x.shape[d]
    start = int(start) + (n if start < 0 else 0)
    if not (0 <= start <= n and 0 <= length and start + length <= n):
        raise IndexError(f"start ({start}) + length ({length}) exceeds dimension size ({n}).")
    return index_get(x, (slice(None),) * d + (slice(start, start + int(length)),))


def movedim(input: Tensor, source, destination) -> Tensor:  # noqa: A002
    """input with dims source moved to positions destination (the others keep their order)."""
    x = _tensor(input, "movedim", "input")
    src = [_dim(s, x.ndim, "movedim") for s in ((source,) if isinstance(source, numbers.Integral) else source)]
    dst = [_dim(s, x.ndim, "movedim") for s in ((destination,) if isinstance(destination, numbers.Integral)
                                                  else destination)]
    order = [d for d in range(x.ndim) if d not in src]
    for s, t in sorted(zip(dst, src)):
        order.insert(s, t)
    return permute(x, *order)


def meshgrid(*tensors, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids of 1-d tensors ("ij": matrix indexing; "xy": the first two swapped)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f"torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but received: {indexing}")
    ts = list(tensors)
    swap = indexing == "xy" and len(ts) >= 2
    if swap:
        ts[0], ts[1] = ts[1], ts[0]
    shape = tuple(t.numel() for t in ts)
    out = [expand(reshape(t, tuple(-1 if i == k else 1 for i in range(len(ts)))), *shape) for k, t in enumerate(ts)]
    if swap:  # ij of (y, x, ...) with the first two outputs swapped back
        out[0], out[1] = out[1], out[0]
    return tuple(out)


def prod(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A002
    """The product of the elements (along dim): pairwise products in log2(n) steps
    (differentiable, zeros included).  Integer input: in NumPy, int64 out."""
    x = _tensor(input, "prod", "input")
    if dtype is not None:
        x = x.to(dtype)
    if not is_float(x.dtype):
        out = np.prod(x.numpy(force=True), axis=dim, keepdims=keepdim)
        return host_tensor(out)
    if dim is None:
        y = _prod_last(reshape(x, (-1,)) if x.ndim else reshape(x, (1,)))
        return reshape(y, (1,) * x.ndim) if keepdim else reshape(y, ())
    d = _dim(dim, x.ndim, "prod")
    moved = permute(x, *[i for i in range(x.ndim) if i != d], d)
    y = _prod_last(moved)
    return unsqueeze(y, d) if keepdim else y


def _prod_last(x: Tensor) -> Tensor:
    from .creation import ones as _ones
    while x.shape[-1] > 1:
        n = x.shape[-1]
        if n % 2:
            x = cat([x, _ones(*x.shape[:-1], 1, dtype=x.dtype)], x.ndim - 1)
            n += 1
        x = mul(index_get(x, (Ellipsis, slice(0, n // 2))), index_get(x, (Ellipsis, slice(n // 2, n))))
    return reshape(x, tuple(x.shape[:-1]))


def hstack(tensors) -> Tensor:
    """cat along dim 1 (dim 0 for 1-d tensors)."""
    return cat(list(tensors), 0 if tensors[0].ndim == 1 else 1)


def vstack(tensors) -> Tensor:
    """cat along dim 0, 1-d tensors taken as rows."""
    return cat([reshape(t, (1, -1)) if t.ndim == 1 else t for t in tensors], 0)


def broadcast_tensors(*tensors) -> tuple[Tensor, ...]:
    shape = np.broadcast_shapes(*(tuple(t.shape) for t in tensors))
    return tuple(t if tuple(t.shape) == shape else expand(t, *shape) for t in tensors)


# -- products --------------------------------------------------------------------------------

def _ndim_check(what: str, t, want: int, name: str) -> None:
    _tensor(t, what, name)
    if t.ndim != want:
        raise RuntimeError(f"{name} must be a {want}D tensor" if what != "dot" else
                           f"1D tensors expected, but got {t.ndim}D and tensors")


def mm(input: Tensor, mat2: Tensor) -> Tensor:  # noqa: A002
    _ndim_check("mm", input, 2, "self")
    _ndim_check("mm", mat2, 2, "mat2")
    return matmul(input, mat2)


def bmm(input: Tensor, mat2: Tensor) -> Tensor:  # noqa: A002
    _ndim_check("bmm", input, 3, "batch1")
    _ndim_check("bmm", mat2, 3, "batch2")
    if input.shape[0] != mat2.shape[0]:
        raise RuntimeError(f"batch1 and batch2 must have same number of batches, got {input.shape[0]} and "
                           f"{mat2.shape[0]}")
    return matmul(input, mat2)


def mv(input: Tensor, vec: Tensor) -> Tensor:  # noqa: A002
    _ndim_check("mv", input, 2, "self")
    _ndim_check("mv", vec, 1, "vec")
    return matmul(input, vec)


def dot(input: Tensor, tensor: Tensor) -> Tensor:  # noqa: A002
    for t in (input, tensor):
        _ndim_check("dot", t, 1, "input")
    return matmul(input, tensor)


# -- scans, orders and selections -----------------------------------------------------------

def cumsum(input: Tensor, dim: int, *, dtype=None) -> Tensor:  # noqa: A002
    """Running sums along dim: a product with an upper-triangular matrix of ones (differentiable;
    n^2 work per row, fine for the lengths programs scan).  Integer input: in NumPy, int64 out."""
    x = _tensor(input, "cumsum", "input")
    d = _dim(dim, x.ndim, "cumsum")
    if x.ndim == 0:
        return x if dtype is None else x.to(dtype)
    if not is_float(x.dtype):
        out = np.cumsum(x.numpy(force=True), axis=d)
        return from_numpy(_c(out.astype(np.int64) if dtype is None else out.astype(dtype)))
    if dtype is not None:
        x = x.to(dtype)
    n = x.shape[d]
    u = triu(ones(n, n, dtype=x.dtype))
    moved = permute(x, *[i for i in range(x.ndim) if i != d], d)
    out = matmul(moved, u)
    back = list(range(x.ndim - 1))
    back.insert(d, x.ndim - 1)
    return permute(out, *back)


def cumprod(input: Tensor, dim: int, *, dtype=None) -> Tensor:  # noqa: A002
    """Cumulative products along dim, computed on the host from the values; the gradient (where
    no element is zero) is that of exp(cumsum(log|x|)) with the sign's parity."""
    x = _tensor(input, "cumprod", "input")
    if dtype is not None:
        x = x.to(dtype)
    d = _dim(dim, x.ndim, "cumprod")
    a = x.numpy(force=True)
    exact = np.cumprod(a, axis=d)
    if not is_float(x.dtype):
        return host_tensor(exact)
    y = from_numpy(_c(exact.astype(a.dtype)))
    if not x.requires_grad:
        return y
    if (a == 0).any():
        raise NotImplementedError("cumprod: the gradient through a zero element is not supported")
    sign = from_numpy(_c(np.sign(exact).astype(a.dtype)))
    y_log = mul(sign, exp(cumsum(log(_abs(x)), d)))
    return add(y_log, sub(y, y_log).detach())  # the exact values, y_log's gradient


def repeat_interleave(input: Tensor, repeats, dim=None, *, output_size=None) -> Tensor:  # noqa: A002
    """Each element (or slice along dim) repeated ``repeats`` times in place (an int, or a
    tensor of counts per element); dim None flattens first.  Differentiable (an index_select)."""
    x = _tensor(input, "repeat_interleave", "input")
    if dim is None:
        x, d = reshape(x, (-1,)), 0
    else:
        d = _dim(dim, x.ndim, "repeat_interleave")
    reps = repeats.numpy(force=True) if isinstance(repeats, Tensor) else np.asarray(repeats)
    if reps.dtype.kind not in "iu" or (reps < 0).any():
        raise RuntimeError("repeat_interleave: repeats must be non-negative integers")
    if reps.ndim and reps.size != x.shape[d]:
        raise RuntimeError(f"repeat_interleave: repeats must have the same size as input along dim ({x.shape[d]}), "
                           f"got {reps.size}")
    idx = np.repeat(np.arange(x.shape[d]), reps if reps.ndim else int(reps))
    return index_select(x, d, from_numpy(idx.astype(np.int64)))


def _windows(x: Tensor, d: int, size: int, step: int, dilation: int = 1) -> Tensor:
    """x with axis d replaced by the windows' starts and a last axis of ``size`` elements
    (dilated): one index_select of every window's positions, then a reshape and a move."""
    n = x.shape[d]
    span = dilation * (size - 1) + 1
    if size <= 0 or step <= 0 or span > n:
        raise RuntimeError(f"unfold: maximum size for tensor at dimension {d} is {n} but size is {span}"
                           if span > n else "unfold: size and step must be positive")
    starts = np.arange(0, n - span + 1, step)
    idx = (starts[:, None] + dilation * np.arange(size)[None, :]).reshape(-1)
    y = index_select(x, d, from_numpy(idx.astype(np.int64)))
    y = reshape(y, x.shape[:d] + (len(starts), size) + x.shape[d + 1:])
    return movedim(y, d + 1, -1)


def unfold(input: Tensor, dimension: int, size: int, step: int) -> Tensor:  # noqa: A002
    """Tensor.unfold: every slice of ``size`` along ``dimension`` starting each ``step`` (a copy,
    torch's is a view), the window on a new last axis; differentiable."""
    x = _tensor(input, "unfold", "input")
    return _windows(x, _dim(dimension, builtins.max(x.ndim, 1), "unfold"), int(size), int(step))


def searchsorted(sorted_sequence: Tensor, input, *, out_int32: bool = False, right: bool = False, side=None,
                 sorter=None) -> Tensor:
    """Indices where ``input``'s values would be inserted into the sorted last axis of
    ``sorted_sequence`` (int64; ``right``/``side`` as torch)."""
    seq = _tensor(sorted_sequence, "searchsorted", "sorted_sequence").numpy(force=True)
    v = input.numpy(force=True) if isinstance(input, Tensor) else np.asarray(input)
    side = side or ("right" if right else "left")
    if sorter is not None:
        seq = np.take_along_axis(seq, sorter.numpy(force=True), -1)
    if seq.ndim == 1:
        return host_tensor(np.searchsorted(seq, v, side=side))
    flat = [np.searchsorted(s_, v_, side=side) for s_, v_ in zip(seq.reshape(-1, seq.shape[-1]),
                                                                 v.reshape(-1, v.shape[-1]))]
    return host_tensor(np.stack(flat).reshape(v.shape))


def bucketize(input, boundaries: Tensor, *, out_int32: bool = False, right: bool = False) -> Tensor:
    """The bucket of each value among the 1-d sorted ``boundaries`` (torch's ``right`` rule)."""
    return searchsorted(_tensor(boundaries, "bucketize", "boundaries"), input, right=right)


def sort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False):  # noqa: A002
    """(values, indices) along dim in ascending (descending) order; ties keep their order.  The
    order is found in NumPy from the values; the values returned are a gather (differentiable)."""
    x = _tensor(input, "sort", "input")
    if x.ndim == 0:
        return return_types.sort(x, from_numpy(np.zeros((), np.int64)))
    d = _dim(dim, x.ndim, "sort")
    idx = _c(_order(x.numpy(force=True), d, descending))
    values = gather(x, d, from_numpy(idx)) if is_float(x.dtype) else host_tensor(np.take_along_axis(x.numpy(force=True), idx, d))
    return return_types.sort(values, from_numpy(idx))


def _order(a: np.ndarray, d: int, descending: bool) -> np.ndarray:
    if not descending:
        return np.argsort(a, axis=d, kind="stable").astype(np.int64)
    # descending and stable: reverse, order ascending-stable, reverse back (NaN first, as torch)
    n = a.shape[d]
    rev = np.flip(a, d)
    o = np.flip(np.argsort(rev, axis=d, kind="stable"), d)
    return (n - 1 - o).astype(np.int64)


def argsort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:  # noqa: A002
    return sort(input, dim, descending, stable).indices


def nonzero(input: Tensor, *, as_tuple: bool = False):  # noqa: A002
    """The indices of the nonzero elements: an (n, ndim) int64 tensor, or a tuple of ndim 1-d
    tensors with as_tuple=True."""
    a = _tensor(input, "nonzero", "input").numpy(force=True)
    nz = np.nonzero(np.atleast_1d(a))
    if as_tuple:
        return tuple(host_tensor(i) for i in nz)
    return host_tensor(np.stack(nz, axis=1).reshape(-1, max(a.ndim, 1)) if a.ndim else np.stack(nz, axis=1)[:, :0])


def masked_select(input: Tensor, mask: Tensor) -> Tensor:  # noqa: A002
    """The elements of input where mask (broadcast) is true, as a 1-d tensor (differentiable)."""
    x, m = broadcast_tensors(input, mask)
    if m.dtype != np.bool_:
        raise RuntimeError(f"masked_select: expected BoolTensor for mask, got {m.dtype}")
    flat = np.flatnonzero(m.numpy(force=True))
    return index_select(reshape(x, (-1,)), 0, _index(flat.size, flat))


def unique(input: Tensor, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False,  # noqa: A002
           dim=None):
    """The distinct values (sorted), with the inverse indices and counts when asked (read on the host)."""
    a = _tensor(input, "unique", "input").numpy(force=True)
    vals, inv, cnt = np.unique(a, return_inverse=True, return_counts=True, axis=dim)
    out = [host_tensor(vals)]
    if return_inverse:
        out.append(host_tensor(inv.reshape(a.shape if dim is None else (-1,))))
    if return_counts:
        out.append(host_tensor(cnt))
    return out[0] if len(out) == 1 else tuple(out)


def bincount(input: Tensor, weights=None, minlength: int = 0) -> Tensor:  # noqa: A002
    """Counts of each value of a 1-d non-negative int tensor (weighted sums with weights)."""
    a = _tensor(input, "bincount", "input").numpy(force=True)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if (a < 0).any():
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    w = None if weights is None else (weights.numpy(force=True) if isinstance(weights, Tensor) else np.asarray(weights))
    out = np.bincount(a, w, minlength)
    return host_tensor(out)


# -- tests -----------------------------------------------------------------------------------

def isnan(input: Tensor) -> Tensor:  # noqa: A002
    x = _tensor(input, "isnan", "input")
    return ne(x, x) if is_float(x.dtype) else from_numpy(np.zeros(x.shape, np.bool_))


def isinf(input: Tensor) -> Tensor:  # noqa: A002
    x = _tensor(input, "isinf", "input")
    return eq(_abs(x), math.inf) if is_float(x.dtype) else from_numpy(np.zeros(x.shape, np.bool_))


def isfinite(input: Tensor) -> Tensor:  # noqa: A002
    x = _tensor(input, "isfinite", "input")
    if not is_float(x.dtype):
        return from_numpy(np.ones(x.shape, np.bool_))
    return logical_not(ne(mul(x, 0.0), 0.0))  # x * 0 is 0 for finite x, nan for inf and nan


def _bools(x: Tensor, what: str) -> np.ndarray:
    return _tensor(x, what, "input").numpy(force=True).astype(bool)


def any(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001,A002
    """True where any element (along dim) is nonzero (a bool tensor)."""
    a = _bools(input, "any")
    return host_tensor(np.any(a, axis=dim, keepdims=keepdim))


def all(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001,A002
    """True where every element (along dim) is nonzero (a bool tensor)."""
    a = _bools(input, "all")
    return host_tensor(np.all(a, axis=dim, keepdims=keepdim))


def count_nonzero(input: Tensor, dim=None) -> Tensor:  # noqa: A002
    a = _tensor(input, "count_nonzero", "input").numpy(force=True)
    return host_tensor(np.count_nonzero(a, axis=dim))


def equal(input: Tensor, other: Tensor) -> bool:  # noqa: A002
    """True when both have the same shape and elements."""
    return tuple(input.shape) == tuple(other.shape) and bool(np.array_equal(input.numpy(force=True), other.numpy(force=True)))


def allclose(input: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08,  # noqa: A002
             equal_nan: bool = False) -> bool:
    """|input - other| <= atol + rtol |other| everywhere (broadcasting)."""
    return bool(np.allclose(input.numpy(force=True), other.numpy(force=True), rtol=rtol, atol=atol, equal_nan=equal_nan))


def isclose(input: Tensor, other, rtol: float = 1e-05, atol: float = 1e-08,  # noqa: A002
            equal_nan: bool = False) -> Tensor:
    """|input - other| <= atol + rtol |other| element-wise (a bool tensor, broadcasting)."""
    b = other.numpy(force=True) if isinstance(other, Tensor) else other
    return host_tensor(np.isclose(_tensor(input, "isclose", "input").numpy(force=True), b, rtol=rtol, atol=atol,
                                  equal_nan=equal_nan))


def argwhere(input: Tensor) -> Tensor:  # noqa: A002
    """The indices of the nonzero elements, one row each ((n, ndim) int64): nonzero(input)."""
    return nonzero(input)


# -- element-wise ----------------------------------------------------------------------------

def nan_to_num(input: Tensor, nan: float = 0.0, posinf: float | None = None,  # noqa: A002
               neginf: float | None = None) -> Tensor:
    """NaN, +inf and -inf replaced by ``nan``, ``posinf`` and ``neginf`` (default: the dtype's
    largest and lowest finite values); the gradient passes where the input was finite."""
    x = _tensor(input, "nan_to_num", "input")
    if not is_float(x.dtype):
        return x.clone()
    info = np.finfo(x.dtype)
    hi = float(info.max) if posinf is None else float(posinf)
    lo = float(info.min) if neginf is None else float(neginf)
    return where(isnan(x), float(nan), where(eq(x, math.inf), hi, where(eq(x, -math.inf), lo, x)))


def index_fill(input: Tensor, dim: int, index: Tensor, value) -> Tensor:  # noqa: A002
    """input with ``value`` at positions ``index`` along ``dim`` (masked_fill by a mask that is
    true on those slices: the gradient passes elsewhere)."""
    x = _tensor(input, "index_fill", "input")
    d = _dim(dim, builtins.max(x.ndim, 1), "index_fill")
    idx = index.numpy(force=True) if isinstance(index, Tensor) else np.asarray(index)
    if idx.dtype.kind not in "iu" or idx.ndim > 1:
        raise IndexError("index_fill(): Expected a long tensor for index of 0 or 1 dimension")
    n = x.shape[d] if x.ndim else 1
    if ((idx < -n) | (idx >= n)).any():
        raise IndexError(f"index_fill(): index out of range for a dimension of size {n}")
    mask = np.zeros([n if a == d else 1 for a in range(x.ndim)], np.bool_)
    np.put(np.moveaxis(mask, d, 0) if x.ndim else mask, np.asarray(idx).ravel() % n, True)
    return masked_fill(x, from_numpy(mask), value)


# -- products with an added term (torch's beta * input + alpha * product) ----------------------

def _plus_product(input, product, beta, alpha) -> Tensor:
    scaled = product if alpha == 1 else mul(product, alpha)
    if beta == 0:  # input is ignored (NaN in it does not propagate), as torch's
        return scaled
    return add(input if beta == 1 else mul(input, beta), scaled)


def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta=1, alpha=1) -> Tensor:  # noqa: A002
    """beta * input + alpha * (mat1 @ mat2) (input broadcasts)."""
    return _plus_product(input, mm(mat1, mat2), beta, alpha)


def addmv(input: Tensor, mat: Tensor, vec: Tensor, *, beta=1, alpha=1) -> Tensor:  # noqa: A002
    """beta * input + alpha * (mat @ vec)."""
    return _plus_product(input, mv(mat, vec), beta, alpha)


def baddbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta=1, alpha=1) -> Tensor:  # noqa: A002
    """beta * input + alpha * bmm(batch1, batch2)."""
    return _plus_product(input, bmm(batch1, batch2), beta, alpha)


def diag(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002
    """1-d input: the square matrix with it on the diagonal; 2-d: its diagonal (offset
    ``diagonal`` above the main one, below when negative).  Differentiable on the main diagonal;
    other offsets are computed on the host (no gradient)."""
    x = _tensor(input, "diag", "input")
    if x.ndim not in (1, 2):
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {x.ndim}D")
    if diagonal == 0 and is_float(x.dtype):
        if x.ndim == 1:
            return mul(eye(x.shape[0], dtype=x.dtype), unsqueeze(x, 0))
        k = builtins.min(x.shape)
        return _sum(mul(narrow(narrow(x, 0, 0, k), 1, 0, k), eye(k, dtype=x.dtype)), 1)
    if x.requires_grad:
        raise NotImplementedError("diag: the gradient of an offset diagonal (diagonal != 0) or of an integer "
                                  "tensor is not supported")
    return host_tensor(np.diag(x.numpy(force=True), diagonal))


def triu_indices(row: int, col: int, offset: int = 0, *, dtype=None, **kwargs) -> Tensor:
    """The (2, n) indices of the upper triangle of a row x col matrix (int64)."""
    return host_tensor(np.stack(np.triu_indices(int(row), int(offset), int(col))))


def tril_indices(row: int, col: int, offset: int = 0, *, dtype=None, **kwargs) -> Tensor:
    """The (2, n) indices of the lower triangle of a row x col matrix (int64)."""
    return host_tensor(np.stack(np.tril_indices(int(row), int(offset), int(col))))


# -- element-wise ----------------------------------------------------------------------------

def square(input: Tensor) -> Tensor:  # noqa: A002
    return mul(input, input)


def log2(input: Tensor) -> Tensor:  # noqa: A002
    return div(log(input), math.log(2.0))


def log10(input: Tensor) -> Tensor:  # noqa: A002
    return div(log(input), math.log(10.0))


# -- creation --------------------------------------------------------------------------------

def randperm(n: int, *, generator=None, dtype=None, requires_grad: bool = False, device=None, **kwargs) -> Tensor:
    """A random permutation of 0 .. n - 1 (int64): torch's for the generator's seed."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
        raise RuntimeError(f"randperm: n must be a non-negative int, got {n!r}")
    perm = _generator("randperm", generator).permutation(int(n))
    t = from_numpy(perm)
    return t if dtype is None else t.to(dtype)


def eye(n: int, m: int | None = None, *, dtype=None, requires_grad: bool = False, device=None, **kwargs) -> Tensor:
    """The n x m identity matrix (default dtype)."""
    m = n if m is None else m
    t = from_numpy(np.eye(int(n), int(m))).to(get_default_dtype() if dtype is None else dtype)
    return t.requires_grad_() if requires_grad else t
