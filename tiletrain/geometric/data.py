"""Graph data: a ``Data`` record like torch_geometric.data.Data (x, edge_index, y, masks; any
further attribute by keyword) holding NumPy arrays, built directly or from a PyG ``Data``
(``Data.from_pyg``), and ``sbm``: a stochastic block model with class-correlated features for
benchmarks of 100k+ nodes; ``karate_club`` for the example."""
from __future__ import annotations

import numpy as np

from ..tensors import Tensor
from .utils import edge_index_array

_FIELDS = ("x", "edge_index", "edge_attr", "y", "train_mask", "val_mask", "test_mask")


def _array(v):
    if v is None or isinstance(v, np.ndarray):
        return v
    if isinstance(v, Tensor):
        return v.numpy(force=True)
    return np.asarray(v)  # a CPU torch tensor, a list


class Data:
    """x (N, F), edge_index (2, E) int64, y (N,), train/val/test masks (N,) bool; other
    attributes by keyword.  Arrays are kept as NumPy (tensors and torch tensors are read)."""

    def __init__(self, x=None, edge_index=None, edge_attr=None, y=None, train_mask=None, val_mask=None,
                 test_mask=None, num_nodes: int | None = None, **kwargs):
        self.x, self.edge_attr, self.y = _array(x), _array(edge_attr), _array(y)
        self.train_mask, self.val_mask, self.test_mask = _array(train_mask), _array(val_mask), _array(test_mask)
        self._num_nodes = num_nodes
        self.edge_index = None if edge_index is None else edge_index_array(_array(edge_index), "Data",
                                                                            self.num_nodes)
        for k, v in kwargs.items():
            setattr(self, k, _array(v))
        self._extra = tuple(kwargs)

    @classmethod
    def from_pyg(cls, data) -> "Data":
        """A record with the fields of a torch_geometric Data (x, edge_index, edge_attr, y,
        masks: those it has)."""
        fields = {k: getattr(data, k, None) for k in _FIELDS}
        fields = {k: (v.detach().cpu().numpy() if v is not None and not isinstance(v, np.ndarray) else v)
                  for k, v in fields.items()}
        return cls(**fields, num_nodes=int(data.num_nodes))

    @property
    def num_nodes(self) -> int:
        if self._num_nodes is not None:
            return int(self._num_nodes)
        if self.x is not None:
            return int(self.x.shape[0])
        if self.y is not None:
            return int(self.y.shape[0])
        return 0

    @property
    def num_edges(self) -> int:
        return 0 if self.edge_index is None else int(self.edge_index.shape[1])

    @property
    def num_node_features(self) -> int:
        return 0 if self.x is None else int(self.x.shape[1])

    num_features = num_node_features

    def keys(self) -> list[str]:
        return [k for k in _FIELDS + self._extra if getattr(self, k, None) is not None]

    def __repr__(self) -> str:
        parts = [f"{k}={list(getattr(self, k).shape)}" for k in self.keys()]
        return f"Data({', '.join(parts)})"


def sbm(num_nodes: int, num_classes: int, p_in: float, p_out: float, num_features: int, seed: int = 0, *,
        feature_signal: float = 1.0, split=(0.6, 0.2, 0.2), dtype=np.float32) -> Data:
    """A stochastic block model: num_classes blocks of (nearly) equal size; each pair of nodes
    of one block is an edge with probability p_in, of two blocks with p_out (undirected: both
    directions are listed, no self-loops, no duplicates); features x = feature_signal * mu[y] +
    N(0, 1) noise with one random unit-variance centre mu per class; random train/val/test
    masks in the proportions ``split``.  Edge counts are drawn exactly (binomial) and pairs
    sampled without the N^2 matrix, so 100k+ nodes take seconds.  Reproducible for a seed."""
    if num_nodes < 1 or num_classes < 1 or num_features < 1:
        raise ValueError("sbm: num_nodes, num_classes and num_features must be >= 1")
    for name, p in (("p_in", p_in), ("p_out", p_out)):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"sbm: {name} must be a probability, got {p}")
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(num_nodes) % num_classes).astype(np.int64)
    members = [np.flatnonzero(y == c) for c in range(num_classes)]
    sizes = np.array([len(m) for m in members], np.float64)
    pairs_in = sizes * (sizes - 1) / 2
    pairs_all = num_nodes * (num_nodes - 1) / 2
    n_in = rng.binomial(int(pairs_in.sum()), p_in) if pairs_in.sum() > 0 else 0
    n_out = rng.binomial(int(pairs_all - pairs_in.sum()), p_out) if pairs_all > pairs_in.sum() else 0
    # within blocks: a block drawn by its pair count, two of its members
    cls = rng.choice(num_classes, size=n_in, p=pairs_in / pairs_in.sum()) if n_in else np.zeros(0, np.int64)
    u = np.empty(n_in, np.int64)
    v = np.empty(n_in, np.int64)
    for c in range(num_classes):
        sel = np.flatnonzero(cls == c)
        u[sel] = members[c][rng.integers(0, len(members[c]), len(sel))]
        v[sel] = members[c][rng.integers(0, len(members[c]), len(sel))]
    # between blocks: uniform pairs, those of two different blocks kept
    bu, bv = np.zeros(0, np.int64), np.zeros(0, np.int64)
    while len(bu) < n_out:
        k = int((n_out - len(bu)) * 1.3) + 16
        a, b = rng.integers(0, num_nodes, k), rng.integers(0, num_nodes, k)
        keep = y[a] != y[b]
        bu, bv = np.concatenate([bu, a[keep]]), np.concatenate([bv, b[keep]])
    u, v = np.concatenate([u, bu[:n_out]]), np.concatenate([v, bv[:n_out]])
    keep = u != v
    lo, hi = np.minimum(u[keep], v[keep]), np.maximum(u[keep], v[keep])
    key = np.unique(lo * num_nodes + hi)
    lo, hi = key // num_nodes, key % num_nodes
    edge_index = np.stack([np.concatenate([lo, hi]), np.concatenate([hi, lo])])
    order = np.lexsort((edge_index[1], edge_index[0]))
    edge_index = np.ascontiguousarray(edge_index[:, order]).astype(np.int64)
    mu = rng.standard_normal((num_classes, num_features))
    x = (feature_signal * mu[y] + rng.standard_normal((num_nodes, num_features))).astype(dtype)
    perm = rng.permutation(num_nodes)
    n_train, n_val = int(split[0] * num_nodes), int(split[1] * num_nodes)
    masks = [np.zeros(num_nodes, bool) for _ in range(3)]
    masks[0][perm[:n_train]] = True
    masks[1][perm[n_train:n_train + n_val]] = True
    masks[2][perm[n_train + n_val:]] = True
    return Data(x=x, edge_index=edge_index, y=y, train_mask=masks[0], val_mask=masks[1], test_mask=masks[2])


def karate_club() -> Data:
    """Zachary's karate club (networkx's copy): 34 nodes, 78 undirected edges (both
    directions listed), one-hot features (34, 34), y = the club each member joined (0: Mr. Hi,
    1: Officer), train_mask = the two leaders (nodes 0 and 33), test_mask = the others."""
    import networkx  # an optional dependency (the test extra): only this function needs it
    g = networkx.karate_club_graph()
    u, v = np.array(list(g.edges())).T
    edge_index = np.stack([np.concatenate([u, v]), np.concatenate([v, u])]).astype(np.int64)
    edge_index = edge_index[:, np.lexsort((edge_index[1], edge_index[0]))]
    y = np.array([0 if g.nodes[i]["club"] == "Mr. Hi" else 1 for i in range(g.number_of_nodes())], np.int64)
    train = np.zeros(34, bool)
    train[[0, 33]] = True
    return Data(x=np.eye(34, dtype=np.float32), edge_index=edge_index, y=y, train_mask=train, test_mask=~train)


__all__ = ["Data", "karate_club", "sbm"]
