"""The one kernel-call layer: ops call tile kernels by name.

Every kernel of csrc/kernels.def is looked up here by its name in the generated registry
(kernel id ``TT_K_<NAME>`` and argument struct ``tt_args_<name>``); the arguments are
keyword arguments named as in the table.  These C expanders cover the ops:

  run_map(name, *tensors, **args)        one task per tile of tensors of one shape and tiling
  run_span(name, axis, naxes, full, reduced, reduce=False, **args)
                                         tiles viewed as (m, k, n) around axes [axis, axis+naxes):
                                         `reduced` tensors lack those axes (reductions, broadcasts)
  run_norm(name, full, rows, cols, reduce=0, **args)
                                         row/column kernels over the last axis (layer/rms norm)
  run_batch(name, batch, whole, reduce=False, **args)
                                         conv, pools, batch norm over batch/spatial tiles
  run_tasks(name, tensors, tiles, wmask=None, **args)
                                         a list of tasks computed by the op (one row per task:
                                         its tile of each tensor, its own arguments), for ops
                                         whose tile pairing depends on data (index, scatter,
                                         block-sparse ops, graph samplers)

Nothing above this module names a C type or a kernel id.  The kernels are those of the
registry (runtime/registry.py), read once from the C library's kernel table."""
from __future__ import annotations

import numpy as np

from .._ffi import check, ffi, lib
from ..tensors.tensor import forget_value_range
from .registry import KERNELS, kernel_id, kernel_info, kernel_names

_MAX_NDIM = lib.TT_MAX_NDIM

# name -> (kernel id, argument struct type): the lookup every op makes
_CALL = {name: (info.id, info.args) for name, info in KERNELS.items()}


def _args(name: str, fields: dict):
    try:
        kid, ctype = _CALL[name]
    except KeyError:
        kernel_info(name)  # raises: unknown kernel
        raise
    try:  # one call initialises every field (the hot path: every op passes here)
        return kid, ffi.new(ctype, fields)
    except (KeyError, TypeError, OverflowError):
        pass  # name the field that is wrong, below
    args = ffi.new(ctype)
    for key, value in fields.items():
        try:
            setattr(args, key, value)
        except AttributeError:
            raise TypeError(f"kernel {name!r} has no argument {key!r}") from None
    return kid, args


def _ptrs(tensors):
    return ffi.new("tt_tensor *[]", [t._ptr for t in tensors]) if tensors else ffi.NULL


def run_map(name: str, *tensors, **fields) -> None:
    """One ``name`` task per tile; the tensors share one shape and tiling, in the kernel's
    buffer order (inputs and outputs as its table line lists them)."""
    kid, args = _args(name, fields)
    check(lib.tt_map(kid, args, len(tensors), _ptrs(tensors)))


def run_span(name: str, axis: int, naxes: int, full, reduced=(), reduce: bool = False, **fields) -> None:
    """``name`` over tiles viewed as (m, k, n) around axes [axis, axis + naxes): ``full``
    tensors have one layout, ``reduced`` ones lack those axes.  With ``reduce`` the reduced
    tensors are accumulated along the span (the first tile overwrites)."""
    kid, args = _args(name, fields)
    check(lib.tt_span_map(kid, args, axis, naxes, len(full), _ptrs(full), len(reduced), _ptrs(reduced),
                          int(reduce)))


def run_norm(name: str, full, rows=(), cols=(), reduce: int = 0, **fields) -> None:
    """Row/column kernels over the last axis (csrc/expand_norm.c): ``full`` tensors of one
    layout, ``rows`` (full without the last axis), ``cols`` (the last axis alone)."""
    kid, args = _args(name, fields)
    check(lib.tt_norm_map(kid, args, len(full), _ptrs(full), len(rows), _ptrs(rows), len(cols), _ptrs(cols),
                          reduce))


def run_batch(name: str, batch, whole=(), reduce: bool = False, **fields) -> None:
    """Conv, pool and batch-norm kernels over activation tiles (csrc/expand_conv.c):
    ``batch`` tensors (N, C, *spatial) have the channel axis in one tile and may be tiled
    along batch and spatial axes (conv/pools: one task per output tile reading its input
    window, halos included; batch norm: one task per tile); ``whole`` ones are single tiles
    (with ``reduce`` the written whole tensors accumulate over the tiles in order)."""
    kid, args = _args(name, fields)
    check(lib.tt_batch_map(kid, args, len(batch), _ptrs(batch), len(whole), _ptrs(whole), int(reduce)))


def conv_halo_stats() -> tuple[int, int]:
    """(bytes, slabs) of the halo slabs this rank cut out for another rank in the conv/pool
    expanders since the process started (csrc/expand_conv.c; 0 without MPI): the halo
    traffic a spatial split makes this rank send."""
    out = ffi.new("int64_t[2]")
    lib.tt_conv_halo_stats(out, out + 1)
    return int(out[0]), int(out[1])


# The expanders with a fixed kernel and a signature of their own.

def run_cast(x, y) -> None:
    """y = x converted to y's dtype, rounded to nearest even (same shape and tiling)."""
    check(lib.tt_cast(x._ptr, y._ptr))


def sum_all(alpha: float, x, beta: float, y) -> None:
    """y (0-d) = alpha * sum(x) + beta * y."""
    check(lib.tt_sum_all(alpha, x._ptr, beta, y._ptr))


def gemm(alpha: float, a, transpose_a: bool, b, transpose_b: bool, beta: float, c) -> None:
    """c = alpha op(a) op(b) + beta c over tiles (csrc/expand.c, tt_gemm)."""
    check(lib.tt_gemm(alpha, a._ptr, int(transpose_a), b._ptr, int(transpose_b), beta, c._ptr))


def gemm_bias(alpha: float, a, b, transpose_b: bool, bias, c) -> None:
    """c = alpha a op(b) + bias along c's last axis, b 2-D (csrc/expand.c, tt_gemm_bias: the
    bias is added by the first gemm task of each output tile)."""
    check(lib.tt_gemm_bias(alpha, a._ptr, b._ptr, int(transpose_b), bias._ptr, c._ptr))


def gemm_bias_gelu(alpha: float, a, b, transpose_b: bool, bias, approx: int, deriv: bool, c, y) -> None:
    """gemm_bias into c, and y = gelu(c) (approx 0: erf form, 1: tanh form) by the last gemm
    task of each output tile (csrc/expand.c, tt_gemm_bias_gelu: kernel gemm_gelu); with
    ``deriv`` c ends as gelu'(c) (the backward's factor) instead of the pre-activation."""
    check(lib.tt_gemm_bias_gelu(alpha, a._ptr, b._ptr, int(transpose_b), bias._ptr, int(approx), int(deriv), c._ptr,
                                y._ptr))


# -- shape (csrc/expand_shape.c) --

def copy_regions(y, copies) -> None:
    """Region copies into ``y``: each copy is ``(x, xstart, xaxis, step, ystart, ystep, count)``,
    xstart per x axis, the rest per y axis: y[ystart + ystep i] = x[xstart + step i] along y
    axis d and x axis xaxis[d] (-1: broadcast); x axes no y axis maps are held at xstart."""
    m = _MAX_NDIM
    n = len(copies)
    nm = n * m
    forget_value_range(y)  # written: whatever range from_numpy or an argmax gave it no longer holds
    # the five int64 arrays in one block (xstart, step, ystart, ystep, count: nm entries each)
    flat, xaxis = [0] * (5 * nm), [0] * nm
    for c, (_, xstart, xa, *rest) in enumerate(copies):
        o = c * m
        flat[o:o + len(xstart)] = xstart
        xaxis[o:o + len(xa)] = xa
        for k, vals in enumerate(rest, 1):
            flat[k * nm + o:k * nm + o + len(vals)] = vals
    a = ffi.new("int64_t[]", flat)
    check(lib.tt_copy_regions(y._ptr, n, _ptrs([c[0] for c in copies]), a, ffi.new("int[]", xaxis), a + nm,
                              a + 2 * nm, a + 3 * nm, a + 4 * nm))


def assume_written(y) -> None:
    """Take y as holding data before every tile is written (tt_tensor_assume_written): its
    caller writes the rest before any read."""
    check(lib.tt_tensor_assume_written(y._ptr))


def view_tiles(x, shape) -> tuple[int, ...] | None:
    """The tiles of a view of x reshaped to ``shape`` when x's tiles line up with it, else None."""
    tiles = ffi.new("int64_t[]", max(len(shape), 1))
    ok = lib.tt_reshape_tiles(x._ptr, len(shape), ffi.new("int64_t[]", list(shape) or [0]), tiles)
    return tuple(tiles[i] for i in range(len(shape))) if ok else None


def tensor_view(x, shape):
    """A C tensor of ``shape`` sharing x's tile handles (view_tiles(x, shape) must hold); it
    frees itself (never the tiles) when dropped."""
    out = ffi.new("tt_tensor **")
    check(lib.tt_tensor_view(x._ptr, len(shape), ffi.new("int64_t[]", list(shape) or [0]), out))
    return ffi.gc(out[0], lib.tt_tensor_free)


def tile_view(x, lo, hi):
    """A C tensor made of x's tiles lo[d] <= idx[d] < hi[d] (no copy), or None under MPI; it
    frees itself (never the tiles) when dropped."""
    if lib.tt_mpi_enabled():
        return None
    out = ffi.new("tt_tensor **")
    lo, hi = (ffi.new("int64_t[]", list(v) or [0]) for v in (lo, hi))
    check(lib.tt_tensor_tile_view(x._ptr, lo, hi, out))
    return ffi.gc(out[0], lib.tt_tensor_free)


def tile_view_as(x, lo, hi, shape):
    """tile_view(x, lo, hi) seen as ``shape`` (one C tensor, no copy) and its tile shape, or
    None under MPI or when those tiles do not line up with ``shape``; the C tensor frees itself
    (never the tiles) when dropped."""
    if lib.tt_mpi_enabled():
        return None
    out, tiles = ffi.new("tt_tensor **"), ffi.new("int64_t[]", max(len(shape), 1))
    check(lib.tt_tensor_tile_view_as(x._ptr, ffi.new("int64_t[]", lo), ffi.new("int64_t[]", hi), len(shape),
                                     ffi.new("int64_t[]", shape), tiles, out))
    if out[0] == ffi.NULL:
        return None
    return ffi.gc(out[0], lib.tt_tensor_free), tuple(tiles[i] for i in range(len(shape)))


def run_cpu_body(name: str, fields: dict, buffers, dtype_code: int) -> None:
    """Call kernel ``name``'s CPU body directly on NumPy tile buffers (no runtime, no task: the
    kernel tests against tiletrain/testing/'s references)."""
    args = ffi.new(kernel_info(name).args)
    args.dtype = dtype_code
    for k, v in fields.items():
        setattr(args, k, v)
    getattr(lib, f"tt_cpu_{name}")(args, *[ffi.from_buffer(b) for b in buffers])


# -- attention, heads (csrc/expand_attention.c), embedding (csrc/expand_embedding.c) --

def heads_split(x, part: int, nparts: int, y) -> None:
    """y (B, H, T, D) = part ``part`` of ``nparts`` of x (B, T, nparts*H*D) as heads."""
    check(lib.tt_heads_split(x._ptr, part, nparts, y._ptr))


def heads_merge(y, part: int, nparts: int, x) -> None:
    """x (B, T, nparts*H*D) = heads y (B, H, T, D) as part ``part`` of ``nparts`` (heads_split's inverse)."""
    check(lib.tt_heads_merge(y._ptr, part, nparts, x._ptr))


def heads_merge_part(y, part: int, nparts: int, x) -> None:
    """heads_merge into part ``part``'s tiles of x only (the other parts' tiles untouched)."""
    check(lib.tt_heads_merge_part(y._ptr, part, nparts, x._ptr))


def heads_fill_parts(x, nparts: int, parts: int) -> None:
    """Zero the parts of x whose bit is not set in ``parts``."""
    check(lib.tt_heads_fill_parts(x._ptr, nparts, parts))


def attention_fwd(q, k, v, scale: float, causal: bool, o, lse) -> None:
    """o = softmax(scale q k^T (+ causal mask)) v and lse = the row logsumexp (flash attention)."""
    check(lib.tt_attention_fwd(q._ptr, k._ptr, v._ptr, scale, int(causal), o._ptr, lse._ptr))


def attention_decode(q, k, v, scale: float, q_start: int, o) -> None:
    """Causal attention of the queries at positions q_start.. over a key/value cache."""
    check(lib.tt_attention_decode(q._ptr, k._ptr, v._ptr, scale, q_start, o._ptr))


def attention_bwd(q, k, v, o, dout, lse, scale: float, causal: bool, dq, dk, dv) -> None:
    check(lib.tt_attention_bwd(q._ptr, k._ptr, v._ptr, o._ptr, dout._ptr, lse._ptr, scale, int(causal), dq._ptr,
                               dk._ptr, dv._ptr))


def embedding_rows(ids, table, y, lo: int, hi: int) -> None:
    """y = table[ids] for the ids tiles [lo, hi) (tasks only for the tiles holding ids)."""
    check(lib.tt_embedding_rows(ids._ptr, table._ptr, y._ptr, lo, hi))


def embedding_backward(ids, dy, dtable) -> None:
    """dtable += the rows of dy scattered to ids."""
    check(lib.tt_embedding_backward(ids._ptr, dy._ptr, dtable._ptr))


# -- task lists (csrc/expand_tasks.c): index, scatter and block-sparse ops --

_FIELDS: dict[str, tuple[int, list]] = {}


def _fields(name: str):
    """The argument struct's size and its fields (name, offset, is_real) after dtype."""
    if name not in _FIELDS:
        ctype = ffi.typeof(_CALL[name][1]).item
        _FIELDS[name] = (ffi.sizeof(ctype), [(f, t.offset, t.type.cname == "double") for f, t in ctype.fields
                                             if f != "dtype"])
    return _FIELDS[name]


def run_tasks(name: str, tensors, tiles, wmask=None, **fields) -> None:
    """``len(tiles)`` tasks of kernel ``name``: task t on tile ``tiles[t, j]`` (linear index) of
    ``tensors[j]``, with argument f = ``fields[f][t]`` (an array with one value per task, or one
    value for all); bit j of ``wmask[t]`` submits buffer j write-only (the first task of a chain
    that overwrites its output).  One C call: the op builds the list with NumPy."""
    if name not in _CALL:
        kernel_info(name)  # raises: unknown kernel
    size, layout = _fields(name)
    tiles = np.ascontiguousarray(tiles, dtype=np.int64)
    ntasks = tiles.shape[0]
    if tiles.ndim != 2 or tiles.shape[1] != len(tensors):
        raise ValueError(f"run_tasks({name!r}): tiles must be (ntasks, {len(tensors)}), got {tiles.shape}")
    buf = np.zeros((ntasks, size // 8), dtype=np.int64)
    given = set(fields)
    for f, off, real in layout:
        if f not in given:
            raise TypeError(f"kernel {name!r} needs argument {f!r}")
        given.discard(f)
        col = buf[:, off // 8]
        if real:
            col.view(np.float64)[:] = fields[f]
        else:
            col[:] = fields[f]
    if given:
        raise TypeError(f"kernel {name!r} has no argument(s) {sorted(given)}")
    wm = ffi.NULL if wmask is None else ffi.from_buffer("int64_t[]", np.ascontiguousarray(wmask, dtype=np.int64))
    check(lib.tt_tile_tasks(_CALL[name][0], ffi.from_buffer(buf) if ntasks else ffi.NULL, size, ntasks,
                            len(tensors), _ptrs(tensors), ffi.from_buffer("int64_t[]", tiles) if ntasks else ffi.NULL,
                            wm))


# -- synthetic tasks (csrc/expand_pipeline.c) --

def spin(a, b, c, d, usec: int, sleep: bool, wmask: int) -> None:
    """One ``spin`` task of ``usec`` microseconds (kernels.def): c = a + b when wmask & 1,
    d += a when wmask & 2."""
    check(lib.tt_spin(a._handle("spin"), b._handle("spin"), c._handle("spin"), d._handle("spin"), int(usec),
                      int(bool(sleep)), int(wmask)))


__all__ = ["run_cpu_body", "assume_written", "conv_halo_stats", "attention_bwd", "attention_decode", "attention_fwd", "copy_regions",
           "embedding_backward", "embedding_rows", "gemm", "gemm_bias", "gemm_bias_gelu", "heads_fill_parts", "heads_merge",
           "heads_merge_part", "heads_split", "kernel_id", "kernel_info", "kernel_names", "run_batch", "run_cast",
           "run_map", "run_norm", "run_span", "run_tasks", "spin", "sum_all", "tensor_view", "tile_view", "tile_view_as",
           "view_tiles"]
