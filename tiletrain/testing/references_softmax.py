"""NumPy references for the softmax / log_softmax / cross-entropy kernels (merged into
references.REFERENCES).  Tiles are viewed as (m, k, n) around the span axis; row
statistics are (m, n) buffers."""
from __future__ import annotations

import numpy as np

from ._refbase import Reference

M, K, N = 3, 5, 2


def _r(rng, dt, *shape):
    return rng.standard_normal(shape).astype(dt)


def _stats(rng, dt):
    """Running row statistics (mx, s) as an earlier tile of the row would leave them."""
    mx = _r(rng, dt, M, N)
    s = (rng.random((M, N)) * 3 + 0.5).astype(dt)
    return mx, s


def _merge_stats(x, first, mx, s):
    """Online (max, sum exp(x - max)) along axis 1 of x, merged into (mx, s) unless first."""
    x = x.astype(np.float64)
    tm = x.max(axis=1)
    if first:
        return tm, np.exp(x - tm[:, None, :]).sum(axis=1)
    mx, s = mx.astype(np.float64), s.astype(np.float64)
    nm = np.maximum(mx, tm)
    return nm, s * np.exp(mx - nm) + np.exp(x - nm[:, None, :]).sum(axis=1)


def _probs(x, mx, s):
    return np.exp(x.astype(np.float64) - mx[:, None, :]) / s[:, None, :]


def _stats_case(rng, dt):
    mx, s = _stats(rng, dt)
    return dict(m=M, k=K, n=N, first=int(rng.integers(2))), [_r(rng, dt, M, K, N), mx, s]


def _stats_ref(a, x, mx, s):
    nm, ns = _merge_stats(x, a["first"], mx, s)
    return {1: nm, 2: ns}


def _apply_case(rng, dt):
    x = _r(rng, dt, M, K, N)
    _, s = _stats(rng, dt)
    mx = x.max(axis=1) + rng.random((M, N)).astype(dt)
    return dict(m=M, k=K, n=N, islog=int(rng.integers(2))), [x, np.zeros_like(x), mx.astype(dt), s]


def _apply_ref(a, x, y, mx, s):
    x64 = x.astype(np.float64)
    if a["islog"]:
        return {1: x64 - mx[:, None, :] - np.log(s.astype(np.float64))[:, None, :]}
    return {1: _probs(x, mx, s)}


def _dot_case(rng, dt):
    mx, s = _stats(rng, dt)
    return (dict(m=M, k=K, n=N, first=int(rng.integers(2)), islog=int(rng.integers(2))),
            [_r(rng, dt, M, K, N), _r(rng, dt, M, K, N), mx, s, _r(rng, dt, M, N)])


def _dot_ref(a, x, g, mx, s, d):
    g64 = g.astype(np.float64)
    part = g64.sum(axis=1) if a["islog"] else (g64 * _probs(x, mx, s)).sum(axis=1)
    return {4: part if a["first"] else d + part}


def _bwd_case(rng, dt):
    mx, s = _stats(rng, dt)
    x = _r(rng, dt, M, K, N)
    return (dict(m=M, k=K, n=N, islog=int(rng.integers(2))),
            [x, _r(rng, dt, M, K, N), np.zeros_like(x), mx, s, _r(rng, dt, M, N)])


def _bwd_ref(a, x, g, dx, mx, s, d):
    p = _probs(x, mx, s)
    g64, d64 = g.astype(np.float64), d.astype(np.float64)[:, None, :]
    return {2: g64 - p * d64 if a["islog"] else p * (g64 - d64)}


def _ce_geometry(rng):
    """A tile of the span: ncols columns in tiles of vtile; returns (tile index, its k, col0)."""
    vtile = K
    ncols = int(rng.choice([K, 2 * K, 2 * K + 3]))  # one tile; even; a smaller last tile
    vgrid = -(-ncols // vtile)
    t = int(rng.integers(vgrid))
    tile = int(rng.integers(3)) * vgrid + t          # some row of tiles before it
    return tile, vtile, ncols, t * vtile, min(vtile, ncols - t * vtile), t == vgrid - 1


def _ce_targets(rng, ncols, col0, k, ignore_index):
    """Targets inside and outside this tile, ignored ones and out-of-range ones."""
    pool = [col0, col0 + k - 1, (col0 + k) % ncols, ignore_index, -1, ncols, ncols + 7]
    t = rng.choice(pool, size=(M, N))
    t[0, 0] = col0 + k // 2
    return t.astype(np.int64)


def _ce_fwd_case(rng, dt):
    tile, vtile, ncols, col0, k, _ = _ce_geometry(rng)
    ignore_index = -100
    mx, s = _stats(rng, dt)
    first = int(rng.integers(2))
    loss = _r(rng, dt, M, N)
    args = dict(m=M, k=k, n=N, first=first, tile=tile, vtile=vtile, ncols=ncols, ignore_index=ignore_index)
    return args, [_r(rng, dt, M, k, N), _ce_targets(rng, ncols, col0, k, ignore_index), mx, s, loss,
                  np.full((M, N), 0.5, dt)]


def _ce_fwd_ref(a, x, tgt, mx, s, loss, w):
    vgrid = -(-a["ncols"] // a["vtile"])
    col0 = (a["tile"] % vgrid) * a["vtile"]
    last = a["tile"] % vgrid == vgrid - 1
    k = a["k"]
    valid = (tgt != a["ignore_index"]) & (tgt >= 0) & (tgt < a["ncols"])
    nm, ns = _merge_stats(x, a["first"], mx, s)
    run = np.zeros(tgt.shape) if a["first"] else loss.astype(np.float64)
    inside = valid & (tgt >= col0) & (tgt < col0 + k)
    local = np.clip(tgt - col0, 0, k - 1)
    picked = np.take_along_axis(x.astype(np.float64), local[:, None, :], axis=1)[:, 0, :]
    run = run - np.where(inside, picked, 0.0)
    if last:
        run = np.where(valid, nm + run + np.log(ns), 0.0)
    return {2: nm, 3: ns, 4: run, 5: valid.astype(np.float64)}


def _ce_bwd_case(rng, dt):
    tile, vtile, ncols, col0, k, _ = _ce_geometry(rng)
    ignore_index = int(rng.choice([-100, col0]))  # ignore_index may also be a real class id
    mx, s = _stats(rng, dt)
    x = _r(rng, dt, M, k, N)
    args = dict(m=M, k=k, n=N, tile=tile, vtile=vtile, ncols=ncols, ignore_index=ignore_index)
    return args, [x, np.full_like(x, np.nan), _ce_targets(rng, ncols, col0, k, ignore_index), mx, s,
                  _r(rng, dt, M, N)]


def _ce_bwd_ref(a, x, dx, tgt, mx, s, gr):
    vgrid = -(-a["ncols"] // a["vtile"])
    col0 = (a["tile"] % vgrid) * a["vtile"]
    valid = (tgt != a["ignore_index"]) & (tgt >= 0) & (tgt < a["ncols"])
    p = _probs(x, mx, s)
    cols = col0 + np.arange(a["k"])[None, :, None]
    p = p - (cols == tgt[:, None, :])
    return {1: np.where(valid[:, None, :], p * gr.astype(np.float64)[:, None, :], 0.0)}


REFERENCES: dict[str, Reference] = {
    "softmax_stats": Reference(_stats_case, _stats_ref),
    "softmax_apply": Reference(_apply_case, _apply_ref),
    "softmax_bwd_dot": Reference(_dot_case, _dot_ref),
    "softmax_bwd": Reference(_bwd_case, _bwd_ref),
    "cross_entropy_fwd": Reference(_ce_fwd_case, _ce_fwd_ref),
    "cross_entropy_bwd": Reference(_ce_bwd_case, _ce_bwd_ref),
}
