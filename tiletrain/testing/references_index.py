"""NumPy references for the index, scatter and CSR block kernels (merged into
references.REFERENCES; csrc/kernels/cpu/index.c, sparse.c).

Index tiles are viewed as (a, d, b) around the indexed axis; the indexed tile holds
positions [V0, V0 + NV).  The cases mix indices inside the tile, in other tiles and out of
range (negative, huge): the kernels must skip all but the first."""
from __future__ import annotations

import numpy as np

from ._refbase import Reference

MA, NE, NB, NV, V0 = 2, 5, 3, 4, 6


def _idx(rng, shape):
    i = rng.integers(V0 - 2, V0 + NV + 2, shape).astype(np.int64)
    flat = i.reshape(-1)
    flat[:3] = [V0, V0 + NV - 1, np.iinfo(np.int64).min]
    flat[-1] = np.iinfo(np.int64).max
    return i


def _gather_case(rng, dt):
    vec = int(rng.integers(2))
    idx = _idx(rng, (NE,) if vec else (MA, NE, NB))
    a = dict(ma=MA, ne=NE, nb=NB, nv=NV, vec=vec, first=int(rng.integers(2)), v0=float(V0))
    return a, [idx, rng.standard_normal((MA, NV, NB)).astype(dt), rng.standard_normal((MA, NE, NB)).astype(dt)]


def _full_idx(a, idx):
    return np.broadcast_to(idx[None, :, None], (MA, NE, NB)) if a["vec"] else idx


def _gather_ref(a, idx, x, y):
    out = np.zeros_like(y) if a["first"] else y.copy()
    full = _full_idx(a, idx)
    for r, i, b in np.ndindex(MA, NE, NB):
        j = full[r, i, b]
        if V0 <= j < V0 + NV:
            out[r, i, b] = x[r, j - V0, b]
    return {2: out}


def _scatter_case(rng, dt, counted=False):
    vec = int(rng.integers(2))
    idx = _idx(rng, (NE,) if vec else (MA, NE, NB))
    a = dict(ma=MA, ne=NE, nb=NB, nv=NV, vec=vec, op=int(rng.integers(4)), v0=float(V0))
    bufs = [idx, rng.standard_normal((MA, NE, NB)).astype(dt), rng.standard_normal((MA, NV, NB)).astype(dt)]
    if counted:
        bufs.append(rng.integers(0, 2, (MA, NV, NB)).astype(dt))
    return a, bufs


def _combine(op, y, v):
    if op == 0:
        return y + v
    if op == 1:
        return y if np.isnan(y) else (v if (v > y or np.isnan(v)) else y)
    if op == 2:
        return y if np.isnan(y) else (v if (v < y or np.isnan(v)) else y)
    return v


def _scatter_ref(a, idx, src, y, cnt=None):
    out = y.astype(np.float64).copy()
    c = None if cnt is None else cnt.astype(np.float64).copy()
    full = _full_idx(a, idx)
    for r, i, b in np.ndindex(MA, NE, NB):
        j = full[r, i, b]
        if not V0 <= j < V0 + NV:
            continue
        o = (r, j - V0, b)
        v = float(src[r, i, b])
        out[o] = v if c is not None and c[o] == 0 else _combine(a["op"], out[o], v)
        if c is not None:
            c[o] += 1
    return {2: out} if c is None else {2: out, 3: c}


# CSR block: MR rows, NC columns, NX feature columns; one column index out of range (skipped)
MR, NC, NX = 4, 5, 3


def _csr(rng):
    counts = np.array([2, 0, 3, 1])
    rowptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    cols = np.concatenate([np.sort(rng.choice(NC, c, replace=False)) for c in counts]).astype(np.int64)
    return rowptr, cols


def _csr_dense(rowptr, cols, vals):
    d = np.zeros((MR, NC))
    for r in range(MR):
        for k in range(rowptr[r], rowptr[r + 1]):
            d[r, cols[k]] += vals[k]
    return d


def _mm_case(rng, dt):
    rowptr, cols = _csr(rng)
    nnz = int(rowptr[-1])
    a = dict(mr=MR, nc=NC, nx=NX, first=int(rng.integers(2)), alpha=0.75, nnz=float(nnz))
    return a, [rowptr, cols, rng.standard_normal(nnz).astype(dt), rng.standard_normal((NC, NX)).astype(dt),
               rng.standard_normal((MR, NX)).astype(dt)]


def _mm_ref(a, rowptr, cols, vals, x, y):
    base = 0 if a["first"] else y
    return {4: base + a["alpha"] * _csr_dense(rowptr, cols, vals) @ x}


def _mm_t_case(rng, dt):
    rowptr, cols = _csr(rng)
    nnz = int(rowptr[-1])
    a = dict(mr=MR, nc=NC, nx=NX, first=int(rng.integers(2)), alpha=0.75, nnz=float(nnz))
    return a, [rowptr, cols, rng.standard_normal(nnz).astype(dt), rng.standard_normal((MR, NX)).astype(dt),
               rng.standard_normal((NC, NX)).astype(dt)]


def _mm_t_ref(a, rowptr, cols, vals, g, dx):
    base = 0 if a["first"] else dx
    return {4: base + a["alpha"] * _csr_dense(rowptr, cols, vals).T @ g}


def _sddmm_case(rng, dt):
    rowptr, cols = _csr(rng)
    nv = int(rowptr[-1]) + 2  # padded block
    a = dict(mr=MR, nc=NC, nx=NX, nv=nv, first=int(rng.integers(2)), nnz=float(rowptr[-1]))
    return a, [rowptr, cols, rng.standard_normal((MR, NX)).astype(dt), rng.standard_normal((NC, NX)).astype(dt),
               rng.standard_normal(nv).astype(dt)]


def _sddmm_ref(a, rowptr, cols, g, x, dv):
    out = np.zeros(a["nv"]) if a["first"] else dv.astype(np.float64).copy()
    for r in range(MR):
        for k in range(rowptr[r], rowptr[r + 1]):
            out[k] += g[r] @ x[cols[k]]
    return {4: out}


REFERENCES: dict[str, Reference] = {
    "index_gather": Reference(_gather_case, _gather_ref),
    "index_scatter": Reference(_scatter_case, _scatter_ref),
    "index_scatter_count": Reference(lambda rng, dt: _scatter_case(rng, dt, counted=True), _scatter_ref),
    "csr_mm": Reference(_mm_case, _mm_ref),
    "csr_mm_t": Reference(_mm_t_case, _mm_t_ref),
    "csr_sddmm": Reference(_sddmm_case, _sddmm_ref),
}
