"""Embedding lookup: ``embedding(ids, table)`` gathers rows of a (V, C) table for int64 ids of
any shape S; the result is S + (C,), tiled as ids' tiles followed by the table's column tile.
The table may be split into tiles along V and C (csrc/expand_embedding.c).  Backward is a
deterministic scatter-add into the table gradient; only the table gets a gradient."""
from __future__ import annotations

import numbers

import numpy as np

from ..runtime.kernels import embedding_backward, embedding_rows
from ..tensors import Tensor, TensorTraits, from_numpy
from ..tensors.tensor import known_within, value_range_of
from .autograd import backward_rule, double_backward_rule, needs_grad, record
from .basic import _float_tensor, _tensor
from .creation import zeros
from .elementwise import add, mul, where
from .index import index_select, scatter_reduce
from .shape import reshape


def _check_ids_range(ids: Tensor, V: int, what: str) -> tuple[int, int]:
    """Ids are input data: reject any id outside [0, V) before anything is submitted; returns
    the smallest and the largest id.  Ids whose range is known without reading them
    (``value_range``: made by from_numpy, or an argmax's indices) and within [0, V) are not
    read, so a decode step can embed tokens still being chosen and, under MPI, no rank waits
    for another's ids; the others are read (this waits for their writers)."""
    if known_within(ids, V):
        return value_range_of(ids)
    a = ids.numpy(force=True)
    bad = (a < 0) | (a >= V)
    if bad.any():
        pos = tuple(int(i) for i in np.argwhere(bad)[0])
        where = f"ids[{', '.join(map(str, pos))}]" if pos else "ids"
        raise ValueError(f"{what}: {where} = {int(a[pos])} is out of range for a table of {V} rows "
                         f"(valid ids: 0..{V - 1}); {int(bad.sum())} id(s) out of range in all")
    return (int(a.min()), int(a.max())) if a.size else (0, V - 1)


def _renorm_rows(ids: Tensor, weight: Tensor, max_norm: float, norm_type: float) -> None:
    """weight's rows at ``ids`` scaled in place by max_norm / (norm + 1e-7) where their norm
    exceeds max_norm (outside the graph, as torch)."""
    from .autograd import no_grad
    from .elementwise import add, div, gt, mul
    from .index import assign_, index_put, index_select
    from .reduce import norm
    _tensor(ids, "embedding", "input")
    rows = np.unique(ids.numpy(force=True))
    if rows.size == 0:
        return
    with no_grad():
        idx = from_numpy(rows.astype(np.int64))
        w = index_select(weight.detach(), 0, idx)
        n = norm(w, norm_type, 1, keepdim=True)
        scaled = mul(w, where(gt(n, max_norm), div(max_norm, add(n, 1e-7)), 1.0))
        assign_(weight, index_put(weight.detach(), idx, scaled))


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm=None,  # noqa: A002
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """torch.nn.functional.embedding: weight[input], the ids ``input`` an int64 Tensor of
    shape S (e.g. (B, T)), the table ``weight`` (V, C) float32 or float64; returns S + (C,)
    tiled as the ids' tiles + (the table's tile along C,).  ``padding_idx``: the positions
    holding that id give no gradient to the table (their output is the table's row, as
    torch).  ``max_norm``: the rows the ids use are first rescaled in place to that
    ``norm_type``-norm where theirs is larger (torch's embedding_renorm_).  Not supported (a
    clear error): scale_grad_by_freq, sparse."""
    if scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding: scale_grad_by_freq and sparse are not supported")
    if max_norm is not None:
        _renorm_rows(input, weight, float(max_norm), float(norm_type))
    y = _embedding(input, weight)
    if padding_idx is None:
        return y
    V = weight.shape[0]
    if isinstance(padding_idx, bool) or not isinstance(padding_idx, numbers.Integral) or not -V <= padding_idx < V:
        raise ValueError(f"embedding: padding_idx must be an int within the table's {V} rows, got {padding_idx!r}")
    if not needs_grad(weight):
        return y
    pad = input.numpy(force=True) == int(padding_idx) % V          # the ids were checked (read) by _embedding
    if not pad.any():
        return y
    frozen = _embedding(input, weight.detach())         # the same rows, outside the graph
    return where(from_numpy(np.ascontiguousarray(pad[..., None])), frozen, y)


def _embedding(ids: Tensor, table: Tensor) -> Tensor:
    what = "embedding"
    _tensor(ids, what, "ids")
    if ids.dtype != np.int64:
        raise TypeError(f"{what}: ids must be an int64 tensor, got {ids.dtype}")
    _float_tensor(table, what, "table")
    if table.ndim != 2:
        raise ValueError(f"{what}: table must be 2-D (V, C), got shape {table.shape}")
    if ids.ndim + 1 > 8:
        raise ValueError(f"{what}: ids has {ids.ndim} axes; at most 7 (the result adds one)")
    V, C = table.shape
    lo, hi = _check_ids_range(ids, V, what)
    y = Tensor(TensorTraits(ids.shape + (C,), ids.tiles + (table.tiles[1],)), table.dtype)
    embedding_rows(ids, table, y, lo, hi)  # tasks only for the tiles holding ids
    return record("embedding", y, (ids, table), saved=(ids,), table_traits=table.traits)


@backward_rule("embedding")
def _embedding_bwd(node, g):
    (ids,) = node.saved
    dtable = Tensor(node.ctx["table_traits"], g.dtype)
    embedding_backward(ids, g, dtable)
    return (None, dtable)


# Double backward: the table's gradient is linear in g (rows added at the ids): recorded as
# embedding_bwd, whose gradient is the lookup of those rows again.
@double_backward_rule("embedding")
def _embedding_double(node, g):
    (ids,) = node.saved
    return (None, record("embedding_bwd", _embedding_bwd(node, g)[1], (g,), saved=(ids,)))


@backward_rule("embedding_bwd", differentiable=True)
def _embedding_bwd_bwd(node, gg):
    (ids,) = node.saved
    return (embedding(ids, gg),)


def embedding_bag(input: Tensor, weight: Tensor, offsets=None, max_norm=None, norm_type=2,  # noqa: A002
                  scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                  per_sample_weights=None, include_last_offset: bool = False, padding_idx=None) -> Tensor:
    """torch.nn.functional.embedding_bag: the sum, mean or max of the table's rows over each
    bag of ids, a (B, C) result.  Bags: the rows of a 2-D ``input`` (B, L) (``offsets`` None),
    or the runs of a 1-D ``input`` starting at ``offsets`` (B starts; with
    ``include_last_offset`` B + 1 bounds, the last one the input's length).
    ``per_sample_weights`` (input's shape, mode "sum" only) scales each row.  Ids equal to
    ``padding_idx`` are left out of their bag (of its count too); an empty bag gives zeros.
    ``max_norm`` renormalises the used rows first, as embedding does.  Gradients flow to the
    table and to per_sample_weights.  Not supported (NotImplementedError): scale_grad_by_freq,
    sparse."""
    what = "embedding_bag"
    _tensor(input, what, "input")
    _float_tensor(weight, what, "weight")
    if per_sample_weights is not None and tuple(input.shape) != tuple(per_sample_weights.shape):
        raise ValueError(f"embedding_bag: If per_sample_weights ({tuple(per_sample_weights.shape)}) is not None, "
                         f"then it must have the same shape as the input ({tuple(input.shape)})")
    if weight.ndim != 2:
        raise ValueError(f"weight has to be a 2D Tensor, but got Tensor of dimension {weight.ndim}")
    _bag_mode(mode, scale_grad_by_freq, sparse)
    ids, bag, nbags = _bags(input, offsets, include_last_offset)
    if max_norm is not None:
        _renorm_rows(input, weight, float(max_norm), float(norm_type))
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError("embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                  f"supported for mode='sum' (got mode='{mode}')")
    keep = np.ones(len(ids), dtype=bool)
    if padding_idx is not None:
        V = weight.shape[0]
        if isinstance(padding_idx, bool) or not isinstance(padding_idx, numbers.Integral) or not -V <= padding_idx < V:
            raise RuntimeError(f"padding_idx must be within the number of embeddings, {-V} through {V - 1}, but got "
                               f"{padding_idx!r}")
        keep &= ids != int(padding_idx) % V
    C = weight.shape[1]
    if not keep.any():  # every id is padding: zeros, still in the graph (the table's gradient is zero, as torch's)
        return add(zeros((nbags, C), dtype=weight.dtype), mul(_embedding(from_numpy(ids[:1].copy()), weight), 0.0))
    pos = np.flatnonzero(keep)
    rows = _embedding(from_numpy(np.ascontiguousarray(ids[pos])), weight)                # (N, C)
    if per_sample_weights is not None:
        w = index_select(reshape(per_sample_weights, (-1,)), 0, from_numpy(pos.astype(np.int64)))
        rows = mul(rows, reshape(w, (len(pos), 1)))
    index = from_numpy(np.ascontiguousarray(np.repeat(bag[pos][:, None], C, 1)))
    out = zeros((nbags, C), dtype=weight.dtype)
    return scatter_reduce(out, 0, index, rows, {"sum": "sum", "mean": "mean", "max": "amax"}[mode],
                          include_self=False)                                              # (B, C)


def _bag_mode(mode, scale_grad_by_freq: bool, sparse: bool) -> None:
    """torch's checks of mode (max refuses scale_grad_by_freq and sparse with ValueError);
    the two options tiletrain does not implement raise NotImplementedError."""
    if mode not in ("sum", "mean", "max"):
        raise ValueError("mode has to be one of sum, mean or max")
    if mode == "max" and scale_grad_by_freq:
        raise ValueError("max mode does not support scaling the gradient by the frequency")
    if mode == "max" and sparse:
        raise ValueError("max mode does not support sparse weights")
    if scale_grad_by_freq:
        raise NotImplementedError("embedding_bag: scale_grad_by_freq=True is not supported")
    if sparse:
        raise NotImplementedError("embedding_bag: sparse=True is not supported (the table's gradient is dense)")


def _bags(input: Tensor, offsets, include_last_offset: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """(ids, the bag of each id, number of bags) from a 2-D input or a 1-D input
    and its offsets, with torch's checks."""
    if input.dtype != np.int64:
        raise TypeError(f"embedding_bag: input (the ids) must be an int64 tensor, got {input.dtype}")
    ids = input.numpy(force=True)
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated is a mini-batch of "
                             f"fixed length sequences. However, found offsets of type {type(offsets)}")
        B, L = ids.shape
        return ids.reshape(-1), np.repeat(np.arange(B, dtype=np.int64), L), B
    if input.ndim != 1:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.ndim}")
    if offsets is None:
        raise ValueError("offsets has to be a 1D Tensor but got None")
    _tensor(offsets, "embedding_bag", "offsets")
    if offsets.ndim != 1:
        raise ValueError("offsets has to be a 1D Tensor")
    if offsets.dtype != np.int64:
        raise TypeError(f"embedding_bag: offsets must be an int64 tensor, got {offsets.dtype}")
    off = offsets.numpy(force=True)
    n = len(ids)
    if off[0] != 0:
        raise RuntimeError("offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from "
                           f"position 0. However, got {int(off[0])}")
    if off[-1] > n:
        raise RuntimeError(f"offsets[-1] can not be greater than input's length {n} but got offsets[-1] of "
                           f"{int(off[-1])}")
    if (np.diff(off) < 0).any():
        raise RuntimeError(f"embedding_bag: offsets must be non-decreasing, got {off.tolist()}")
    if include_last_offset and off[-1] != n:
        # torch leaves this case undefined (its kernels disagree on where the last bag ends)
        raise ValueError(f"embedding_bag: with include_last_offset=True the last offset must be the input's "
                         f"length {n} (offsets in CSR form), got {int(off[-1])}")
    bounds = off if include_last_offset else np.append(off, n)
    B = len(bounds) - 1
    if B < 1:
        raise ValueError("embedding_bag: include_last_offset=True needs at least 2 offsets (no bags: tiletrain has "
                         "no size-0 tensors)")
    return ids, np.searchsorted(bounds, np.arange(n), side="right").astype(np.int64) - 1, B


__all__ = ["embedding", "embedding_bag"]
