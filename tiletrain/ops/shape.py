"""Shape operations: re-tiling, reshape/view/flatten/squeeze/unsqueeze, permute/transpose/t,
expand/broadcast_to, getitem, cat/stack/split/chunk — PyTorch's semantics, any tilings.

Everything that moves data is one C mechanism, the strided region copy of
csrc/expand_shape.c (``y[ystart + ystep i] = x[xstart + step i]`` per axis, an axis of y
mapped to an axis of x or broadcast; one task per overlapping (source tile, destination
tile) pair).  Tiling is a performance choice, never a correctness rule: inputs may be tiled
in any way, and mixed tilings (``cat`` of tensors tiled differently) are fine.

Zero-copy: a reshape whose tiles line up (in every group of merged or split axes, a tile
holds whole rows of all axes but the group's first) returns a *view* sharing the input's
tile handles; size-1 axes always line up, so ``unsqueeze``/``squeeze`` (and ``getitem``,
``permute`` or ``expand`` that only add, drop or move size-1 axes) never copy.  A
``getitem``/``split``/``chunk`` that selects whole tiles (slices from and to tile boundaries,
ints along axes of tile 1) is a view of those tiles too (a copy under MPI).  ``view`` is
``reshape``: unlike torch it copies when the tiles do not line up (it never fails for
layout reasons).  Ops that change nothing return their input itself.  Whether a result
shares tiles with its input depends on the tiling, so in-place ops (fill_, axpy_) must not
be used on shape-op results or on their inputs while the results are live (autograd never
accumulates into a view in place).

Result tiling: an axis kept from an input keeps its tile size (clipped to the new length;
``cat``: the first tensor's tiles, ``stack``: the first tensor's tiles and, along the new
axis, as many items as fit in DEFAULT_TILE**2 elements while leaving a tile per worker); a
new or expanded axis of ``expand``/``broadcast_to`` gets min(size, 512); ``None`` in
``getitem`` gives tile 1; a reshape that lines up takes the view's tiles, and one that
does not first re-tiles the input so that each group of merged/split axes is whole inside
a tile except its first axis, keeping about the input's tile volume, then views it.

Supported dtypes: float32, float64, float16, bfloat16, int64 and bool (``unsqueeze``/``squeeze``, never copying,
take any dtype).  Bad input raises a TypeError/ValueError/IndexError naming the argument
before any task is submitted."""
from __future__ import annotations

import math
import numbers
import operator

import numpy as np

from ..runtime.context import nworkers
from ..runtime.kernels import assume_written, copy_regions, tensor_view, tile_view, view_tiles
from ..tensors import Tensor, TensorTraits, bfloat16, float16
from ..tensors.tensor import value_range_of
from ..tensors.traits import DEFAULT_TILE
from .autograd import PartialGradient, backward_rule, double_backward_rule, record
from .basic import _tensor, dim_alias
from .creation import zeros

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.bool_), float16, bfloat16)


def _shape_tensor(x, what: str, name: str = "x") -> Tensor:
    x = _tensor(x, what, name)
    if x.dtype not in _DTYPES:
        raise TypeError(f"{what}: {name} has dtype {x.dtype}; this op supports float32, float64, float16, bfloat16, int64 and bool")
    return x


def _int(v, what: str, name: str) -> int:
    if type(v) is int:  # the common case, without the numbers.Integral (ABC) check
        return v
    if not isinstance(v, numbers.Integral) or isinstance(v, bool):
        raise TypeError(f"{what}: {name} must be an int, got {type(v).__name__}")
    return int(v)


def _dim(dim, ndim: int, what: str, name: str = "dim", extra: int = 0) -> int:
    """dim normalised into [0, ndim + extra) (torch's rule: a 0-d tensor takes dims -1 and 0)."""
    dim = _int(dim, what, name)
    n = max(ndim, 1) + extra
    if not -n <= dim < n:
        raise IndexError(f"{what}: {name}={dim} is out of range (expected to be in [{-n}, {n - 1}])")
    return dim % n


def _dims_arg(args, what: str, name: str) -> tuple[int, ...]:
    """f(x, 2, 3) and f(x, (2, 3)) alike."""
    if len(args) == 1 and type(args[0]) is not int and not isinstance(args[0], numbers.Integral):
        args = args[0]
        if not isinstance(args, (tuple, list)):
            raise TypeError(f"{what}: {name} must be ints or a tuple of ints, got {type(args).__name__}")
    return tuple(_int(a, what, f"{name}[{i}]") for i, a in enumerate(args))


# ---- the region-copy op: re-tiling, permute, getitem, cat, stack ----------------------
# A spec maps y onto x (the arguments of copy_regions after x): xstart per x axis; xaxis,
# step, ystart, ystep, count per y axis.

def _identity(shape) -> tuple:
    n = len(shape)
    return (0,) * n, tuple(range(n)), (1,) * n, (0,) * n, (1,) * n, tuple(shape)


def _inverse(spec, x_ndim: int) -> tuple:
    """The spec copying back what ``spec`` copied (its broadcast axes have count 1): source y,
    destination x."""
    xstart, xaxis, step, ystart, ystep, count = spec
    axis, st, start, dst_step, cnt = [-1] * x_ndim, [1] * x_ndim, list(xstart), [1] * x_ndim, [1] * x_ndim
    for d, a in enumerate(xaxis):
        if a >= 0:
            axis[a], st[a], dst_step[a], cnt[a] = d, ystep[d], step[d], count[d]
    return tuple(ystart), tuple(axis), tuple(st), tuple(start), tuple(dst_step), tuple(cnt)


def _regions(xs, traits: TensorTraits, specs) -> Tensor:
    y = Tensor(traits, xs[0].dtype)
    copy_regions(y, [(x, *spec) for x, spec in zip(xs, specs)])
    y.value_range = _hull(xs)
    return record("region", y, xs, specs=specs, traits=[x.traits for x in xs])


def _hull(xs) -> tuple[int, int] | None:
    """Known bounds of values copied from xs (ids sliced and stacked into a batch keep the
    range their array had: embedding and cross_entropy need not read them back), or None."""
    lo = hi = None
    for x in xs:
        r = value_range_of(x)
        if r is None:
            return None
        lo, hi = (r[0], r[1]) if lo is None else (min(lo, r[0]), max(hi, r[1]))
    return None if lo is None else (lo, hi)


@backward_rule("region")
def _region_bwd(node, g):
    split = node.ctx.get("split")
    if split is not None:  # one piece of split(): written into x's gradient by the engine
        specs, pieces = split
        traits = node.ctx["traits"][0]
        inv = _inverse(node.ctx["specs"][0], traits.ndim)
        return (PartialGradient(traits, g.dtype, node.ctx["part"], len(specs),
                                write=lambda acc: _write_piece(acc, g, inv),
                                fill=lambda acc, mask: _zero_pieces(acc, specs, pieces, mask),
                                group=("split", traits, specs)),)
    grads = []
    for x, spec, traits in zip(node.inputs, node.ctx["specs"], node.ctx["traits"]):
        if x is None:
            grads.append(None)
            continue
        inv = _inverse(spec, traits.ndim)
        whole = math.prod(inv[5]) == traits.size  # else the elements x gave nothing to get zero
        dx = Tensor(traits, g.dtype) if whole else zeros(traits, dtype=g.dtype)
        copy_regions(dx, [(g, *inv)])
        grads.append(dx)
    return tuple(grads)


def _write_piece(acc: Tensor, g: Tensor, inv) -> None:
    """A piece's gradient g into its tiles of acc: the engine zeroes the pieces no gradient
    reached (_zero_pieces) before acc is read."""
    copy_regions(acc, [(g, *inv)])
    assume_written(acc)


def _zero_pieces(acc: Tensor, specs, pieces, mask: int) -> None:
    """Zero the pieces of acc (split's input) whose bit is not set in mask."""
    ndim = acc.ndim
    copy_regions(acc, [(zeros(p, dtype=acc.dtype), *_inverse(spec, ndim))
                       for i, (spec, p) in enumerate(zip(specs, pieces)) if not (mask >> i) & 1])


# Double backward: the region copy is linear, its gradient the inverse copy (region_bwd, a
# recorded op), whose gradient is the forward copy of that one input again (a region op,
# zero where the input gave nothing).
@double_backward_rule("region")
def _region_double(node, g):
    return tuple(None if x is None else _region_grad(g, spec, traits)
                 for x, spec, traits in zip(node.inputs, node.ctx["specs"], node.ctx["traits"]))


def _region_grad(g: Tensor, spec, traits: TensorTraits) -> Tensor:
    inv = _inverse(spec, traits.ndim)
    dx = Tensor(traits, g.dtype) if math.prod(inv[5]) == traits.size else zeros(traits, dtype=g.dtype)
    copy_regions(dx, [(g, *inv)])
    return record("region_bwd", dx, (g,), spec=spec, traits=g.traits)


@backward_rule("region_bwd", differentiable=True)
def _region_bwd_bwd(node, gg):
    spec, traits = node.ctx["spec"], node.ctx["traits"]
    y = Tensor(traits, gg.dtype) if math.prod(spec[5]) == traits.size else zeros(traits, dtype=gg.dtype)
    copy_regions(y, [(gg, *spec)])
    return (record("region", y, (gg,), specs=[spec], traits=[gg.traits]),)


def retile(x: Tensor, tiles) -> Tensor:
    """x with another tiling (a copy; x itself when the tiles are already ``tiles``)."""
    x = _shape_tensor(x, "retile")
    traits = TensorTraits(x.shape, tiles)
    if traits.tiles == x.tiles:
        return x
    return _regions([x], traits, [_identity(x.shape)])


# ---- reshape and views ----------------------------------------------------------------

def _groups(xs, ys):
    """Axis groups a reshape merges or splits: [(x axes, y axes)], size-1 axes outside."""
    i = j = 0
    out = []
    while True:
        while i < len(xs) and xs[i] == 1:
            i += 1
        while j < len(ys) and ys[j] == 1:
            j += 1
        if i == len(xs) or j == len(ys):
            return out
        ia, jb, px, py = [i], [j], xs[i], ys[j]
        i, j = i + 1, j + 1
        while px != py:
            if px < py:
                ia.append(i)
                px *= xs[i]
                i += 1
            else:
                jb.append(j)
                py *= ys[j]
                j += 1
        out.append((ia, jb))


def _aligned_tiles(xs, xt, ys) -> tuple[int, ...]:
    """Tiles of x (shape xs, tiles xt) under which a reshape to ys is a view: in each group
    every x axis but the first whole, the first's extent times the rest a multiple of the
    product of the group's other new axes, near the old tile volume."""
    tiles = list(xt)
    for ia, jb in _groups(xs, ys):
        rest_x = math.prod(xs[a] for a in ia[1:])
        rest_y = math.prod(ys[b] for b in jb[1:])
        lcm = math.lcm(rest_x, rest_y)
        extent = max(lcm, math.prod(xt[a] for a in ia) // lcm * lcm)
        tiles[ia[0]] = min(extent // rest_x, xs[ia[0]])
        for a in ia[1:]:
            tiles[a] = xs[a]
    return tuple(tiles)


def _view(x: Tensor, ptr, shape, tiles) -> Tensor:
    """The tensor of C view ``ptr`` of x's tiles (no copy); x stays alive while it lives."""
    # base x, not its base: a view may use x's own arrays of tile handles; value_range None,
    # not x's: a write to x in place would not reach the view's copy of it
    return Tensor._of_ptr(ptr, TensorTraits(shape, tiles), x.dtype, x._session, base=x)


def _reshape(x: Tensor, shape: tuple[int, ...]) -> Tensor:
    if shape == x.shape:
        return x
    tiles = view_tiles(x, shape)
    if tiles is None:  # re-tile so that the tiles line up, then view
        x = retile(x, _aligned_tiles(x.shape, x.tiles, shape))
        tiles = view_tiles(x, shape)
    y = _view(x, tensor_view(x, shape), shape, tiles)
    return record("reshape", y, (x,), shape=x.shape, tiles=x.tiles)


@backward_rule("reshape", differentiable=True)
def _reshape_bwd(node, g):
    return (retile(_reshape(g, node.ctx["shape"]), node.ctx["tiles"]),)


def _new_shape(x: Tensor, args, what: str) -> tuple[int, ...]:
    shape = _dims_arg(args, what, "shape")
    if shape.count(-1) > 1:
        raise ValueError(f"{what}: only one dimension can be inferred (-1), got shape {shape}")
    for i, d in enumerate(shape):
        if d < 1 and d != -1:
            raise ValueError(f"{what}: shape[{i}] = {d}; sizes must be >= 1 (or -1 to infer one)")
    known = math.prod(d for d in shape if d != -1)
    if -1 in shape:
        if x.numel() % known:
            raise ValueError(f"{what}: shape {shape} is invalid for a tensor of size {x.numel()}")
        shape = tuple(x.numel() // known if d == -1 else d for d in shape)
    if math.prod(shape) != x.numel():
        raise ValueError(f"{what}: shape {shape} is invalid for a tensor of size {x.numel()} (shape {x.shape})")
    return shape


def reshape(x: Tensor, *shape) -> Tensor:
    """x with a new shape of the same size (one dimension may be -1).  A view when the tiles
    line up, else a re-tiling copy then a view (module docstring)."""
    x = _shape_tensor(x, "reshape")
    return _reshape(x, _new_shape(x, shape, "reshape"))


def view(x: Tensor, *shape) -> Tensor:
    """reshape: a view when the tiles line up, a copy otherwise (torch's view would fail)."""
    x = _shape_tensor(x, "view")
    return _reshape(x, _new_shape(x, shape, "view"))


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    what = "flatten"
    x = _shape_tensor(x, what)
    s, e = _dim(start_dim, x.ndim, what, "start_dim"), _dim(end_dim, x.ndim, what, "end_dim")
    if s > e:
        raise ValueError(f"{what}: start_dim ({start_dim}) cannot come after end_dim ({end_dim})")
    if x.ndim == 0:
        return _reshape(x, (1,))
    return _reshape(x, x.shape[:s] + (math.prod(x.shape[s:e + 1]),) + x.shape[e + 1:])


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """x with a size-1 axis inserted at ``dim`` (a view, never a copy)."""
    x = _tensor(x, "unsqueeze", "x")
    d = _dim(dim, x.ndim, "unsqueeze", extra=1 if x.ndim else 0)
    return _reshape(x, x.shape[:d] + (1,) + x.shape[d:])


def squeeze(x: Tensor, dim=None) -> Tensor:
    """x without its size-1 axes (all, or those of ``dim``, an int or a tuple; axes of
    another size are kept, as in torch).  A view, never a copy."""
    what = "squeeze"
    x = _tensor(x, what, "x")
    if dim is None:
        dims = set(range(x.ndim))
    else:
        dims = {_dim(d, x.ndim, what, f"dim[{i}]") for i, d in enumerate(dim)} if isinstance(
            dim, (tuple, list)) else {_dim(dim, x.ndim, what)}
    return _reshape(x, tuple(n for a, n in enumerate(x.shape) if not (a in dims and n == 1)))


# ---- permute ----------------------------------------------------------------------------

def permute(x: Tensor, *dims) -> Tensor:
    """x with its axes reordered: result axis i is x's axis dims[i] (tiles follow their axes)."""
    what = "permute"
    x = _shape_tensor(x, what)
    dims = _dims_arg(dims, what, "dims")
    if len(dims) != x.ndim:
        raise ValueError(f"{what}: dims {dims} has {len(dims)} entries for a {x.ndim}-d tensor")
    dims = tuple(_dim(d, x.ndim, what, f"dims[{i}]") for i, d in enumerate(dims))
    if sorted(dims) != list(range(x.ndim)):
        raise ValueError(f"{what}: dims {dims} is not a permutation of the axes (an axis repeats)")
    shape = tuple(x.shape[d] for d in dims)
    moved = [d for d in dims if x.shape[d] != 1]
    if moved == sorted(moved):  # only size-1 axes move: a reshape, a view
        return _reshape(x, shape)
    n = x.ndim
    spec = ((0,) * n, dims, (1,) * n, (0,) * n, (1,) * n, shape)
    return _regions([x], TensorTraits(shape, tuple(x.tiles[d] for d in dims)), [spec])


def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    what = "transpose"
    x = _shape_tensor(x, what)
    if x.ndim == 0:
        _dim(dim0, 0, what, "dim0"), _dim(dim1, 0, what, "dim1")
        return x
    a, b = _dim(dim0, x.ndim, what, "dim0"), _dim(dim1, x.ndim, what, "dim1")
    dims = list(range(x.ndim))
    dims[a], dims[b] = b, a
    return permute(x, dims)


def t(x: Tensor) -> Tensor:
    """The transpose of a 2-D tensor (0-d and 1-D tensors are returned as they are)."""
    x = _shape_tensor(x, "t")
    if x.ndim > 2:
        raise ValueError(f"t: expects a tensor with <= 2 dimensions, got {x.ndim} (shape {x.shape})")
    return x if x.ndim < 2 else transpose(x, 0, 1)


# ---- expand / broadcast -------------------------------------------------------------------

def _expanded_shape(x: Tensor, sizes, what: str) -> tuple[int, ...]:
    if len(sizes) < x.ndim:
        raise ValueError(f"{what}: the number of sizes ({len(sizes)}) must be >= the tensor's dimensions "
                         f"({x.ndim}); x has shape {x.shape}")
    lead = len(sizes) - x.ndim
    shape = []
    for d, s in enumerate(sizes):
        if d < lead:
            if s < 1:
                raise ValueError(f"{what}: size {s} is not allowed in a new leading dimension ({d})")
            shape.append(s)
            continue
        n = x.shape[d - lead]
        if s == -1 or s == n:
            shape.append(n)
        elif n == 1 and s >= 1:
            shape.append(s)
        else:
            raise ValueError(f"{what}: the size {s} at dimension {d} must match x's size {n} (x has shape "
                             f"{x.shape}) unless x's size there is 1")
    return tuple(shape)


def _default_tiles(x: Tensor, shape) -> tuple[int, ...]:
    """Kept axes keep x's tiles; new and expanded ones get min(size, DEFAULT_TILE)."""
    lead = len(shape) - x.ndim
    return tuple(x.tiles[d - lead] if d >= lead and x.shape[d - lead] == s else min(s, DEFAULT_TILE)
                 for d, s in enumerate(shape))


def expand(x: Tensor, *sizes) -> Tensor:
    """x repeated along its size-1 axes and new leading axes to ``sizes`` (-1 keeps a size)."""
    x = _shape_tensor(x, "expand")
    shape = _expanded_shape(x, _dims_arg(sizes, "expand", "sizes"), "expand")
    return expand_to(x, shape, _default_tiles(x, shape))


def broadcast_to(x: Tensor, shape) -> Tensor:
    x = _shape_tensor(x, "broadcast_to")
    shape = _expanded_shape(x, _dims_arg((shape,), "broadcast_to", "shape"), "broadcast_to")
    return expand_to(x, shape, _default_tiles(x, shape))


def expand_to(x: Tensor, shape, tiles) -> Tensor:
    """(internal) x broadcast to ``shape`` (x's shape must broadcast to it) with the tiling
    ``tiles``; x itself when nothing changes."""
    what = "expand_to"
    x = _shape_tensor(x, what)
    traits = TensorTraits(shape, tiles)
    shape = traits.shape
    if _expanded_shape(x, shape, what) != shape:
        raise ValueError(f"{what}: x of shape {x.shape} does not broadcast to {shape}")
    if traits == x.traits:
        return x
    if math.prod(shape) == x.numel():  # only size-1 axes added: a view (then a re-tiling)
        return retile(_reshape(x, shape), traits.tiles)
    lead = len(shape) - x.ndim
    xaxis = tuple(-1 if d < lead or (x.shape[d - lead] == 1 and s != 1) else d - lead
                  for d, s in enumerate(shape))
    n = len(shape)
    y = Tensor(traits, x.dtype)
    copy_regions(y, [(x, (0,) * x.ndim, xaxis, (1,) * n, (0,) * n, (1,) * n, shape)])
    return record("expand", y, (x,), shape=x.shape, tiles=x.tiles)


# expand's backward rule (a sum over the broadcast axes: sum_to) is reduce.py's, beside the sums.


# ---- getitem ----------------------------------------------------------------------------------

def getitem(x: Tensor, index) -> Tensor:
    """x[index] with ints (negative ok), slices with positive steps, None, Ellipsis and tuples
    of those: a copy of the selected region (a view when it only adds or drops size-1 axes)."""
    what = "getitem"
    x = _shape_tensor(x, what)
    items = index if isinstance(index, tuple) else (index,)
    # slice bounds may be one-element integer tensors, as torch's (x[i:i + 16], i from a tensor)
    items = tuple(slice(*(operator.index(p) if isinstance(p, Tensor) else p for p in (it.start, it.stop, it.step)))
                  if type(it) is slice and any(isinstance(p, Tensor) for p in (it.start, it.stop, it.step)) else it
                  for it in items)
    for it in items:
        if not (it is None or it is Ellipsis or type(it) is slice or type(it) is int
                or (isinstance(it, numbers.Integral) and not isinstance(it, bool))):
            raise TypeError(f"{what}: index {it!r} ({type(it).__name__}) is not supported; use ints, slices, "
                            "None and ...")
    if sum(it is Ellipsis for it in items) > 1:
        raise IndexError(f"{what}: an index can only have a single ellipsis ('...')")
    nreal = sum(it is not None and it is not Ellipsis for it in items)
    if nreal > x.ndim:
        raise IndexError(f"{what}: too many indices for a tensor of dimension {x.ndim} (index {index!r})")
    fill = (slice(None),) * (x.ndim - nreal)
    items = (tuple(y for it in items for y in (fill if it is Ellipsis else (it,)))
             if Ellipsis in items else items + fill)
    xstart, xaxis, step, count, tiles = [0] * x.ndim, [], [], [], []
    a = 0
    for it in items:
        if it is None:
            xaxis.append(-1), step.append(1), count.append(1), tiles.append(1)
            continue
        n = x.shape[a]
        if isinstance(it, slice):
            for part in (it.start, it.stop, it.step):
                if part is not None and type(part) is not int and (not isinstance(part, numbers.Integral)
                                                                   or isinstance(part, bool)):
                    raise TypeError(f"{what}: slice {it} along dimension {a} must have int or None bounds")
            if it.step is not None and it.step <= 0:
                raise ValueError(f"{what}: slice step must be greater than zero (got {it.step} along "
                                 f"dimension {a})")
            start, stop, st = it.indices(n)
            c = len(range(start, stop, st))
            if c == 0:
                raise ValueError(f"{what}: slice {it} selects nothing of dimension {a} (size {n}); tiletrain "
                                 "has no empty tensors")
            xstart[a] = start
            xaxis.append(a), step.append(st), count.append(c), tiles.append(min(x.tiles[a], c))
        else:
            i = int(it)
            if not -n <= i < n:
                raise IndexError(f"{what}: index {i} is out of bounds for dimension {a} with size {n}")
            xstart[a] = i % n
        a += 1
    shape = tuple(count)
    mapped = {ax: d for d, ax in enumerate(xaxis) if ax >= 0}
    if all(x.shape[ax] == 1 or (ax in mapped and xstart[ax] == 0 and step[mapped[ax]] == 1
                                and count[mapped[ax]] == x.shape[ax]) for ax in range(x.ndim)):
        return _reshape(x, shape)  # only size-1 axes added or dropped: a view
    n = len(shape)
    spec = (tuple(xstart), tuple(xaxis), tuple(step), (0,) * n, (1,) * n, shape)
    y = _tile_aligned(x, xstart, mapped, step, count, shape)
    if y is not None:
        return record("region", y, (x,), specs=[spec], traits=[x.traits])
    return _regions([x], TensorTraits(shape, tuple(tiles)), [spec])


def _tile_aligned(x: Tensor, xstart, mapped, step, count, shape) -> Tensor | None:
    """x's selected region as a view when it is whole tiles of x (slices from and to tile
    boundaries, ints along axes of tile 1), else None."""
    lo, hi = [], []
    for a, (n, tile) in enumerate(zip(x.shape, x.tiles)):
        d = mapped.get(a)
        c = 1 if d is None else count[d]
        stop = xstart[a] + (c - 1) * (1 if d is None else step[d]) + 1
        if (c > 1 and step[d] != 1) or xstart[a] % tile or (stop % tile and stop != n):
            return None
        lo.append(xstart[a] // tile)
        hi.append(-(-stop // tile))
    ptr = tile_view(x, lo, hi)
    if ptr is None:
        return None
    sub = tuple(min(h * t, n) - i * t for i, h, t, n in zip(lo, hi, x.tiles, x.shape))
    v = _view(x, ptr, sub, x.tiles)
    return v if sub == shape else _view(v, tensor_view(v, shape), shape, view_tiles(v, shape))


# ---- cat, stack, split, chunk -----------------------------------------------------------------

def _tensor_list(tensors, what: str) -> list[Tensor]:
    if not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{what}: tensors must be a list or tuple of tensors, got {type(tensors).__name__}")
    if not tensors:
        raise ValueError(f"{what}: expected a non-empty list of tensors")
    ts = [_shape_tensor(t, what, f"tensors[{i}]") for i, t in enumerate(tensors)]
    for i, t in enumerate(ts):
        if t.dtype != ts[0].dtype:
            raise TypeError(f"{what}: tensors[{i}] is {t.dtype} and tensors[0] is {ts[0].dtype}")
    return ts


@dim_alias
def cat(tensors, dim: int = 0) -> Tensor:
    """The tensors concatenated along ``dim`` (same shapes elsewhere, any tilings); tiled like
    the first."""
    what = "cat"
    ts = _tensor_list(tensors, what)
    x0 = ts[0]
    if x0.ndim == 0:
        raise ValueError(f"{what}: zero-dimensional tensors cannot be concatenated")
    d = _dim(dim, x0.ndim, what)
    for i, t in enumerate(ts):
        if t.ndim != x0.ndim or t.shape[:d] + t.shape[d + 1:] != x0.shape[:d] + x0.shape[d + 1:]:
            raise ValueError(f"{what}: sizes must match except in dimension {d}: tensors[0] has shape "
                             f"{x0.shape}, tensors[{i}] {t.shape}")
    n = x0.ndim
    specs, offset = [], 0
    for t in ts:
        specs.append(((0,) * n, tuple(range(n)), (1,) * n, tuple(offset if a == d else 0 for a in range(n)),
                      (1,) * n, t.shape))
        offset += t.shape[d]
    shape = x0.shape[:d] + (offset,) + x0.shape[d + 1:]
    return _regions(ts, TensorTraits(shape, x0.tiles), specs)


@dim_alias
def stack(tensors, dim: int = 0) -> Tensor:
    """The tensors (one shape, any tilings) stacked along a new axis ``dim``, tiled like the
    first tensor and along the new axis as _stack_tile says."""
    what = "stack"
    ts = _tensor_list(tensors, what)
    x0 = ts[0]
    d = _dim(dim, x0.ndim, what, extra=1 if x0.ndim else 0)
    for i, t in enumerate(ts):
        if t.shape != x0.shape:
            raise ValueError(f"{what}: expects each tensor to be of equal shape: tensors[0] is {x0.shape}, "
                             f"tensors[{i}] {t.shape}")
    n = x0.ndim + 1
    xaxis = tuple(range(d)) + (-1,) + tuple(range(d, x0.ndim))
    shape = x0.shape[:d] + (len(ts),) + x0.shape[d:]
    specs = [((0,) * x0.ndim, xaxis, (1,) * n, tuple(i if a == d else 0 for a in range(n)), (1,) * n,
              x0.shape[:d] + (1,) + x0.shape[d:]) for i in range(len(ts))]
    tiles = x0.tiles[:d] + (_stack_tile(len(ts), x0.tiles, x0.shape),) + x0.tiles[d:]
    return _regions(ts, TensorTraits(shape, tiles), specs)


MIN_STACK_SHARE = DEFAULT_TILE // 2   # elements per worker below which stack does not split a batch


def _stack_tile(n: int, tiles, shape) -> int:
    """stack's tile along the new axis of ``n`` items of ``shape`` tiled ``tiles``: as many
    items as fit in the volume of a default 2-D tile (DEFAULT_TILE**2 elements), but no more
    than leave one tile for each worker (ceil(n / workers)), so that a batch of small samples
    is a few tiles: the ops that follow make one task per tile.  A batch whose share per
    worker would hold fewer than MIN_STACK_SHARE elements (a few short rows of token ids)
    stays one tile: the tasks of its pieces would cost more to submit than they compute.
    The threshold is measured, not derived (benchmarks/ported_nanogpt.py, 2 workers, 2
    cores): 8 rows of 32 ids split made the small program's step slower (0.68-0.85x PyTorch
    against 0.85-1.00x unsplit), 8 rows of 64 ids unsplit made the medium one's slower
    (0.94-0.98x against 1.00-1.09x split)."""
    fit = DEFAULT_TILE * DEFAULT_TILE // math.prod(tiles)
    share = -(-n // max(1, nworkers()))
    if share * math.prod(shape) < MIN_STACK_SHARE:
        share = n
    return max(1, min(fit, share))


def _narrow(x: Tensor, d: int, start: int, length: int) -> Tensor:
    return getitem(x, (slice(None),) * d + (slice(start, start + length),))


def split(x: Tensor, split_size_or_sections, dim: int = 0) -> tuple[Tensor, ...]:
    """Pieces of x along ``dim``: of ``split_size`` each (the last may be smaller), or of the
    listed sizes (which must add up to the dimension)."""
    what = "split"
    x = _shape_tensor(x, what)
    if x.ndim == 0:
        raise ValueError(f"{what}: a zero-dimensional tensor cannot be split")
    d = _dim(dim, x.ndim, what)
    n = x.shape[d]
    if isinstance(split_size_or_sections, (list, tuple)):
        sizes = [_int(s, what, f"split_size_or_sections[{i}]") for i, s in enumerate(split_size_or_sections)]
        if sum(sizes) != n or any(s < 1 for s in sizes):
            raise ValueError(f"{what}: sections {tuple(sizes)} must be >= 1 and add up to dimension {d}'s "
                             f"size {n}")
    else:
        size = _int(split_size_or_sections, what, "split_size_or_sections")
        if size < 1:
            raise ValueError(f"{what}: split_size must be >= 1, got {size}")
        sizes = [min(size, n - s) for s in range(0, n, size)]
    starts = np.cumsum([0] + sizes[:-1]).tolist()
    pieces = tuple(_narrow(x, d, s, c) for s, c in zip(starts, sizes))
    nodes = [p._node for p in pieces]
    if len(nodes) > 1 and all(n is not None and n.op == "region" for n in nodes) and \
            all(s % x.tiles[d] == 0 for s in starts):
        # the pieces' gradients are disjoint parts of x's, whole tiles of it: the engine writes
        # each into x's gradient (a PartialGradient), no zero-padded tensor per piece and no
        # sum of them
        split_ctx = (tuple(n.ctx["specs"][0] for n in nodes), tuple(p.traits for p in pieces))
        for i, n in enumerate(nodes):
            n.ctx.update(split=split_ctx, part=i)
    return pieces


def chunk(x: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """x split into ``chunks`` pieces of ceil(size / chunks) along ``dim`` (maybe fewer pieces)."""
    what = "chunk"
    x = _shape_tensor(x, what)
    chunks = _int(chunks, what, "chunks")
    if chunks < 1:
        raise ValueError(f"{what}: chunks must be >= 1, got {chunks}")
    if x.ndim == 0:
        raise ValueError(f"{what}: a zero-dimensional tensor cannot be chunked")
    d = _dim(dim, x.ndim, what)
    return split(x, -(-x.shape[d] // chunks), d)


__all__ = ["retile", "reshape", "view", "flatten", "unsqueeze", "squeeze", "permute", "transpose", "t",
           "expand", "broadcast_to", "getitem", "cat", "stack", "split", "chunk"]
