"""Convolution, pooling and batch normalisation over NC(D)HW activations, as torch.nn.functional.

Activations may be tiled along the batch axis and along any spatial axis (D, H, W); the
channel axis is kept in one tile (an activation tiled across channels is re-tiled first,
ops.shape.retile), and weights, biases and per-channel statistics are single tiles.  Every
op is one C call (csrc/expand_conv.c, ``run_batch``): conv and pools submit one task per
output tile, which reads the window of the input it needs -- its own input tile, or the
halo slabs of the neighbouring tiles copied next to it (sub-tile boxes; under MPI a slab
owned by another rank is cut out there, so only the slab moves) -- and backward adds each
window's gradient back into the tiles it overlaps.  The output of a spatially tiled input is
tiled the same way (as many tiles per axis where the output is long enough), so under a
spatial distribution (tiletrain.distribution.Spatial) every tile's work stays on its rank.
conv1d/2d/3d and the 1/2/3-d pools share one N-d implementation whose kernels always see
3-D spatial geometry (leading unit axes for 1-D and 2-D).

conv: per batch tile, im2col of every image and group + one BLAS gemm with the weight;
backward: dx by gemm + col2im per tile, dw/db accumulated over the batch tiles in order.
batch_norm: per-channel mean and M2 merged over the batch tiles (Chan), running statistics
updated in place with the unbiased variance (as torch), then one normalising pass; its
backward sums dy and dy * xhat per channel, then one pass for dx.  Batch norm takes any
batch/spatial tiling: the statistics are reduced over all tiles (under MPI each rank merges
its own tiles, then the ranks' partials are merged on the statistics' owner).

Bad input is rejected before anything is submitted, among it a spatially split input whose
tiles are smaller than the halo the kernel reaches into its neighbours."""
from __future__ import annotations

import numbers

import numpy as np

from ..runtime.kernels import run_batch, run_map
from ..tensors import Tensor, TensorTraits, from_numpy
from .autograd import backward_rule, composite_grads, double_backward_rule, record
from .basic import _float_tensor
from .creation import full, zeros
from .index import gather, scatter
from .reduce import mean as _mean, sum as _sum
from .shape import cat, reshape, retile, squeeze, unsqueeze

_SPATIAL = {1: "L", 2: "H, W", 3: "D, H, W"}


def _layout(t: Tensor, tiles: tuple) -> Tensor:
    """t tiled as these kernels need (a differentiable re-tiling copy when it is not)."""
    return retile(t, tiles)


def _act_layout(x: Tensor) -> Tensor:
    """x with its channel axis in one tile (its batch and spatial tiling kept)."""
    return _layout(x, (x.tiles[0], x.shape[1]) + x.tiles[2:])


def _out_tiles(x: Tensor, o: tuple) -> tuple:
    """Tiles of an output of spatial shape o: as many along each axis as the input has, where
    the output is long enough (the tasks then line up with the input tiles)."""
    return tuple(oi if g == 1 else -(-oi // min(g, oi)) for oi, g in zip(o, x.grid[2:]))


def _check_halo(x: Tensor, span, p, what: str) -> None:
    """A spatially split axis whose tiles are smaller than the halo a window reaches into its
    neighbours (p before, span - 1 - p after) is rejected: halos come from the adjacent tiles."""
    nsp = x.ndim - 2
    for j in range(nsp):
        g, t = x.grid[2 + j], x.tiles[2 + j]
        halo = max(p[j], span[j] - 1 - p[j])
        if g > 1 and t < halo:
            axis = _SPATIAL[nsp].split(", ")[j]
            raise ValueError(f"{what}: input tiles of {t} along {axis} (axis {2 + j}) are smaller than the halo of "
                             f"{halo} the kernel reaches into each neighbouring tile; use tiles of at least {halo} "
                             f"along {axis} (or one tile)")


def _whole(t: Tensor | None) -> Tensor | None:
    return None if t is None else _layout(t, t.shape)


def _ntuple(v, n: int, what: str, name: str, minimum: int) -> tuple[int, ...]:
    vals = (v,) * n if isinstance(v, numbers.Integral) and not isinstance(v, bool) else v
    if not isinstance(vals, (tuple, list)) or len(vals) != n or not all(
            isinstance(e, numbers.Integral) and not isinstance(e, bool) for e in vals):
        raise TypeError(f"{what}: {name} must be an int or a tuple of {n} ints, got {v!r}")
    if any(e < minimum for e in vals):
        raise ValueError(f"{what}: {name} must be >= {minimum}, got {v!r}")
    return tuple(int(e) for e in vals)


def _geom(l, o, k, s, p, d) -> dict:
    """The kernels' 3-D geometry: leading unit axes for 1-D and 2-D."""
    pad = 3 - len(l)
    g = {}
    for name, vals, fill in (("l", l, 1), ("o", o, 1), ("k", k, 1), ("s", s, 1), ("p", p, 0), ("d", d, 1)):
        vals = (fill,) * pad + tuple(vals)
        g.update({f"{name}{j}": int(vals[j]) for j in range(3)})
    return g


def _input(x, nsp: int, what: str) -> tuple[Tensor, bool]:
    """(input with a batch axis, whether it came without one: (C, *spatial), as torch allows)."""
    x = _float_tensor(x, what, "input")
    if x.ndim not in (nsp + 1, nsp + 2):
        raise ValueError(f"{what}: input must be {nsp + 2}-D (N, C, {_SPATIAL[nsp]}) or {nsp + 1}-D (C, "
                         f"{_SPATIAL[nsp]}), got shape {x.shape}")
    return (unsqueeze(x, 0), True) if x.ndim == nsp + 1 else (x, False)   # a view: nothing submitted


def _vector(t, n: int, x: Tensor, what: str, name: str) -> Tensor | None:
    """None or a (n,) tensor of x's dtype (bias, batch-norm weight and statistics), as given."""
    if t is None:
        return None
    t = _float_tensor(t, what, name)
    if t.shape != (n,):
        raise ValueError(f"{what}: {name} must have shape ({n},), got {t.shape}")
    if t.dtype != x.dtype:
        raise TypeError(f"{what}: {name} is {t.dtype} but input is {x.dtype}")
    return t


# -- convolution ---------------------------------------------------------------------------

def _conv(nsp: int, input, weight, bias, stride, padding, dilation, groups) -> Tensor:
    what = f"conv{nsp}d"
    x, unbatched = _input(input, nsp, what)
    w = _float_tensor(weight, what, "weight")
    if w.ndim != nsp + 2:
        raise ValueError(f"{what}: weight must be {nsp + 2}-D (C_out, C_in / groups, kernel...), "
                         f"got shape {w.shape}")
    if w.dtype != x.dtype:
        raise TypeError(f"{what}: weight is {w.dtype} but input is {x.dtype}")
    if not isinstance(groups, numbers.Integral) or isinstance(groups, bool) or groups < 1:
        raise ValueError(f"{what}: groups must be a positive int, got {groups!r}")
    cout, cg, k = w.shape[0], w.shape[1], w.shape[2:]
    if cout % groups:
        raise ValueError(f"{what}: out_channels ({cout}, weight.shape[0]) must be divisible by groups "
                         f"({groups})")
    if x.shape[1] != cg * groups:
        raise ValueError(f"{what}: input has {x.shape[1]} channels but weight expects {cg * groups} "
                         f"(weight.shape[1] = {cg} times groups = {groups})")
    bias = _whole(_vector(bias, cout, x, what, "bias"))
    s = _ntuple(stride, nsp, what, "stride", 1)
    d = _ntuple(dilation, nsp, what, "dilation", 1)
    l = x.shape[2:]
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise ValueError(f"{what}: padding must be 'same', 'valid', an int or a tuple, got {padding!r}")
        if padding == "same" and any(si != 1 for si in s):
            raise ValueError(f"{what}: padding='same' is not supported for strided convolutions")
        total = [di * (ki - 1) if padding == "same" else 0 for di, ki in zip(d, k)]
        p = tuple(t // 2 for t in total)   # torch pads the odd extra element on the right
    else:
        p = _ntuple(padding, nsp, what, "padding", 0)
        total = [2 * pi for pi in p]
    span = [di * (ki - 1) + 1 for di, ki in zip(d, k)]
    if any(li + t < e for li, t, e in zip(l, total, span)):
        raise ValueError(f"{what}: the (dilated) kernel {tuple(span)} is larger than the padded input "
                         f"{tuple(li + t for li, t in zip(l, total))}")
    o = tuple((li + t - e) // si + 1 for li, t, e, si in zip(l, total, span, s))
    x = _act_layout(x)
    _check_halo(x, span, p, what)
    w = _whole(w)
    args = dict(cin=x.shape[1], cout=cout, groups=int(groups), **_geom(l, o, k, s, p, d))
    y = Tensor(TensorTraits((x.shape[0], cout) + o, (x.tiles[0], cout) + _out_tiles(x, o)), x.dtype)
    b = bias if bias is not None else full((cout,), 0.0, tiles=(cout,), dtype=x.dtype)
    run_batch("conv_fwd", [x, y], [w, b], **args)
    y = record("conv", y, (x, w, bias), saved=(x, w), args=args)
    return squeeze(y, 0) if unbatched else y


@backward_rule("conv")
def _conv_bwd(node, g):
    x, w = node.saved
    args = node.ctx["args"]
    need_x, need_w, need_b = (t is not None for t in node.inputs)
    dx = dw = db = None
    if need_x:
        dx = Tensor(x.traits, x.dtype)
        run_batch("conv_bwd_x", [g, dx], [w], **args)
    if need_w or need_b:
        dw, db = Tensor(w.traits, w.dtype), Tensor(TensorTraits((w.shape[0],)), w.dtype)
        run_batch("conv_bwd_w", [x, g], [dw, db], reduce=True, **args)
    return dx, (dw if need_w else None), (db if need_b else None)


# Double backward.  conv is bilinear in (x, w): its input gradient conv_t(g, w) and weight
# gradient conv_w(x, g) are bilinear too, and the three are each other's adjoints, so each
# one's gradients are recorded calls of the other two (every order differentiable).
def _conv_op(x: Tensor, w: Tensor, args: dict, traits: TensorTraits) -> Tensor:
    """conv(x, w) without bias into ``traits``, recorded."""
    y = Tensor(traits, x.dtype)
    run_batch("conv_fwd", [x, y], [w, full((w.shape[0],), 0.0, tiles=(w.shape[0],), dtype=x.dtype)], **args)
    return record("conv", y, (x, w, None), saved=(x, w), args=args)


def _conv_t(g: Tensor, w: Tensor, args: dict, traits: TensorTraits) -> Tensor:
    """conv's input gradient for output gradient g (x's ``traits``), recorded."""
    dx = Tensor(traits, g.dtype)
    run_batch("conv_bwd_x", [g, dx], [w], **args)
    return record("conv_t", dx, (g, w), saved=(g, w), args=args)


def _conv_w(x: Tensor, g: Tensor, args: dict, traits: TensorTraits) -> Tensor:
    """conv's weight gradient for input x and output gradient g (w's ``traits``), recorded."""
    dw, db = Tensor(traits, x.dtype), Tensor(TensorTraits((traits.shape[0],)), x.dtype)
    run_batch("conv_bwd_w", [x, g], [dw, db], reduce=True, **args)
    return record("conv_w", dw, (x, g), saved=(x, g), args=args)


@double_backward_rule("conv")
def _conv_double(node, g):
    x, w = node.saved
    args = node.ctx["args"]
    need_x, need_w, need_b = (t is not None for t in node.inputs)
    return (_conv_t(g, w, args, x.traits) if need_x else None, _conv_w(x, g, args, w.traits) if need_w else None,
            _sum(g, (0,) + tuple(range(2, g.ndim))) if need_b else None)


@backward_rule("conv_t", differentiable=True)
def _conv_t_bwd(node, h):
    g, w = node.saved
    args = node.ctx["args"]
    return (_conv_op(h, w, args, g.traits) if node.inputs[0] is not None else None,
            _conv_w(h, g, args, w.traits) if node.inputs[1] is not None else None)


@backward_rule("conv_w", differentiable=True)
def _conv_w_bwd(node, h):
    x, g = node.saved
    args = node.ctx["args"]
    return (_conv_t(g, h, args, x.traits) if node.inputs[0] is not None else None,
            _conv_op(x, h, args, g.traits) if node.inputs[1] is not None else None)


def _conv_transpose(nsp: int, input, weight, bias, stride, padding, output_padding, groups, dilation) -> Tensor:
    """torch's transposed convolution: the input gradient of the convolution whose weight it
    shares ((C_in, C_out / groups, kernel...)), recorded as conv_t (so its gradients, and theirs,
    are the convolution's own)."""
    what = f"conv_transpose{nsp}d"
    x, unbatched = _input(input, nsp, what)
    w = _float_tensor(weight, what, "weight")
    if w.ndim != nsp + 2:
        raise ValueError(f"{what}: weight must be {nsp + 2}-D (C_in, C_out / groups, kernel...), got shape {w.shape}")
    if w.dtype != x.dtype:
        raise TypeError(f"{what}: weight is {w.dtype} but input is {x.dtype}")
    if not isinstance(groups, numbers.Integral) or isinstance(groups, bool) or groups < 1:
        raise ValueError(f"{what}: groups must be a positive int, got {groups!r}")
    cin, cg, k = w.shape[0], w.shape[1], w.shape[2:]
    if x.shape[1] != cin or cin % groups:
        raise ValueError(f"{what}: input has {x.shape[1]} channels, weight.shape[0] is {cin} (divisible by groups "
                         f"{groups} and equal to the input's channels)")
    cout = cg * groups
    bias = _vector(bias, cout, x, what, "bias")
    s = _ntuple(stride, nsp, what, "stride", 1)
    p = _ntuple(padding, nsp, what, "padding", 0)
    op = _ntuple(output_padding, nsp, what, "output_padding", 0)
    d = _ntuple(dilation, nsp, what, "dilation", 1)
    if any(o >= max(si, di) for o, si, di in zip(op, s, d)):
        raise ValueError(f"{what}: output padding must be smaller than either stride or dilation, got "
                         f"output_padding={op}, stride={s}, dilation={d}")
    lin = x.shape[2:]
    lout = tuple((li - 1) * si - 2 * pi + di * (ki - 1) + oi + 1 for li, si, pi, di, ki, oi in zip(lin, s, p, d, k, op))
    if any(lo < 1 for lo in lout):
        raise ValueError(f"{what}: the output size {lout} is not positive")
    x = _layout(x, (x.tiles[0], cin) + tuple(lin))
    args = dict(cin=cout, cout=cin, groups=int(groups), **_geom(lout, lin, k, s, p, d))
    y = _conv_t(x, _whole(w), args, TensorTraits((x.shape[0], cout) + lout, (x.tiles[0], cout) + lout))
    if bias is not None:
        from .elementwise import add
        y = add(y, reshape(bias, (cout,) + (1,) * nsp))
    return squeeze(y, 0) if unbatched else y


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1) -> Tensor:
    """torch.nn.functional.conv_transpose1d: input (N, C_in, L), weight (C_in, C_out / groups, k)."""
    return _conv_transpose(1, input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1) -> Tensor:
    """torch.nn.functional.conv_transpose2d: input (N, C_in, H, W), weight (C_in, C_out / groups, kH, kW)."""
    return _conv_transpose(2, input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1) -> Tensor:
    """torch.nn.functional.conv_transpose3d: input (N, C_in, D, H, W)."""
    return _conv_transpose(3, input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    """torch.nn.functional.conv1d: input (N, C_in, L), weight (C_out, C_in / groups, k)."""
    return _conv(1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    """torch.nn.functional.conv2d: input (N, C_in, H, W), weight (C_out, C_in / groups, kh, kw)."""
    return _conv(2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    """torch.nn.functional.conv3d: input (N, C_in, D, H, W), weight (C_out, C_in / groups, kd, kh, kw)."""
    return _conv(3, input, weight, bias, stride, padding, dilation, groups)


# -- pooling --------------------------------------------------------------------------------

def _pool_geometry(what: str, nsp: int, kernel_size, stride, padding, dilation):
    """A pooling's kernel, stride (None or empty: the kernel, as torch), padding and dilation,
    each nsp ints."""
    k = _ntuple(kernel_size, nsp, what, "kernel_size", 1)
    s = k if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0) else \
        _ntuple(stride, nsp, what, "stride", 1)
    return k, s, _ntuple(padding, nsp, what, "padding", 0), _ntuple(dilation, nsp, what, "dilation", 1)


def _pool(kind: str, nsp: int, x, kernel_size, stride, padding, dilation, ceil_mode, **extra) -> Tensor:
    what = f"{kind}_pool{nsp}d"
    x, unbatched = _input(x, nsp, what)
    k, s, p, d = _pool_geometry(what, nsp, kernel_size, stride, padding, dilation)
    if not isinstance(ceil_mode, bool):
        raise TypeError(f"{what}: ceil_mode must be a bool, got {type(ceil_mode).__name__}")
    span = [di * (ki - 1) + 1 for di, ki in zip(d, k)]
    # torch: pad at most half of the (effective) kernel
    if any(pi > (e if kind == "max" else ki) // 2 for pi, e, ki in zip(p, span, k)):
        raise ValueError(f"{what}: padding {p} must be at most half of the kernel size {k}")
    l = x.shape[2:]
    o = []
    for li, pi, e, si in zip(l, p, span, s):
        num = li + 2 * pi - e
        oi = (-(-num // si) if ceil_mode else num // si) + 1
        if ceil_mode and (oi - 1) * si >= li + pi:   # the last window must start in the input or left padding
            oi -= 1
        if oi < 1:
            raise ValueError(f"{what}: the (dilated) kernel {tuple(span)} is larger than the padded input "
                             f"{tuple(lj + 2 * pj for lj, pj in zip(l, p))}")
        o.append(oi)
    o = tuple(o)
    x = _act_layout(x)
    _check_halo(x, span, p, what)
    args = dict(c=x.shape[1], **_geom(l, o, k, s, p, d), **extra)
    if kind == "avg":   # where the padded input ends (the expander shifts it into each window)
        args.update({f"e{j}": args[f"l{j}"] + args[f"p{j}"] for j in range(3)})
    y = Tensor(TensorTraits(x.shape[:2] + o, (x.tiles[0], x.shape[1]) + _out_tiles(x, o)), x.dtype)
    run_batch(f"{kind}_pool_fwd", [x, y], **args)
    y = record(f"{kind}_pool", y, (x,), saved=(x,), args=args)
    return squeeze(y, 0) if unbatched else y


@backward_rule("max_pool")
def _max_pool_bwd(node, g):
    (x,) = node.saved
    dx = Tensor(x.traits, x.dtype)
    run_batch("max_pool_bwd", [x, g, dx], **node.ctx["args"])
    return (dx,)


# Double backward: max pooling's gradient max_pool_t(g) scatters g to each window's maximum
# of x (linear in g; x only picks the positions: no gradient for x).  Its adjoint reads h at
# those positions: per kernel offset, the strided slice of h each window reads there, kept
# where that offset holds the window's first maximum (masks of x: constants), summed.
@double_backward_rule("max_pool")
def _max_pool_double(node, g):
    (x,) = node.saved
    dx = Tensor(x.traits, x.dtype)
    run_batch("max_pool_bwd", [x, g, dx], **node.ctx["args"])
    return (record("max_pool_t", dx, (g,), saved=(x,), args=node.ctx["args"], traits=g.traits),)


@backward_rule("max_pool_t", differentiable=True)
def _max_pool_t_bwd(node, h):
    from itertools import product

    from .autograd import no_grad
    from .elementwise import add, eq, mul, where
    (x,) = node.saved
    args, traits = node.ctx["args"], node.ctx["traits"]
    nsp = x.ndim - 2
    geo = [tuple(args[f"{n}{j}"] for n in "loskpd") for j in range(3 - nsp, 3)]
    with no_grad():
        y = Tensor(traits, x.dtype)
        run_batch("max_pool_fwd", [x, y], **args)
    out, taken = None, None
    for ks in product(*(range(k) for _, _, _, k, _, _ in geo)):
        reads = []   # per axis: the windows [lo, hi) whose position at this offset is inside x
        for (l, o, s, _, p, d), kj in zip(geo, ks):
            off = p - kj * d   # the input position of window w: w * s - off
            lo, hi = max(0, -(-off // s)), min(o, (l - 1 + off) // s + 1)
            reads.append((lo, hi, slice(lo * s - off, (hi - 1) * s - off + 1, s)))
        if any(hi <= lo for lo, hi, _ in reads):
            continue
        index = (slice(None), slice(None)) + tuple(sl for _, _, sl in reads)
        with no_grad():   # where this offset holds the window's first maximum (as the kernel picks)
            at = where(eq(_pad_windows(x[index], reads, geo, float("-inf")), y),
                       full(y.shape, 1.0, tiles=y.tiles, dtype=y.dtype), 0.0)
            first = at if taken is None else mul(at, add(mul(taken, -1.0), 1.0))
            taken = first if taken is None else add(taken, first)
        term = mul(_pad_windows(h[index], reads, geo, 0.0), first)
        out = term if out is None else add(out, term)
    return (retile(out, traits.tiles),)


def _pad_windows(t: Tensor, reads, geo, value: float) -> Tensor:
    """t (windows [lo, hi) per spatial axis) padded with ``value`` to every window (recorded)."""
    for j, ((lo, hi, _), (_, o, *_)) in enumerate(zip(reads, geo)):
        axis = 2 + j
        parts = [full(t.shape[:axis] + (n,) + t.shape[axis + 1:], value, dtype=t.dtype) if n else None
                 for n in (lo, o - hi)]
        if parts[0] is not None or parts[1] is not None:
            t = cat([q for q in (parts[0], t, parts[1]) if q is not None], axis)
    return t


@backward_rule("avg_pool")
def _avg_pool_bwd(node, g):
    (x,) = node.saved
    dx = Tensor(x.traits, x.dtype)
    run_batch("avg_pool_bwd", [g, dx], **node.ctx["args"])
    return (dx,)


# Double backward: avg pooling is linear, its gradient avg_pool_t(g) is its adjoint, and the
# adjoint's gradient is the pool again (recorded).
@double_backward_rule("avg_pool")
def _avg_pool_double(node, g):
    (x,) = node.saved
    dx = Tensor(x.traits, x.dtype)
    run_batch("avg_pool_bwd", [g, dx], **node.ctx["args"])
    return (record("avg_pool_t", dx, (g,), args=node.ctx["args"], traits=g.traits),)


@backward_rule("avg_pool_t", differentiable=True)
def _avg_pool_t_bwd(node, h):
    y = Tensor(node.ctx["traits"], h.dtype)
    run_batch("avg_pool_fwd", [h, y], **node.ctx["args"])
    return (record("avg_pool", y, (h,), saved=(h,), args=node.ctx["args"]),)


def _max(nsp, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    y = _pool("max", nsp, input, kernel_size, stride, padding, dilation, ceil_mode)
    if not return_indices:
        return y
    return y, _max_indices(nsp, input, y, kernel_size, stride, padding, dilation)


def _windows(a: np.ndarray, nsp: int, o, k, s, d) -> np.ndarray:
    """The pooling windows of a (padded) array: (..., *o, prod(k)), window-major as torch scans."""
    span = tuple(di * (ki - 1) + 1 for di, ki in zip(d, k))
    axes = tuple(range(a.ndim - nsp, a.ndim))
    w = np.lib.stride_tricks.sliding_window_view(a, span, axis=axes)
    lead = (slice(None),) * (a.ndim - nsp)
    w = w[lead + tuple(slice(0, (oi - 1) * si + 1, si) for oi, si in zip(o, s)) + tuple(slice(None, None, di)
                                                                                      for di in d)]
    return w.reshape(w.shape[:a.ndim] + (-1,))


def _max_indices(nsp, input, y, kernel_size, stride, padding, dilation) -> Tensor:
    """torch's indices of max pooling: per window, the flat position (within its channel's
    spatial volume) of the first maximum in scan order, or of the last NaN; never a padded
    position.  Found on the host from the input's values (the call waits for them)."""
    what = f"max_pool{nsp}d"
    x, unbatched = _input(input, nsp, what)
    k, s, p, d = _pool_geometry(what, nsp, kernel_size, stride, padding, dilation)
    a = _host_values(x)
    l, o = a.shape[2:], y.shape[-nsp:]
    right = [max(0, (oi - 1) * si + di * (ki - 1) + 1 - li - pi) for li, oi, si, ki, pi, di in zip(l, o, s, k, p, d)]
    widths = [(pi, ri) for pi, ri in zip(p, right)]
    wa = _windows(np.pad(a, [(0, 0), (0, 0)] + widths, constant_values=-np.inf), nsp, o, k, s, d)
    wp = _windows(np.pad(np.arange(int(np.prod(l))).reshape(l), widths, constant_values=-1), nsp, o, k, s, d)
    idx = _window_argmax(wa, wp)
    return from_numpy(np.ascontiguousarray(idx[0] if unbatched else idx))


def _host_values(x: Tensor) -> np.ndarray:
    """x's values in float64 for finding maxima, -inf raised to the lowest finite value: above
    the -inf that marks a window's padding (never picked)."""
    a = x.numpy(force=True).astype(np.float64)
    a[a == -np.inf] = -np.finfo(np.float64).max
    return a


def _window_argmax(wa: np.ndarray, wp: np.ndarray) -> np.ndarray:
    """torch's pick in each window of ``wa`` (..., window: values in scan order, -inf at
    padding): the first maximum, or the last NaN; its flat position from ``wp`` (broadcast
    to wa's shape), as int64."""
    first = np.argmax(wa, axis=-1)
    nan = np.isnan(wa)
    last_nan = wa.shape[-1] - 1 - np.argmax(nan[..., ::-1], axis=-1)
    pick = np.where(nan.any(axis=-1), last_nan, first)
    return np.take_along_axis(np.broadcast_to(wp, wa.shape), pick[..., None], -1)[..., 0].astype(np.int64)


def _unpool_size(what: str, nsp: int, l, k, s, p, output_size) -> tuple[int, ...]:
    """max_unpool's output size: (l - 1) * stride - 2 * padding + kernel, or output_size (its
    last nsp entries), which must lie strictly within a stride of that, as torch checks."""
    default = tuple((li - 1) * si - 2 * pi + ki for li, si, pi, ki in zip(l, s, p, k))
    if output_size is None:
        return default
    given = output_size[2:] if len(output_size) == nsp + 2 else output_size
    size = tuple(given)
    if len(size) != nsp or not all(isinstance(e, numbers.Integral) and not isinstance(e, bool) for e in size):
        raise ValueError(f"{what}: output_size should be a sequence of {nsp} or {nsp + 2} ints, got {output_size!r}")
    for j, (e, dj, sj) in enumerate(zip(size, default, s)):
        if not dj - sj < e < dj + sj:
            raise ValueError(f'invalid output_size "{given}" (dim {j} must be between {dj - sj} and {dj + sj})')
    return tuple(int(e) for e in size)


def _max_unpool(nsp: int, input, indices, kernel_size, stride, padding, output_size) -> Tensor:
    """torch.nn.functional.max_unpool: zeros of the output size with each input value written
    at its index (flat within its channel's output volume; a repeated index: the last one in
    the input's order wins); the gradient gathers at the indices (scatter's, recorded)."""
    what = f"max_unpool{nsp}d"
    x, unbatched = _input(input, nsp, what)
    if not isinstance(indices, Tensor) or indices.dtype != np.int64:
        raise TypeError(f"{what}: indices must be an int64 tensor, got "
                        f"{indices.dtype if isinstance(indices, Tensor) else type(indices).__name__}")
    if tuple(indices.shape) != tuple(input.shape):
        raise ValueError(f"{what}: indices have shape {indices.shape}, the input {input.shape}: they must match")
    k = _ntuple(kernel_size, nsp, what, "kernel_size", 1)
    s = k if stride is None else _ntuple(stride, nsp, what, "stride", 1)
    p = _ntuple(padding, nsp, what, "padding", 0)
    o = _unpool_size(what, nsp, x.shape[2:], k, s, p, output_size)
    n, c, m, vol = x.shape[0], x.shape[1], int(np.prod(x.shape[2:])), int(np.prod(o))
    ia = indices.numpy(force=True).reshape(n, c, m)
    bad = (ia < 0) | (ia >= vol)
    if bad.any():
        raise RuntimeError(f"Found an invalid max index: {int(ia[bad][0])} (output volumes are of size "
                           f"{'x'.join(map(str, o))}")
    flat = reshape(x, (n, c, m))
    y = scatter(zeros((n, c, vol), dtype=x.dtype), 2, from_numpy(np.ascontiguousarray(ia)), flat)
    y = reshape(y, (n, c) + o)
    return squeeze(y, 0) if unbatched else y


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:
    """torch.nn.functional.max_unpool1d: the inverse of max_pool1d(return_indices=True)."""
    return _max_unpool(1, input, indices, kernel_size, stride, padding, output_size)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:
    """torch.nn.functional.max_unpool2d: the inverse of max_pool2d(return_indices=True)."""
    return _max_unpool(2, input, indices, kernel_size, stride, padding, output_size)


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:
    """torch.nn.functional.max_unpool3d: the inverse of max_pool3d(return_indices=True)."""
    return _max_unpool(3, input, indices, kernel_size, stride, padding, output_size)


def _avg(nsp, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    what = f"avg_pool{nsp}d"
    if not isinstance(count_include_pad, bool):
        raise TypeError(f"{what}: count_include_pad must be a bool, got {type(count_include_pad).__name__}")
    div = 0.0
    if divisor_override is not None:
        if not isinstance(divisor_override, numbers.Integral) or isinstance(divisor_override, bool) \
                or divisor_override == 0:
            raise ValueError(f"{what}: divisor_override must be a non-zero int or None, "
                             f"got {divisor_override!r}")
        div = float(divisor_override)
        if div < 0:
            raise ValueError(f"{what}: divisor_override must be positive, got {divisor_override!r}")
    return _pool("avg", nsp, input, kernel_size, stride, padding, 1, ceil_mode, cip=int(count_include_pad),
                 divisor=div)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """torch.nn.functional.max_pool1d on (N, C, L); the gradient goes to the first maximum."""
    return _max(1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """torch.nn.functional.max_pool2d on (N, C, H, W); the gradient goes to the first maximum."""
    return _max(2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """torch.nn.functional.max_pool3d on (N, C, D, H, W); the gradient goes to the first maximum."""
    return _max(3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """torch.nn.functional.avg_pool1d on (N, C, L)."""
    return _avg(1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """torch.nn.functional.avg_pool2d on (N, C, H, W)."""
    return _avg(2, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """torch.nn.functional.avg_pool3d on (N, C, D, H, W)."""
    return _avg(3, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def _adaptive_sizes(nsp: int, x: Tensor, output_size, what: str) -> tuple[int, ...]:
    spatial = x.shape[2:]
    sizes = (output_size,) * nsp if isinstance(output_size, numbers.Integral) else tuple(output_size) \
        if isinstance(output_size, (tuple, list)) else None
    if sizes is None or len(sizes) != nsp or not all(
            o is None or (isinstance(o, numbers.Integral) and not isinstance(o, bool) and o > 0) for o in sizes):
        raise ValueError(f"{what}: output_size must be a positive int or {nsp} of them (None keeps a size), "
                         f"got {output_size!r}")
    return tuple(n if o is None else int(o) for o, n in zip(sizes, spatial))


def _adaptive_windows(x: Tensor, sizes, reduce_slice) -> Tensor:
    """Adaptive pooling axis by axis (a box's mean or max is the mean or max over each of its
    axes in turn): output i of an axis of size n pools [floor(i n / o), ceil((i + 1) n / o)),
    torch's windows (of unequal sizes when o does not divide n)."""
    from .index import index_get
    for k, o in enumerate(sizes):
        d = 2 + k
        n = x.shape[d]
        if n == o:
            continue
        parts = []
        for i in range(o):
            lo, hi = (i * n) // o, -((-(i + 1) * n) // o)
            idx = (slice(None),) * d + (slice(lo, hi),)
            parts.append(reduce_slice(index_get(x, idx), d))
        x = cat(parts, d)
    return x


def _adaptive_avg(nsp: int, input, output_size) -> Tensor:
    """torch's adaptive average pooling: windows of one size (each input size a multiple of its
    output size) are an avg_pool; other sizes pool torch's unequal windows axis by axis.  An
    output of size 1 along every axis is a mean over the spatial axes (any tiling of them)."""
    what = f"adaptive_avg_pool{nsp}d"
    x, unbatched = _input(input, nsp, what)
    spatial = x.shape[2:]
    sizes = _adaptive_sizes(nsp, x, output_size, what)
    if all(o == 1 for o in sizes):   # global average pooling: a mean, for any tiling of the spatial axes
        return _mean(input, tuple(range(-nsp, 0)), keepdim=True)
    if any(n % o for n, o in zip(spatial, sizes)):
        y = _adaptive_windows(x, sizes, lambda t, d: _mean(t, d, keepdim=True))
        return squeeze(y, 0) if unbatched else y
    kernel = tuple(n // o for n, o in zip(spatial, sizes))
    return _avg(nsp, input, kernel, kernel, 0, False, True, None)


def _adaptive_max(nsp: int, input, output_size, return_indices: bool) -> Tensor:
    """torch's adaptive max pooling, windows as adaptive average pooling's: maxima of tile
    tasks (the gradient of a tie is shared among the tied elements, where torch gives it to
    one); with return_indices, (values, int64 indices): the indices found on the host (the
    call waits for the input), the values gathered at them (torch's gradient, ties included)."""
    from .reduce import amax
    what = f"adaptive_max_pool{nsp}d"
    x, unbatched = _input(input, nsp, what)
    sizes = _adaptive_sizes(nsp, x, output_size, what)
    if not return_indices:
        y = _adaptive_windows(x, sizes, lambda t, d: amax(t, d, keepdim=True))
        return squeeze(y, 0) if unbatched else y
    n, c, vol = x.shape[0], x.shape[1], int(np.prod(x.shape[2:]))
    idx = _adaptive_max_indices(_host_values(x), sizes).reshape(n, c, -1)
    y = reshape(gather(reshape(x, (n, c, vol)), 2, from_numpy(np.ascontiguousarray(idx))), (n, c) + sizes)
    idx = idx.reshape((n, c) + sizes)
    return (squeeze(y, 0), from_numpy(idx[0])) if unbatched else (y, from_numpy(idx))


def _adaptive_max_indices(a: np.ndarray, sizes) -> np.ndarray:
    """torch's indices of adaptive max pooling of ``a`` (N, C, *spatial; from _host_values):
    output i of an axis of size n pools [floor(i n / o), ceil((i + 1) n / o)); per window, the
    flat position within its channel's spatial volume of the first maximum in scan order, or
    of the last NaN (N, C, *sizes)."""
    nsp, spatial = len(sizes), a.shape[2:]
    pos, valid, flat = [], True, 0
    for k, (n, o) in enumerate(zip(spatial, sizes)):
        lo, hi = (np.arange(o) * n) // o, -((-(np.arange(o) + 1) * n) // o)
        p = lo[:, None] + np.arange(int((hi - lo).max()))[None, :]    # (o, longest window), past hi: invalid
        shape = [1] * (2 * nsp)
        shape[k], shape[nsp + k] = p.shape
        valid = valid & (p < hi[:, None]).reshape(shape)
        p = np.minimum(p, n - 1).reshape(shape)
        pos.append(p)
        flat = flat * n + p
    w = np.where(valid, a[(slice(None), slice(None)) + tuple(pos)], -np.inf)   # (N, C, *sizes, *window)
    window = (-1,)
    return _window_argmax(w.reshape(w.shape[:2 + nsp] + window), flat.reshape(tuple(sizes) + window))


def adaptive_max_pool1d(input, output_size, return_indices: bool = False) -> Tensor:
    """torch.nn.functional.adaptive_max_pool1d on (N, C, L)."""
    return _adaptive_max(1, input, output_size, return_indices)


def adaptive_max_pool2d(input, output_size, return_indices: bool = False) -> Tensor:
    """torch.nn.functional.adaptive_max_pool2d on (N, C, H, W)."""
    return _adaptive_max(2, input, output_size, return_indices)


def adaptive_max_pool3d(input, output_size, return_indices: bool = False) -> Tensor:
    """torch.nn.functional.adaptive_max_pool3d on (N, C, D, H, W)."""
    return _adaptive_max(3, input, output_size, return_indices)


def adaptive_avg_pool1d(input, output_size) -> Tensor:
    """torch.nn.functional.adaptive_avg_pool1d on (N, C, L)."""
    return _adaptive_avg(1, input, output_size)


def adaptive_avg_pool2d(input, output_size) -> Tensor:
    """torch.nn.functional.adaptive_avg_pool2d on (N, C, H, W)."""
    return _adaptive_avg(2, input, output_size)


def adaptive_avg_pool3d(input, output_size) -> Tensor:
    """torch.nn.functional.adaptive_avg_pool3d on (N, C, D, H, W)."""
    return _adaptive_avg(3, input, output_size)


# -- batch norm -----------------------------------------------------------------------------

def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
               eps=1e-5) -> Tensor:
    """torch.nn.functional.batch_norm over (N, C, *): per-channel statistics of the batch in
    training (biased variance to normalise; running_mean/running_var, when given, updated in
    place with momentum and the unbiased variance), the running statistics otherwise."""
    what = "batch_norm"
    x = _float_tensor(input, what, "input")
    if x.ndim < 2:
        raise ValueError(f"{what}: input must be at least 2-D (N, C, *), got shape {x.shape}")
    C = x.shape[1]
    rm = _vector(running_mean, C, x, what, "running_mean")
    rv = _vector(running_var, C, x, what, "running_var")
    w = _whole(_vector(weight, C, x, what, "weight"))
    b = _whole(_vector(bias, C, x, what, "bias"))
    if not isinstance(training, bool):
        raise TypeError(f"{what}: training must be a bool, got {type(training).__name__}")
    if (rm is None) != (rv is None):
        raise ValueError(f"{what}: running_mean and running_var must both be given or both be None")
    if not training and rm is None:
        raise ValueError(f"{what}: running_mean and running_var are required when training=False")
    for name, v in (("momentum", momentum), ("eps", eps)):
        if not isinstance(v, numbers.Real) or isinstance(v, bool):
            raise TypeError(f"{what}: {name} must be a real number, got {type(v).__name__}")
    if not eps > 0:
        raise ValueError(f"{what}: eps must be positive, got {eps}")
    count = x.numel() // C
    if training and count <= 1:
        raise ValueError(f"{what}: expected more than 1 value per channel when training, "
                         f"got input shape {x.shape}")
    x = _act_layout(x)
    hw = count // x.shape[0]   # (per tile: the expander sets each tile's own count)
    vec = TensorTraits((C,), (C,))
    if training:
        mean, rstd = Tensor(vec, x.dtype), Tensor(vec, x.dtype)   # rstd holds M2 until norm_rstd
        run_batch("bn_stats", [x], [mean, rstd], reduce=True, c=C, hw=hw)
        if rm is not None:
            m = float(momentum)
            for run, new, alpha in ((rm, mean, m), (rv, rstd, m / (count - 1))):
                whole = _whole(run)                  # the buffer itself unless it is tiled otherwise
                run_map("axpy", new, whole, alpha=alpha, beta=1.0 - m)
                if whole is not run:                 # in place: back into the caller's tiles
                    run_map("copy", retile(whole, run.tiles), run)
        run_map("norm_rstd", rstd, alpha=1.0 / count, eps=float(eps))
    else:
        mean, rstd = Tensor(vec, x.dtype), Tensor(vec, x.dtype)   # copies: later updates of the buffers
        run_map("copy", _whole(rm), mean)                         # must not change this op's backward
        run_map("copy", _whole(rv), rstd)
        run_map("norm_rstd", rstd, alpha=1.0, eps=float(eps))
    w_ = w if w is not None else full((C,), 1.0, tiles=(C,), dtype=x.dtype)
    b_ = b if b is not None else full((C,), 0.0, tiles=(C,), dtype=x.dtype)
    y = Tensor(x.traits, x.dtype)
    run_batch("bn_fwd", [x, y], [mean, rstd, w_, b_], c=C, hw=hw)
    return record("batch_norm", y, (x, w, b), saved=(x, mean, rstd, w_),
                  c=C, hw=hw, alpha=1.0 / count if training else 0.0, eps=float(eps))


@backward_rule("batch_norm")
def _batch_norm_bwd(node, g):
    x, mean, rstd, w = node.saved
    c, hw = node.ctx["c"], node.ctx["hw"]
    need_x, need_w, need_b = (t is not None for t in node.inputs)
    vec = TensorTraits((c,), (c,))
    sdy, sdyx = Tensor(vec, x.dtype), Tensor(vec, x.dtype)
    run_batch("bn_bwd_stats", [g, x], [mean, rstd, sdy, sdyx], reduce=True, c=c, hw=hw)
    dx = None
    if need_x:
        dx = Tensor(x.traits, x.dtype)
        run_batch("bn_bwd_x", [g, x, dx], [mean, rstd, w, sdy, sdyx], c=c, hw=hw, alpha=node.ctx["alpha"])
    return dx, (sdyx if need_w else None), (sdy if need_b else None)


@double_backward_rule("batch_norm")
def _batch_norm_double(node, g):
    """Differentiable form: the batch norm recomputed with recorded ops; in training the
    batch statistics are functions of x, in evaluation the running statistics (saved as mean
    and rstd) are constants."""
    from .elementwise import add, mul, rsqrt, sub
    x, mean, rstd, w = node.saved
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, node.ctx["c"]) + (1,) * (x.ndim - 2)

    def forward(x, w, b):
        if node.ctx["alpha"]:
            xc = sub(x, _mean(x, axes, keepdim=True))
            y = mul(xc, rsqrt(add(_mean(mul(xc, xc), axes, keepdim=True), node.ctx["eps"])))
        else:
            y = mul(sub(x, reshape(mean, shape)), reshape(rstd, shape))
        y = mul(y, reshape(w, shape))
        return y if b is None else add(y, reshape(b, shape))
    return composite_grads(node, g, forward, x, w, node.inputs[2])


__all__ = ["adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d", "batch_norm", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "max_pool1d",
           "max_pool2d", "max_pool3d", "max_unpool1d", "max_unpool2d", "max_unpool3d"]
