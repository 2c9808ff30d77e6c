"""Embedding lookup: ``embedding(ids, table)`` gathers rows of a (V, C) table for int64 ids of
any shape S; the result is S + (C,), tiled as ids' tiles followed by the table's column tile.
The table may be split into tiles along V and C (csrc/expand_embedding.c).  Backward is a
deterministic scatter-add into the table gradient; only the table gets a gradient."""
from __future__ import annotations

import numpy as np

from ..runtime.kernels import embedding_backward, embedding_rows
from ..tensors import Tensor, TensorTraits
from ..tensors.tensor import known_within
from .autograd import backward_rule, double_backward_rule, record
from .basic import _float_tensor, _tensor


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


def embedding(ids: Tensor, table: Tensor) -> Tensor:
    """table[ids]: ids is an int64 Tensor of shape S (e.g. (B, T)), table is (V, C) float32 or
    float64; returns S + (C,) tiled as ids' tiles + (table's tile along C,).  Like
    torch.nn.functional.embedding(input, weight)."""
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
