"""Embedding lookup: ``embedding(ids, table)`` gathers rows of a (V, C) table for int64 ids of
any shape S; the result is S + (C,), tiled as ids' tiles followed by the table's column tile.
The table may be split into tiles along V and C (csrc/expand_embedding.c).  Backward is a
deterministic scatter-add into the table gradient; only the table gets a gradient."""
from __future__ import annotations

import numbers

import numpy as np

from ..runtime.kernels import embedding_backward, embedding_rows
from ..tensors import Tensor, TensorTraits, from_numpy
from ..tensors.tensor import known_within
from .autograd import backward_rule, double_backward_rule, needs_grad, record
from .basic import _float_tensor, _tensor
from .elementwise import where


def _check_ids_range(ids: Tensor, V: int, what: str) -> tuple[int, int]:
    """Ids are input data: reject any id outside [0, V) before anything is submitted; returns
    the smallest and the largest id.  Ids whose range is known without reading them
    (``value_range``: made by from_numpy, or an argmax's indices) and within [0, V) are not
    read, so a decode step can embed tokens still being chosen and, under MPI, no rank waits
    for another's ids; the others are read (this waits for their writers)."""
    if known_within(ids, V):
        return ids.value_range
    a = ids.numpy()
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
    rows = np.unique(ids.numpy())
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
    pad = input.numpy() == int(padding_idx) % V          # the ids were checked (read) by _embedding
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


__all__ = ["embedding"]
