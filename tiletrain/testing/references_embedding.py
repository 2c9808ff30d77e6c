"""NumPy references for the embedding kernels (merged into references.REFERENCES).

A tile of m ids against a table tile of nv rows starting at row v0 and n columns.  The
cases include ids in other table tiles and out-of-range ids (negative, >= V): the kernels
must skip them."""
from __future__ import annotations

import numpy as np

from ._refbase import Reference

M, N, NV, V0 = 9, 4, 3, 5


def _ids(rng):
    ids = rng.integers(V0 - 2, V0 + NV + 2, M).astype(np.int64)   # in and around the tile
    ids[:3] = [V0, V0 + NV - 1, V0 + 1]                               # some certainly inside
    ids[3:5] = [-1, np.iinfo(np.int64).min]                         # out of range
    ids[5] = np.iinfo(np.int64).max
    return ids


def _inside(ids):
    return (ids >= V0) & (ids < V0 + NV)


def _fwd_case(rng, dt):
    return (dict(m=M, n=N, nv=NV, first=int(rng.integers(2)), v0=float(V0)),
            [_ids(rng), rng.standard_normal((NV, N)).astype(dt), rng.standard_normal((M, N)).astype(dt)])


def _fwd_ref(a, ids, table, y):
    out = np.zeros_like(y) if a["first"] else y.copy()
    sel = _inside(ids)
    out[sel] = table[ids[sel] - V0]
    return {2: out}


def _bwd_case(rng, dt):
    return (dict(m=M, n=N, nv=NV, first=int(rng.integers(2)), v0=float(V0)),
            [_ids(rng), rng.standard_normal((M, N)).astype(dt), rng.standard_normal((NV, N)).astype(dt)])


def _bwd_ref(a, ids, dy, dt):
    out = np.zeros((NV, N)) if a["first"] else np.float64(dt)
    for r in np.flatnonzero(_inside(ids)):
        out[ids[r] - V0] += dy[r]
    return {2: out}


REFERENCES: dict[str, Reference] = {
    "embedding_fwd": Reference(_fwd_case, _fwd_ref),
    "embedding_bwd": Reference(_bwd_case, _bwd_ref),
}
