"""Graph utilities with PyG's names and meaning (torch_geometric.utils): ``edge_index`` is a
(2, E) int64 array (row 0 the source nodes, row 1 the targets) given as a NumPy array, a
tiletrain Tensor or anything NumPy reads (a CPU torch tensor)."""
from __future__ import annotations

import numpy as np

from .. import ops
from ..ops.creation import full, zeros
from ..tensors import Tensor, from_numpy


def edge_index_array(edge_index, what: str, num_nodes: int | None = None) -> np.ndarray:
    """edge_index as a (2, E) int64 NumPy array, checked (dtype, shape, every node id in
    [0, num_nodes)) before anything is submitted."""
    a = edge_index.numpy(force=True) if isinstance(edge_index, Tensor) else np.asarray(edge_index)
    if a.dtype != np.int64:
        raise TypeError(f"{what}: edge_index must be int64, got {a.dtype}")
    if a.ndim != 2 or a.shape[0] != 2:
        raise ValueError(f"{what}: edge_index must have shape (2, E), got {a.shape}")
    if a.size and a.min() < 0:
        k = np.argwhere(a < 0)[0]
        raise ValueError(f"{what}: edge_index[{k[0]}, {k[1]}] = {int(a[k[0], k[1]])} is negative")
    if num_nodes is not None and a.size and a.max() >= num_nodes:
        k = np.argwhere(a >= num_nodes)[0]
        raise ValueError(f"{what}: edge_index[{k[0]}, {k[1]}] = {int(a[k[0], k[1]])} is out of range for "
                         f"{num_nodes} nodes (valid: 0..{num_nodes - 1})")
    return a


def maybe_num_nodes(edge_index: np.ndarray, num_nodes: int | None = None) -> int:
    return int(num_nodes) if num_nodes is not None else (int(edge_index.max()) + 1 if edge_index.size else 0)


def _attr(edge_attr, what: str):
    if edge_attr is None or isinstance(edge_attr, Tensor):
        return edge_attr
    return np.asarray(edge_attr)


def remove_self_loops(edge_index, edge_attr=None):
    """torch_geometric.utils.remove_self_loops: the edges i -> i dropped (order kept)."""
    ei = edge_index_array(edge_index, "remove_self_loops")
    keep = ei[0] != ei[1]
    attr = _attr(edge_attr, "remove_self_loops")
    if attr is not None:
        attr = ops.index_select(attr, 0, from_numpy(np.flatnonzero(keep))) if isinstance(attr, Tensor) else attr[keep]
    return ei[:, keep], attr


def add_self_loops(edge_index, edge_attr=None, fill_value=None, num_nodes: int | None = None):
    """torch_geometric.utils.add_self_loops: the loops 0 -> 0 .. N-1 -> N-1 appended after
    the edges (existing loops kept); their attribute is ``fill_value`` (default 1)."""
    what = "add_self_loops"
    ei = edge_index_array(edge_index, what, num_nodes)
    N = maybe_num_nodes(ei, num_nodes)
    loops = np.arange(N, dtype=np.int64)
    out = np.concatenate([ei, np.stack([loops, loops])], axis=1)
    attr = _attr(edge_attr, what)
    if attr is None:
        return out, None
    fill = 1.0 if fill_value is None else fill_value
    if isinstance(fill, str):
        raise NotImplementedError(f"{what}: fill_value={fill!r} is not supported; pass a number")
    if isinstance(attr, Tensor):
        shape = (N,) + tuple(attr.shape[1:])
        return out, ops.cat([attr, full(shape, float(fill), dtype=attr.dtype)], 0)
    return out, np.concatenate([attr, np.full((N,) + attr.shape[1:], fill, attr.dtype)])


def add_remaining_self_loops(edge_index, edge_weight=None, fill_value: float = 1.0, num_nodes: int | None = None):
    """torch_geometric.utils.add_remaining_self_loops for a 1-D weight (NumPy): loops for the
    nodes without one, appended; nodes with a loop keep it (and its weight) in the appended
    block, the non-loop edges first."""
    ei = edge_index_array(edge_index, "add_remaining_self_loops", num_nodes)
    N = maybe_num_nodes(ei, num_nodes)
    mask = ei[0] != ei[1]
    loops = np.arange(N, dtype=np.int64)
    out = np.concatenate([ei[:, mask], np.stack([loops, loops])], axis=1)
    if edge_weight is None:
        return out, None
    w = np.asarray(edge_weight)
    loop_w = np.full(N, fill_value, dtype=w.dtype)
    inv = ~mask
    loop_w[ei[0, inv]] = w[inv]
    return out, np.concatenate([w[mask], loop_w])


def degree(index, num_nodes: int | None = None, dtype=None) -> Tensor:
    """torch_geometric.utils.degree: how often each node appears in a 1-D int64 ``index``
    (a tensor of N counts, float32 unless ``dtype`` says otherwise)."""
    a = index.numpy(force=True) if isinstance(index, Tensor) else np.asarray(index)
    if a.dtype != np.int64 or a.ndim != 1:
        raise TypeError(f"degree: index must be a 1-D int64 array or tensor, got {a.dtype} of shape {a.shape}")
    if a.size and a.min() < 0:
        raise ValueError(f"degree: index holds a negative node id ({int(a.min())})")
    N = int(num_nodes) if num_nodes is not None else (int(a.max()) + 1 if a.size else 0)
    if a.size and a.max() >= N:
        raise ValueError(f"degree: node id {int(a.max())} is out of range for {N} nodes")
    return from_numpy(np.bincount(a, minlength=N).astype(dtype or np.float32))


def softmax(src: Tensor, index, ptr=None, num_nodes: int | None = None, dim: int = 0) -> Tensor:
    """torch_geometric.utils.softmax: a softmax of ``src`` over the entries that share a value
    of ``index`` (along dim 0): exp(src - max) / (sum + 1e-16), the max taken without gradient,
    as PyG computes it."""
    what = "softmax"
    if ptr is not None:
        raise NotImplementedError(f"{what}: ptr is not supported; pass index")
    if dim != 0:
        raise NotImplementedError(f"{what}: dim must be 0, got {dim}")
    a = index.numpy(force=True) if isinstance(index, Tensor) else np.asarray(index)
    if a.dtype != np.int64 or a.ndim != 1 or len(a) != src.shape[0]:
        raise ValueError(f"{what}: index must be 1-D int64 with src.shape[0] = {src.shape[0]} entries, got "
                         f"{a.dtype} of shape {a.shape}")
    N = int(num_nodes) if num_nodes is not None else (int(a.max()) + 1 if a.size else 0)
    idx = a  # NumPy indices: the ops take them without reading a tensor back
    full_idx = np.ascontiguousarray(np.broadcast_to(a.reshape((-1,) + (1,) * (src.ndim - 1)), src.shape))
    shape = (N,) + tuple(src.shape[1:])
    with ops.no_grad():
        mx = ops.scatter_reduce(zeros(shape, dtype=src.dtype), 0, full_idx, src.detach(), "amax", include_self=False)
    out = ops.exp(ops.sub(src, ops.index_select(mx, 0, idx)))
    s = ops.index_add(zeros(shape, dtype=src.dtype), 0, idx, out)
    return ops.div(out, ops.index_select(ops.add(s, 1e-16), 0, idx))


__all__ = ["add_remaining_self_loops", "add_self_loops", "degree", "edge_index_array", "maybe_num_nodes",
           "remove_self_loops", "softmax"]
