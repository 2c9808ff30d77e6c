"""Index and scatter ops with torch's names and semantics: ``index_select``, ``gather``,
``scatter`` / ``scatter_add``, ``index_add``, ``scatter_reduce`` (sum, mean, amax, amin,
``include_self``), float32/float64 values, int64 indices, any tiling, each with its backward.

Which tiles meet depends on the index values, so the op reads the indices (validating them:
an index out of range raises before anything is submitted), lists the tile pairs they link
with NumPy, and submits the list in one C call (csrc/expand_tasks.c, ``run_tasks``).  A tile
is viewed as (a, d, b) around the indexed axis ``dim``; the kernels (kernels.def, "index,
scatter and block-sparse ops") skip the indices outside the tile they read or write.  Operand
tilings are aligned first by copies (principle 11): the tensors paired by a task share their
tile sizes on every axis but ``dim``.  Scatter chains run in a fixed order (the index tiles in
order, elements in order within a tile), so the results do not depend on scheduling; with
duplicate indices ``scatter`` keeps the last value in that order."""
from __future__ import annotations

import numbers

import numpy as np

from ..runtime.kernels import run_map, run_tasks
from ..tensors import DEFAULT_TILE, Tensor, TensorTraits, from_numpy
from ..tensors.creation import _generator
from ..tensors.tensor import forget_value_range, is_float
from .autograd import backward_rule, double_backward_rule, grad_enabled, record
from .basic import _float_tensor, _tensor, copy
from .creation import full, zeros
from .elementwise import clamp, convert, div, eq, host_tensor, masked_fill, mul, where
from .shape import broadcast_to, cat, getitem, reshape, retile, unsqueeze

_REDUCE_OPS = {"sum": 0, "amax": 1, "amin": 2, "assign": 3}


def _c(a) -> np.ndarray:
    """a as a C-contiguous array that keeps 0-d arrays 0-d (np.ascontiguousarray makes them 1-d)."""
    return np.array(a, order="C")


# ---- index operands ---------------------------------------------------------------------

class _Index:
    """An int64 index: the tensor the kernels read and its values (read once, validated)."""

    __slots__ = ("t", "a")

    def __init__(self, t: Tensor, a: np.ndarray):
        self.t, self.a = t, a


def _index(index, what: str, bound: int, ndim: int | None = None, tile: int | None = None) -> _Index:
    """``index`` (an int64 tiletrain Tensor or NumPy array) checked: dtype, rank (``ndim``; None:
    1-D or 0-d) and every value in [0, bound) -- before anything is submitted.  A NumPy index
    becomes a tensor tiled ``tile`` (1-D; None: the default tiles)."""
    if isinstance(index, _Index):  # checked already (a backward rule)
        return index
    if isinstance(index, np.ndarray):
        if index.dtype != np.int64:
            raise TypeError(f"{what}: index must be int64, got {index.dtype}")
        a, t = index, None
    else:
        _tensor(index, what, "index")
        if index.dtype != np.int64:
            raise TypeError(f"{what}: index must be an int64 tensor, got {index.dtype}")
        a, t = None, index
    shape = a.shape if a is not None else t.shape
    if ndim is None:
        if len(shape) > 1:
            raise ValueError(f"{what}: index must be 1-D, got shape {tuple(shape)}")
    elif len(shape) != ndim:
        raise ValueError(f"{what}: index has {len(shape)} dimension(s), input has {ndim}: they must match")
    if a is None:
        a = t.numpy(force=True)
    bad = (a < 0) | (a >= bound)
    if bad.any():
        pos = tuple(int(i) for i in np.argwhere(bad)[0])
        raise IndexError(f"{what}: index[{', '.join(map(str, pos))}] = {int(a[pos])} is out of range for a "
                         f"dimension of size {bound} (valid: 0..{bound - 1}); {int(bad.sum())} index(es) out of "
                         "range in all")
    if t is None:
        t = from_numpy(_c(a), (max(1, min(int(tile), a.size)),) if tile and a.ndim == 1 and a.size else None)
    if t.ndim == 0:
        t = from_numpy(a.reshape(1))
        a = a.reshape(1)
    return _Index(t, a)


def _dim(dim, ndim: int, what: str) -> int:
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise TypeError(f"{what}: dim must be an int, got {type(dim).__name__}")
    d = int(dim)
    if not -max(ndim, 1) <= d < max(ndim, 1):
        raise IndexError(f"{what}: dim {d} out of range for a tensor of {ndim} dimension(s)")
    return d % max(ndim, 1)


# ---- tile geometry ----------------------------------------------------------------------

def _grid(traits: TensorTraits) -> tuple[int, ...]:
    return tuple(-(-s // t) if s else 0 for s, t in zip(traits.shape, traits.tiles))


def _sizes(traits: TensorTraits, d: int) -> np.ndarray:
    """The tile sizes along axis d (the last one smaller)."""
    s, t = traits.shape[d], traits.tiles[d]
    return np.minimum(t, s - np.arange(_grid(traits)[d]) * t)


def _tile_table(traits: TensorTraits, dim: int):
    """Every tile of ``traits`` in row-major (linear) order: its grid coordinates (ntiles, ndim)
    and its (a, d, b) extents around ``dim``."""
    grid = _grid(traits)
    coords = np.stack(np.unravel_index(np.arange(int(np.prod(grid))), grid), axis=1).astype(np.int64)
    ext = [_sizes(traits, d)[coords[:, d]] for d in range(traits.ndim)]
    ma = np.prod(ext[:dim], axis=0, dtype=np.int64) if dim else np.ones(len(coords), np.int64)
    nb = np.prod(ext[dim + 1:], axis=0, dtype=np.int64) if dim + 1 < traits.ndim else np.ones(len(coords), np.int64)
    return coords, ma, ext[dim], nb


def _element_tiles(shape, tiles) -> np.ndarray:
    """The linear tile index of every element of an array of ``shape`` tiled ``tiles``."""
    grid = [-(-s // t) for s, t in zip(shape, tiles)]
    lin = np.zeros(shape, np.int64)
    stride = 1
    for d in reversed(range(len(shape))):
        c = (np.arange(shape[d]) // tiles[d]) * stride
        lin += c.reshape([-1 if e == d else 1 for e in range(len(shape))])
        stride *= grid[d]
    return lin


def _linear(coords: np.ndarray, grid) -> np.ndarray:
    return np.ravel_multi_index(tuple(coords.T), grid).astype(np.int64) if len(coords) else np.zeros(0, np.int64)


def _with_dim(coords: np.ndarray, dim: int, v: np.ndarray) -> np.ndarray:
    c = coords.copy()
    c[:, dim] = v
    return c


# ---- the two primitives (no autograd) ---------------------------------------------------

def _pairs(keys: np.ndarray, n2: int) -> tuple[np.ndarray, np.ndarray]:
    """Unique (i, j) pairs of keys i * n2 + j, sorted."""
    top = int(keys.max()) + 1 if len(keys) else 0
    # a presence count where the key range is small beside the keys (tile pairs: it is), a
    # sort only where it is not: np.unique's sort was most of index_select's submitting time
    u = np.flatnonzero(np.bincount(keys, minlength=top)) if top <= 4 * len(keys) + (1 << 16) else np.unique(keys)
    return u // n2, u % n2


def _vec_expand(n_tiles_e: int, pe: np.ndarray, pv: np.ndarray, tile_e: np.ndarray):
    """For tiles whose index-tile number is tile_e, one row per (tile, v) pair of that index
    tile: (tile position, v)."""
    counts = np.bincount(pe, minlength=n_tiles_e)
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rep = counts[tile_e]
    pos = np.repeat(np.arange(len(tile_e)), rep)
    off = np.arange(int(rep.sum())) - np.repeat(np.cumsum(rep) - rep, rep)
    return pos, pv[np.repeat(start[tile_e], rep) + off]


def _gather(x: Tensor, dim: int, idx: _Index, vec: bool, out_traits: TensorTraits) -> Tensor:
    """y = x gathered along dim (vec: index_select by a 1-D index; else gather with an index of
    y's shape and tiles).  x's tiles on the other axes equal y's."""
    y = Tensor(out_traits, x.dtype)
    if out_traits.size == 0:
        return y
    coords, ma, ne, nb = _tile_table(out_traits, dim)
    tx = x.tiles[dim]
    gx = -(-x.shape[dim] // tx)
    if vec:
        te = idx.t.tiles[0]
        pe, pv = _pairs((np.arange(len(idx.a)) // te) * gx + idx.a // tx, gx)
        pos, v = _vec_expand(-(-len(idx.a) // te), pe, pv, coords[:, dim])
        itile = coords[pos, dim]
    else:
        keep = idx.a.reshape(-1) >= 0  # -1: padding (skipped by the kernels too)
        lin_e = _element_tiles(idx.a.shape, idx.t.tiles).reshape(-1)[keep]
        pos, v = _pairs(lin_e * gx + idx.a.reshape(-1)[keep] // tx, gx)
        missing = np.setdiff1d(np.arange(len(coords)), pos)  # tiles of padding only: zeroed
        if len(missing):
            pos, v = np.concatenate([pos, missing]), np.concatenate([v, np.zeros(len(missing), np.int64)])
            order = np.argsort(pos, kind="stable")
            pos, v = pos[order], v[order]
        itile = pos
    xt = _linear(_with_dim(coords[pos], dim, v), _grid(x.traits))
    first = np.ones(len(pos), bool)
    first[1:] = pos[1:] != pos[:-1]
    nv = _sizes(x.traits, dim)[v]
    # a 1-D index is in range (checked), so each row of y is written by exactly one task of its
    # chain and the first need not zero the rest (most of a large tile: twice the writes)
    zero = first.astype(np.int64) if not vec else np.zeros(len(pos), np.int64)
    run_tasks("index_gather", [idx.t, x, y], np.stack([itile, xt, pos], axis=1), wmask=first.astype(np.int64) << 2,
              ma=ma[pos], ne=ne[pos], nb=nb[pos], nv=nv, vec=int(vec), first=zero,
              v0=(v * tx).astype(np.float64))
    return y


def _scatter_(y: Tensor, dim: int, idx: _Index, src: Tensor, vec: bool, op: str, cnt: Tensor | None = None) -> None:
    """y[.., idx, ..] op= src in place (y holds data; cnt: counts, see index_scatter_count).
    src has idx's shape (vec: y's with len(idx) along dim) and y's tiles on the other axes."""
    if src.traits.size == 0:
        return
    coords, ma, ne, nb = _tile_table(src.traits, dim)
    ty = y.tiles[dim]
    gy = -(-y.shape[dim] // ty)
    a = idx.a
    if vec:
        te = idx.t.tiles[0]
        pe, pv = _pairs((np.arange(len(a)) // te) * gy + a // ty, gy)
        pos, v = _vec_expand(-(-len(a) // te), pe, pv, coords[:, dim])
        itile = coords[pos, dim]
    else:
        keep = a.reshape(-1) >= 0  # -1: padding (skipped by the kernels too)
        lin_e = _element_tiles(a.shape, idx.t.tiles).reshape(-1)[keep]
        pos, v = _pairs(lin_e * gy + a.reshape(-1)[keep] // ty, gy)
        itile = pos
    yt = _linear(_with_dim(coords[pos], dim, v), _grid(y.traits))
    order = np.lexsort((pos, yt))  # each output tile's chain in index-tile order
    pos, v, itile, yt = pos[order], v[order], itile[order], yt[order]
    tensors = [idx.t, src, y] + ([cnt] if cnt is not None else [])
    tiles = np.stack([itile, pos, yt] + ([yt] if cnt is not None else []), axis=1)
    run_tasks("index_scatter_count" if cnt is not None else "index_scatter", tensors, tiles,
              ma=ma[pos], ne=ne[pos], nb=nb[pos], nv=_sizes(y.traits, dim)[v], vec=int(vec), op=_REDUCE_OPS[op],
              v0=(v * ty).astype(np.float64))


# ---- operand alignment ------------------------------------------------------------------

def _tiles_like(x: Tensor, ref_tiles, dim: int, own_dim: int) -> tuple[int, ...]:
    return tuple(own_dim if d == dim else min(ref_tiles[d], max(x.shape[d], 1)) for d in range(x.ndim))


def _align(x: Tensor, tiles) -> Tensor:
    return retile(x, tiles) if tuple(x.tiles) != tuple(tiles) else x


def _narrow_to(x: Tensor, shape, skip: int | None = None) -> Tensor:
    """x's leading block of ``shape`` (axis ``skip`` kept whole)."""
    if all(s == xs or d == skip for d, (s, xs) in enumerate(zip(shape, x.shape))):
        return x
    return getitem(x, tuple(slice(None) if d == skip else slice(0, s) for d, s in enumerate(shape)))


def _pad_index(idx: _Index, src: Tensor, shape, dim: int) -> tuple[_Index, Tensor]:
    """idx and src padded (with -1 indices, skipped, and zeros) to ``shape`` on the axes other
    than dim: a scatter into a self larger than the index."""
    t, s, a = idx.t, src, idx.a
    for d in range(len(shape)):
        extra = shape[d] - a.shape[d]
        if d == dim or extra <= 0:
            continue
        pshape = tuple(extra if e == d else n for e, n in enumerate(a.shape))
        a = np.concatenate([a, np.full(pshape, -1, np.int64)], axis=d)
        t = cat([t, full(pshape, -1, dtype=np.int64)], d)
        s = cat([s, zeros(pshape, dtype=s.dtype)], d)
    return _Index(t, a), s


def _scatter_operands(what: str, x: Tensor, dim: int, index, src: Tensor):
    """torch's scatter checks; returns (dim, idx, src) aligned to x's tiles (idx, src: x's
    tiles on the other axes, the index's along dim; padded to x's extent off dim)."""
    dim = _dim(dim, x.ndim, what)
    idx = _index(index, what, max(x.shape[dim], 0) if x.ndim else 1, ndim=x.ndim)
    if src.ndim != x.ndim:
        raise ValueError(f"{what}: src has {src.ndim} dimension(s), self has {x.ndim}")
    for d in range(x.ndim):
        if idx.a.shape[d] > src.shape[d] or (d != dim and idx.a.shape[d] > x.shape[d]):
            raise ValueError(f"{what}: index {tuple(idx.a.shape)} must be no larger than src {src.shape} in every "
                             f"dimension and than self {x.shape} apart from dim {dim}")
    src = _narrow_to(src, idx.a.shape)
    if any(idx.a.shape[d] < x.shape[d] for d in range(x.ndim) if d != dim):
        idx, src = _pad_index(idx, src, x.shape, dim)
    tiles = _tiles_like(idx.t, x.tiles, dim, idx.t.tiles[dim])
    idx = _Index(_align(idx.t, tiles), idx.a)
    return dim, idx, _align(src, tiles)


def _gather_index(g: Tensor, dim: int, idx: _Index) -> Tensor:
    """gather(g, dim, idx) for an aligned, validated index (no checks; for the backward rules)."""
    x = _align(_narrow_to(g, idx.a.shape, skip=dim), _tiles_like(g, idx.t.tiles, dim, g.tiles[dim]))
    return _gather(x, dim, idx, False, TensorTraits(idx.a.shape, idx.t.tiles))


# ---- index_select / index_add -----------------------------------------------------------

def index_select(input: Tensor, dim: int, index) -> Tensor:
    """torch.index_select: the slices of ``input`` along ``dim`` at the positions of a 1-D
    int64 ``index`` (any repeats, any order)."""
    what = "index_select"
    if isinstance(input, Tensor) and input.dtype in (np.int64, np.bool_):  # integers on the host (flip of ids)
        dim = _dim(dim, input.ndim, what)
        idx = _index(index, what, input.shape[dim] if input.ndim else 1)
        a = input.numpy(force=True)
        return host_tensor(a.copy() if input.ndim == 0 else np.take(a, idx.a, axis=dim))
    _float_tensor(input, what, "input")
    dim = _dim(dim, input.ndim, what)
    # the output is tiled like the index along dim: a NumPy index takes input's tiles there
    # when they are larger than the default (rows gathered from a (N, F) tensor tiled by 8192
    # rows come in tiles of 8192, not 512: 16x fewer tasks here and in every op after)
    tile = max(DEFAULT_TILE, input.tiles[dim]) if input.ndim else None
    idx = _index(index, what, input.shape[dim] if input.ndim else 1, tile=tile)
    if input.ndim == 0:
        return copy(input)
    shape = tuple(len(idx.a) if d == dim else s for d, s in enumerate(input.shape))
    tiles = tuple(idx.t.tiles[0] if d == dim else t for d, t in enumerate(input.tiles))
    y = _gather(input, dim, idx, True, TensorTraits(shape, tiles))
    return record("index_select", y, (input,), dim=dim, idx=idx, traits=input.traits)


@backward_rule("index_select")
def _index_select_bwd(node, g):
    dx = zeros(node.ctx["traits"].shape, dtype=g.dtype, tiles=node.ctx["traits"].tiles)
    dim, idx = node.ctx["dim"], node.ctx["idx"]
    _scatter_(dx, dim, idx, _align(g, _tiles_like(g, dx.tiles, dim, idx.t.tiles[0])), True, "sum")
    return (dx,)


def index_add(input: Tensor, dim: int, index, source: Tensor, *, alpha=1) -> Tensor:
    """torch.index_add: input with ``alpha * source`` slices added at the positions of a 1-D
    int64 ``index`` along ``dim`` (repeats accumulate, in index order)."""
    what = "index_add"
    _float_tensor(input, what, "input")
    _float_tensor(source, what, "source")
    if source.dtype != input.dtype:
        raise TypeError(f"{what}: source is {source.dtype}, input {input.dtype}: they must match")
    dim = _dim(dim, input.ndim, what)
    idx = _index(index, what, input.shape[dim] if input.ndim else 1)
    want = tuple(len(idx.a) if d == dim else s for d, s in enumerate(input.shape))
    if tuple(source.shape) != want and not (input.ndim == 0 and source.numel() == 1):
        raise ValueError(f"{what}: source has shape {source.shape}; expected {want} (input's with "
                         f"len(index) = {len(idx.a)} along dim {dim})")
    if input.ndim == 0:
        raise ValueError(f"{what}: a 0-d input is not supported; reshape it to (1,)")
    src = source if alpha == 1 else mul(source, float(alpha))
    src = _align(src, _tiles_like(src, input.tiles, dim, idx.t.tiles[0]))
    y = copy(input.detach() if input.requires_grad else input)
    _scatter_(y, dim, idx, src.detach() if src.requires_grad else src, True, "sum")
    return record("index_add", y, (input, src), dim=dim, idx=idx)


@backward_rule("index_add")
def _index_add_bwd(node, g):
    ds = None
    if node.inputs[1] is not None:
        dim, idx = node.ctx["dim"], node.ctx["idx"]
        shape = tuple(len(idx.a) if d == dim else s for d, s in enumerate(g.shape))
        tiles = tuple(idx.t.tiles[0] if d == dim else t for d, t in enumerate(g.tiles))
        ds = _gather(g, dim, idx, True, TensorTraits(shape, tiles))
    return (g, ds)


# Double backward: index_select and index_add are each other's gradient (recorded ops).
@double_backward_rule("index_select")
def _index_select_double(node, g):
    t = node.ctx["traits"]
    return (index_add(zeros(t.shape, dtype=g.dtype, tiles=t.tiles), node.ctx["dim"], node.ctx["idx"], g),)


@double_backward_rule("index_add")
def _index_add_double(node, g):
    return (g, index_select(g, node.ctx["dim"], node.ctx["idx"]) if node.inputs[1] is not None else None)


# ---- gather -----------------------------------------------------------------------------

def gather(input: Tensor, dim: int, index, *, sparse_grad: bool = False) -> Tensor:
    """torch.gather: out[i][j][k] = input[index[i][j][k]][j][k] (dim = 0; likewise for the other
    dims); ``index`` has input's rank and is no larger than input off ``dim``; the result has
    index's shape (and tiles)."""
    what = "gather"
    _float_tensor(input, what, "input")
    dim = _dim(dim, input.ndim, what)
    idx = _index(index, what, input.shape[dim] if input.ndim else 1, ndim=input.ndim)
    for d in range(input.ndim):
        if d != dim and idx.a.shape[d] > input.shape[d]:
            raise ValueError(f"{what}: index {tuple(idx.a.shape)} is larger than input {input.shape} in dimension {d}")
    x = _narrow_to(input, idx.a.shape, skip=dim)
    x = _align(x, _tiles_like(x, idx.t.tiles, dim, x.tiles[dim]))
    y = _gather(x.detach() if x.requires_grad else x, dim, idx, False, TensorTraits(idx.a.shape, idx.t.tiles))
    return record("gather", y, (input,), dim=dim, idx=idx, traits=input.traits)


@backward_rule("gather")
def _gather_bwd(node, g):
    traits, dim, idx = node.ctx["traits"], node.ctx["dim"], node.ctx["idx"]
    dx = zeros(traits.shape, dtype=g.dtype, tiles=traits.tiles)
    _, pidx, src = _scatter_operands("gather backward", dx, dim, idx, g)
    _scatter_(dx, dim, _Index(pidx.t, pidx.a), src, False, "sum")
    return (dx,)


# Double backward: gather and scatter_add are each other's gradient (recorded ops).
@double_backward_rule("gather")
def _gather_double(node, g):
    traits = node.ctx["traits"]
    return (scatter_add(zeros(traits.shape, dtype=g.dtype, tiles=traits.tiles), node.ctx["dim"], node.ctx["idx"], g),)


# ---- scatter, scatter_add, scatter_reduce -----------------------------------------------

def _scatter_op(what: str, input: Tensor, dim: int, index, src, op: str, include_self: bool = True) -> Tensor:
    _float_tensor(input, what, "input")
    if isinstance(src, numbers.Real) and not isinstance(src, bool):
        src_t = None
    else:
        _float_tensor(src, what, "src")
        if src.dtype != input.dtype:
            raise TypeError(f"{what}: src is {src.dtype}, input {input.dtype}: they must match")
        src_t = src
    if input.ndim == 0:
        raise ValueError(f"{what}: a 0-d input is not supported; reshape it to (1,)")
    if src_t is None:  # a scalar value: a src of the index's shape
        ishape = index.shape if isinstance(index, (Tensor, np.ndarray)) else None
        if ishape is None:
            _tensor(index, what, "index")
        src_t = full(tuple(ishape), float(src), dtype=input.dtype)
    dim, idx, s = _scatter_operands(what, input, dim, index, src_t)
    s_in = s.detach() if s.requires_grad else s
    y = copy(input.detach() if input.requires_grad else input)
    # without self: a count makes the first element scattered to a position replace self's
    cnt = zeros(y.shape, dtype=y.dtype, tiles=y.tiles) if (op == "mean" or not include_self) else None
    _scatter_(y, dim, idx, s_in, False, "sum" if op == "mean" else op, None if include_self else cnt)
    if op == "mean":
        if include_self:  # count the elements: a scatter of ones
            _scatter_(cnt, dim, idx, full(idx.a.shape, 1.0, dtype=y.dtype, tiles=idx.t.tiles), False, "sum")
        y = div(y, clamp(cnt + float(include_self), min=1.0))
    return y, cnt, dim, idx, s


def scatter(input: Tensor, dim: int, index, src=None, *, value=None, reduce: str | None = None) -> Tensor:
    """torch.scatter: input with src's elements (or ``value``) written at ``index`` along dim
    (duplicates: the last in index order wins); ``reduce="add"`` is scatter_add."""
    what = "scatter"
    if reduce not in (None, "add"):
        raise ValueError(f"{what}: reduce must be None or 'add' (use scatter_reduce for others), got {reduce!r}")
    if (src is None) == (value is None):
        raise TypeError(f"{what}: pass exactly one of src and value")
    src = value if src is None else src
    op = "sum" if reduce == "add" else "assign"
    y, _, dim, idx, s = _scatter_op(what, input, dim, index, src, op)
    return record("scatter", y, (input, s), dim=dim, idx=idx, kind=op)


def scatter_add(input: Tensor, dim: int, index, src: Tensor) -> Tensor:
    """torch.scatter_add: input with src's elements added at ``index`` along dim."""
    return scatter(input, dim, index, src, reduce="add")


@backward_rule("scatter")
def _scatter_bwd(node, g):
    dim, idx = node.ctx["dim"], node.ctx["idx"]
    dself = dsrc = None
    if node.inputs[0] is not None:
        if node.ctx["kind"] == "sum":
            dself = g
        else:  # the overwritten positions get no gradient
            dself = copy(g)
            _scatter_(dself, dim, idx, zeros(idx.a.shape, dtype=g.dtype, tiles=idx.t.tiles), False, "assign")
    if node.inputs[1] is not None:
        dsrc = _gather_index(g, dim, idx)
    return (dself, dsrc)


@double_backward_rule("scatter")
def _scatter_double(node, g):
    dim, idx = node.ctx["dim"], node.ctx["idx"]
    dself = dsrc = None
    if node.inputs[0] is not None:   # the overwritten positions zeroed by a recorded scatter of zeros
        dself = g if node.ctx["kind"] == "sum" else _zero_at(g, dim, idx)
    if node.inputs[1] is not None:
        dsrc = gather(g, dim, idx)
    return (dself, dsrc)


@double_backward_rule("max_dim")
def _max_dim_double(node, g):
    """max/min along a dim (ops/reduce.py): g scattered to the selected indices by a recorded
    scatter_add (whose gradient is a gather)."""
    (i,) = node.saved
    traits, axis = node.ctx["traits"], node.ctx["axis"]
    if g.ndim < len(traits.shape):   # keepdim=False: the reduced axis back as a unit axis
        i, g = unsqueeze(i, axis), unsqueeze(g, axis)
    return (scatter_add(zeros(traits.shape, dtype=g.dtype, tiles=traits.tiles), axis, i, g),)


def _zero_at(g: Tensor, dim: int, idx: _Index) -> Tensor:
    """g with the positions idx points at zeroed, recorded (a scatter of a constant)."""
    return scatter(g, dim, idx, zeros(idx.a.shape, dtype=g.dtype, tiles=idx.t.tiles))


def scatter_reduce(input: Tensor, dim: int, index, src: Tensor, reduce: str, *, include_self: bool = True) -> Tensor:
    """torch.scatter_reduce: src's elements reduced into input at ``index`` along dim with
    ``reduce`` in "sum", "mean", "amax", "amin"; ``include_self=False`` leaves input's value out
    of the reduction wherever some element is scattered."""
    what = "scatter_reduce"
    if reduce == "prod":
        raise NotImplementedError(f"{what}: reduce='prod' is not supported (sum, mean, amax, amin are)")
    if reduce not in ("sum", "mean", "amax", "amin"):
        raise ValueError(f"{what}: reduce must be one of 'sum', 'mean', 'amax', 'amin', got {reduce!r}")
    if not isinstance(src, Tensor):
        _tensor(src, what, "src")
    y, cnt, dim, idx, s = _scatter_op(what, input, dim, index, src, reduce, bool(include_self))
    return record("scatter_reduce", y, (input, s), saved=(input, s, y), dim=dim, idx=idx, reduce=reduce,
                  include_self=bool(include_self))


@backward_rule("scatter_reduce")
def _scatter_reduce_bwd(node, g):
    return _scatter_reduce_grads(node, g, False)


@double_backward_rule("scatter_reduce")
def _scatter_reduce_double(node, g):
    """The same terms with g's gathers and scatters recorded (every term is linear in g; the
    counts and the masks of amax/amin are constants, as in torch)."""
    return _scatter_reduce_grads(node, g, True)


def _scatter_reduce_grads(node, g, recorded: bool):
    # torch's scatter_reduce_backward (FunctionsManual.cpp), term by term
    self_, src, result = node.saved
    dim, idx, reduce, inc = node.ctx["dim"], node.ctx["idx"], node.ctx["reduce"], node.ctx["include_self"]
    self_, src, result = (t.detach() if t.requires_grad else t for t in (self_, src, result))

    def scatter_add_(base, values):
        out = copy(base)
        _scatter_(out, dim, idx, values, False, "sum")
        return out

    gather_g = (lambda t: gather(t, dim, idx)) if recorded else (lambda t: _gather_index(t, dim, idx))
    if reduce == "sum":
        dself, dsrc = g, gather_g(g)
    elif reduce == "mean":
        n = full(g.shape, 1.0 if inc else 0.0, dtype=g.dtype, tiles=g.tiles)
        n = scatter_add_(n, full(idx.a.shape, 1.0, dtype=g.dtype, tiles=idx.t.tiles))
        n = where(eq(n, 0.0), 1.0, n)
        dself = div(g, n)
        dsrc = div(gather_g(g), _gather_index(n, dim, idx))
    else:
        value = _gather_index(result, dim, idx)
        self_is = where(eq(self_, result), full(g.shape, 1.0, dtype=g.dtype, tiles=g.tiles), 0.0)
        src_is = where(eq(src, value), full(src.shape, 1.0, dtype=g.dtype, tiles=src.tiles), 0.0)
        n = scatter_add_(self_is, src_is)
        gd = div(g, n)
        dself = mul(self_is, gd)
        dsrc = mul(src_is, gather_g(gd))
    if not inc and recorded:
        dself = _zero_at(dself, dim, idx)
    elif not inc:
        dself = copy(dself)
        _scatter_(dself, dim, idx, zeros(idx.a.shape, dtype=g.dtype, tiles=idx.t.tiles), False, "assign")
    return (dself if node.inputs[0] is not None else None, dsrc if node.inputs[1] is not None else None)


# ---- torch's indexing: x[index] with index lists/tensors/masks, x[index] = value, topk, multinomial

def _is_advanced(it) -> bool:
    return isinstance(it, (list, np.ndarray, Tensor))


def _np_items(index) -> tuple:
    """index as a tuple NumPy can apply, tensors read as arrays (bool masks stay bool)."""
    items = index if isinstance(index, tuple) else (index,)
    out = []
    for it in items:
        if isinstance(it, Tensor):
            it = it.numpy(force=True)
            if it.dtype.kind not in "biu":
                raise IndexError(f"tensors used as indices must be long, int or bool tensors, got {it.dtype}")
        elif isinstance(it, list):
            it = np.asarray(it)
            if it.dtype.kind not in "biu":
                raise IndexError(f"index list {items!r} must hold ints or bools")
        out.append(it)
    return tuple(out)


def _positions(x: Tensor, index, what: str) -> np.ndarray:
    """Flat element positions x[index] selects, shaped as the result (torch's/NumPy's rules)."""
    pos = np.arange(x.numel(), dtype=np.int64).reshape(x.shape)
    try:
        return pos[_np_items(index)]
    except IndexError as e:
        raise IndexError(f"{what}: {e}") from None


def index_get(x: Tensor, index) -> Tensor:
    """x[index]: getitem (ints, slices, None, ...) and, with index lists, int64 or bool tensors
    or arrays among them, torch's advanced indexing (a gather of the selected elements; the
    index values are read first)."""
    items = index if isinstance(index, tuple) else (index,)
    if not any(_is_advanced(it) for it in items):
        return getitem(x, index)
    _tensor(x, "getitem", "x")
    pos = _positions(x, index, "getitem")
    if pos.size == 0:
        raise ValueError(f"getitem: index {index!r} selects nothing; tiletrain has no empty tensors")
    flat = reshape(x, (x.numel(),))
    if not is_float(x.dtype):  # integer or bool data: no autograd, gathered in NumPy
        return from_numpy(_c(x.numpy(force=True).reshape(-1)[pos.reshape(-1)].reshape(pos.shape)))
    return reshape(index_select(flat, 0, np.ascontiguousarray(pos.reshape(-1))), pos.shape)


def index_put(x: Tensor, index, value, accumulate: bool = False) -> Tensor:
    """A new tensor: x with x[index] = value (value a number or a tensor broadcasting to the
    selection).  Float tensors: masked_fill (a bool mask and a number) or a scatter into the
    flat tensor (differentiable in x and value); integer and bool tensors: through NumPy.
    torch.index_put(input, indices, values, accumulate): ``index`` a tuple (or list) of index
    tensors; accumulate=True adds the values, repeated positions adding up."""
    what = "setitem"
    _tensor(x, what, "x")
    if isinstance(index, list) and index and all(isinstance(i, Tensor) for i in index):
        index = tuple(index)  # torch's `indices`: one index tensor per leading dimension
    if accumulate:
        return _index_accumulate(x, index, value)
    if isinstance(value, Tensor):
        if value.dtype != x.dtype:
            value = convert(value, x.dtype)
    elif not isinstance(value, numbers.Number):
        value = np.asarray(value)  # a list or an array
    if (isinstance(index, Tensor) and index.dtype == np.bool_ and is_float(x.dtype)
            and isinstance(value, numbers.Real) and not isinstance(value, bool)):
        return masked_fill(x, index, float(value))
    pos = _positions(x, index, what)
    if pos.size == 0:
        return x
    if not is_float(x.dtype):
        a = x.numpy(force=True).copy()
        v = value.numpy(force=True) if isinstance(value, Tensor) else value
        a.reshape(-1)[pos.reshape(-1)] = np.broadcast_to(np.asarray(v, dtype=a.dtype), pos.shape).reshape(-1)
        return from_numpy(a, x.tiles if x.ndim else None)
    if isinstance(value, Tensor):
        src = value if value.shape == pos.shape else broadcast_to(value, pos.shape) if pos.shape else reshape(value, ())
        src = reshape(src, (max(pos.size, 1),))
    else:
        v = np.asarray(value, dtype=x.dtype)
        src = (full((pos.size,), float(v), dtype=x.dtype) if v.ndim == 0 else
               from_numpy(_c(np.broadcast_to(v, pos.shape).reshape(-1))))
    flat = reshape(x, (x.numel(),))
    if src.tiles != flat.tiles[:1] and src.shape == flat.shape:
        src = retile(src, flat.tiles)
    return reshape(scatter(flat, 0, np.ascontiguousarray(pos.reshape(-1)), src), x.shape)


def _index_accumulate(x: Tensor, index, value) -> Tensor:
    """index_put(..., accumulate=True): x plus value added at the selected positions (repeats add)."""
    pos = _positions(x, index, "index_put")
    if pos.size == 0:
        return x
    if not is_float(x.dtype):
        a = x.numpy(force=True).copy()
        v = value.numpy(force=True) if isinstance(value, Tensor) else np.asarray(value)
        np.add.at(a.reshape(-1), pos.reshape(-1), np.broadcast_to(v.astype(a.dtype), pos.shape).reshape(-1))
        return from_numpy(a, x.tiles if x.ndim else None)
    if isinstance(value, Tensor):
        value = convert(value, x.dtype) if value.dtype != x.dtype else value
        src = value if value.shape == pos.shape else broadcast_to(value, pos.shape) if pos.shape else reshape(value, ())
        src = reshape(src, (pos.size,))
    else:
        src = from_numpy(_c(np.broadcast_to(np.asarray(value, dtype=x.dtype), pos.shape).reshape(-1)))
    flat = reshape(x, (x.numel(),))
    return reshape(index_add(flat, 0, from_numpy(_c(pos.reshape(-1).astype(np.int64))), src), x.shape)


def assign_(x: Tensor, y: Tensor) -> Tensor:
    """Write y's values into x's tiles (y: x's shape; cast to x's dtype and retiled): how
    x[index] = value and the other in-place methods land.  While autograd records, a tensor in the graph (a
    leaf that requires grad, or one an op made) is refused: tiletrain keeps no version
    counters to catch a saved tensor changed under a later backward."""
    if tuple(y.shape) != tuple(x.shape):
        raise RuntimeError(f"in-place assignment: result shape {y.shape} differs from the tensor's {x.shape}")
    if grad_enabled() and (x.requires_grad or x._node is not None or y.requires_grad):
        if x.requires_grad and x._node is None:
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation "
                               "(wrap it in tiletrain.no_grad())")
        raise NotImplementedError("in-place assignment into a tensor of the autograd graph is not supported; "
                                  "write it out of place (torch.where, masked_fill, scatter, cat)")
    if y.dtype != x.dtype:
        y = convert(y, x.dtype)
    if y.tiles != x.tiles:
        y = retile(y, x.tiles)
    forget_value_range(x)
    run_map("copy", y, x)  # into x's own tiles: views sharing them see the new values too
    return x


def topk(input: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):  # noqa: A002
    """torch.topk: (values, indices) of the k largest (smallest) elements along dim, in
    descending (ascending) order; ties keep the lower index first.  The values are read (the
    order is found in NumPy), the values returned are a gather (differentiable)."""
    what = "topk"
    x = _tensor(input, what, "input")
    d = _dim(dim, max(x.ndim, 1), what)
    n = x.shape[d] if x.ndim else 1
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= n:
        raise RuntimeError(f"{what}: k ({k}) out of range for a dimension of size {n} (tiletrain needs k >= 1)")
    a = x.numpy(force=True)
    order = np.argsort(-a if largest else a, axis=d, kind="stable") if x.ndim else np.zeros((), np.int64)
    idx = np.ascontiguousarray(np.take(order, np.arange(int(k)), axis=d).astype(np.int64)) if x.ndim else order
    from .reduce import return_types
    if not is_float(x.dtype):
        return return_types.topk(from_numpy(_c(np.take_along_axis(a, idx, d))), from_numpy(idx))
    return return_types.topk(gather(x, d, idx), from_numpy(idx))


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """torch.nn.functional.one_hot: int64 (..., num_classes) with a 1 at each label (the
    labels are read; num_classes=-1: the largest label + 1)."""
    what = "one_hot"
    t = _tensor(tensor, what, "tensor")
    if t.dtype != np.int64:
        raise RuntimeError(f"{what} is only applicable to index tensor (int64), got {t.dtype}")
    a = t.numpy(force=True)
    if (a < 0).any():
        raise RuntimeError(f"{what}: class values must be non-negative")
    n = int(a.max()) + 1 if num_classes == -1 else int(num_classes)
    if (a >= n).any():
        raise RuntimeError(f"{what}: class values must be smaller than num_classes ({n})")
    return from_numpy(_c((a[..., None] == np.arange(n)).astype(np.int64)))


def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *, generator=None) -> Tensor:
    """torch.multinomial: int64 indices drawn from the rows of ``input`` (non-negative weights,
    1-D or 2-D) with torch's draws for the generator's seed: without replacement (or one
    sample) the largest weight / Exp(1) per row (one exponential per weight, in the input's
    dtype), with replacement a binary search of the normalised cumulative sums for each
    float64 uniform.  The weights are read."""
    what = "multinomial"
    x = _float_tensor(input, what, "input")
    if x.ndim not in (1, 2):
        raise RuntimeError(f"{what}: prob_dist must be 1 or 2 dim, got {x.ndim}")
    if isinstance(num_samples, bool) or not isinstance(num_samples, numbers.Integral) or num_samples <= 0:
        raise RuntimeError(f"{what}: cannot sample n_sample <= 0 samples (got {num_samples!r})")
    out = multinomial_rows(np.ascontiguousarray(x.numpy(force=True).reshape(-1, x.shape[-1])), num_samples, replacement,
                           _generator(what, generator))
    return from_numpy(out if x.ndim == 2 else np.ascontiguousarray(out[0]))


def multinomial_rows(w: np.ndarray, num_samples: int, replacement: bool, g) -> np.ndarray:
    """multinomial's draws on the host: int64 (rows, num_samples) from the weight rows ``w``
    (2-D, float32 or float64) and Generator ``g``, after torch's checks of the weights."""
    what = "multinomial"
    if not np.isfinite(w).all() or (w < 0).any():
        raise RuntimeError(f"{what}: probability tensor contains either inf, nan or element < 0")
    if (w.sum(axis=1) <= 0).any():
        raise RuntimeError(f"{what}: invalid multinomial distribution (sum of probabilities <= 0)")
    if not replacement and num_samples > np.count_nonzero(w, axis=1).min():
        raise RuntimeError(f"{what}: cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    if not replacement or num_samples == 1:
        q = w / g.exponential(w.size, w.dtype).reshape(w.shape)
        return np.ascontiguousarray(np.argsort(-q, axis=1, kind="stable")[:, :int(num_samples)].astype(np.int64))
    out = np.empty((w.shape[0], int(num_samples)), np.int64)
    for r, row in enumerate(w):
        cum = np.cumsum(row, dtype=w.dtype)
        cum /= cum[-1]
        out[r] = np.searchsorted(cum, g.unit(int(num_samples), np.float64), side="left")
    return out

__all__ = ["assign_", "gather", "index_add", "index_get", "index_put", "index_select", "multinomial", "scatter",
           "scatter_add", "scatter_reduce", "topk"]
