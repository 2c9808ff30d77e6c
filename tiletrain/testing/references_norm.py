"""NumPy references for the norm kernels (merged into references.REFERENCES).

Row/column kernels see a tile of x as (m, n); row buffers are (m,), column buffers (n,).
References compute in float64 from the buffers' values."""
from __future__ import annotations

import numpy as np

from ._refbase import Reference

M, N = 3, 5


def _r(rng, dt, *shape):
    return rng.standard_normal(shape).astype(dt)


def _f(*arrays):
    return [np.asarray(a, np.float64) for a in arrays]


def _rstd(rng, dt, *shape):
    return (rng.random(shape) + 0.5).astype(dt)


def _stats_case(rng, dt):
    first = int(rng.integers(2))
    na = 0.0 if first else float(rng.integers(1, 9))
    x = (_r(rng, dt, M, N) + 3.0).astype(dt)
    return dict(m=M, n=N, first=first, na=na), [x, _r(rng, dt, M) + 3.0, (rng.random(M) * 4).astype(dt)]


def _stats_ref(a, x, mean, m2):
    x, mean, m2 = _f(x, mean, m2)
    mb, m2b = x.mean(1), ((x - x.mean(1, keepdims=True)) ** 2).sum(1)
    if a["first"]:
        return {1: mb, 2: m2b}
    na, nb = a["na"], float(a["n"])
    delta = mb - mean
    return {1: mean + delta * nb / (na + nb), 2: m2 + m2b + delta ** 2 * na * nb / (na + nb)}


def _xhat(x, mean, rstd):
    return (x - mean[:, None]) * rstd[:, None]


def _ln_rows_ref(a, dy, x, mean, rstd, ra, rb, w):
    dy, x, mean, rstd, ra, rb, w = _f(dy, x, mean, rstd, ra, rb, w)
    g = dy * w
    keep = 0.0 if a["first"] else 1.0
    return {4: keep * ra + a["alpha"] * g.sum(1),
            5: keep * rb + a["alpha"] * (g * _xhat(x, mean, rstd)).sum(1)}


def _ln_x_ref(a, dy, x, dx, mean, rstd, ra, rb, w):
    dy, x, mean, rstd, ra, rb, w = _f(dy, x, mean, rstd, ra, rb, w)
    return {2: rstd[:, None] * (dy * w - ra[:, None] - _xhat(x, mean, rstd) * rb[:, None])}


def _ln_w_ref(a, dy, x, mean, rstd, dw, db):
    dy, x, mean, rstd, dw, db = _f(dy, x, mean, rstd, dw, db)
    keep = 0.0 if a["first"] else 1.0
    return {4: keep * dw + (dy * _xhat(x, mean, rstd)).sum(0), 5: keep * db + dy.sum(0)}


def _rms_rows_ref(a, dy, x, rstd, rb, w):
    dy, x, rstd, rb, w = _f(dy, x, rstd, rb, w)
    keep = 0.0 if a["first"] else 1.0
    return {3: keep * rb + a["alpha"] * (dy * w * x * rstd[:, None]).sum(1)}


def _rms_x_ref(a, dy, x, dx, rstd, rb, w):
    dy, x, rstd, rb, w = _f(dy, x, rstd, rb, w)
    r = rstd[:, None]
    return {2: r * (dy * w - x * r * rb[:, None])}


def _rms_w_ref(a, dy, x, rstd, dw):
    dy, x, rstd, dw = _f(dy, x, rstd, dw)
    return {3: (0.0 if a["first"] else dw) + (dy * x * rstd[:, None]).sum(0)}


def _first(rng):
    return int(rng.integers(2))


def _round(v, dt):
    return np.asarray(v, np.float64).astype(dt).astype(np.float64)


def _ln_row_ref(a, x, y, mean, rstd, w, b):
    """layer_norm_stats + norm_rstd + layer_norm_fwd on a whole row, mean/rstd rounded to x's dtype."""
    dt = x.dtype
    xf = np.float64(x)
    mu = _round(xf.mean(1), dt)
    r = _round(1.0 / np.sqrt(_round(((xf - xf.mean(1, keepdims=True)) ** 2).sum(1), dt) / a["n"] + a["eps"]), dt)
    return {1: (xf - mu[:, None]) * r[:, None] * np.float64(w) + b, 2: mu, 3: r}


def _rms_row_ref(a, x, y, rstd, w):
    dt = x.dtype
    xf = np.float64(x)
    r = _round(1.0 / np.sqrt(_round((xf ** 2).sum(1), dt) / a["n"] + a["eps"]), dt)
    return {1: xf * r[:, None] * w, 2: r}


def _add_ln_row_ref(a, x, r, s, y, mean, rstd, w, b):
    """s = x + r rounded to x's dtype, then layer_norm_row of s."""
    s = x + r
    out = _ln_row_ref(a, s, y, mean, rstd, w, b)
    return {2: s, 3: out[1], 4: out[2], 5: out[3]}


def _add_rms_row_ref(a, x, r, s, y, rstd, w):
    s = x + r
    out = _rms_row_ref(a, s, y, rstd, w)
    return {2: s, 3: out[1], 4: out[2]}


REFERENCES: dict[str, Reference] = {
    "layer_norm_row": Reference(
        lambda rng, dt: (dict(m=M, n=N, first=1, eps=1e-3),
                         [_r(rng, dt, M, N) + 2.0, np.zeros((M, N), dt), np.zeros(M, dt), np.zeros(M, dt),
                          _r(rng, dt, N), _r(rng, dt, N)]),
        _ln_row_ref),
    "rms_norm_row": Reference(
        lambda rng, dt: (dict(m=M, n=N, first=1, eps=1e-3),
                         [_r(rng, dt, M, N), np.zeros((M, N), dt), np.zeros(M, dt), _r(rng, dt, N)]),
        _rms_row_ref),
    "add_layer_norm_row": Reference(
        lambda rng, dt: (dict(m=M, n=N, first=1, eps=1e-3),
                         [_r(rng, dt, M, N) + 2.0, _r(rng, dt, M, N), np.zeros((M, N), dt), np.zeros((M, N), dt),
                          np.zeros(M, dt), np.zeros(M, dt), _r(rng, dt, N), _r(rng, dt, N)]),
        _add_ln_row_ref),
    "add_rms_norm_row": Reference(
        lambda rng, dt: (dict(m=M, n=N, first=1, eps=1e-3),
                         [_r(rng, dt, M, N), _r(rng, dt, M, N), np.zeros((M, N), dt), np.zeros((M, N), dt),
                          np.zeros(M, dt), _r(rng, dt, N)]),
        _add_rms_row_ref),
    "layer_norm_stats": Reference(_stats_case, _stats_ref),
    "rms_norm_stats": Reference(
        lambda rng, dt: (dict(m=M, n=N, first=_first(rng)), [_r(rng, dt, M, N), _rstd(rng, dt, M)]),
        lambda a, x, ss: {1: (0.0 if a["first"] else np.float64(ss)) + (np.float64(x) ** 2).sum(1)}),
    "norm_rstd": Reference(
        lambda rng, dt: (dict(n=7, alpha=0.25, eps=1e-3), [_rstd(rng, dt, 7)]),
        lambda a, s: {0: 1.0 / np.sqrt(a["alpha"] * np.float64(s) + a["eps"])}),
    "layer_norm_fwd": Reference(
        lambda rng, dt: (dict(m=M, n=N), [_r(rng, dt, M, N), np.zeros((M, N), dt), _r(rng, dt, M),
                                          _rstd(rng, dt, M), _r(rng, dt, N), _r(rng, dt, N)]),
        lambda a, x, y, mean, rstd, w, b: {1: _xhat(*_f(x, mean, rstd)) * np.float64(w) + b}),
    "rms_norm_fwd": Reference(
        lambda rng, dt: (dict(m=M, n=N), [_r(rng, dt, M, N), np.zeros((M, N), dt), _rstd(rng, dt, M),
                                          _r(rng, dt, N)]),
        lambda a, x, y, rstd, w: {1: np.float64(x) * rstd[:, None] * w}),
    "layer_norm_bwd_rows": Reference(
        lambda rng, dt: (dict(m=M, n=N, first=_first(rng), alpha=1.0 / 7),
                         [_r(rng, dt, M, N), _r(rng, dt, M, N), _r(rng, dt, M), _rstd(rng, dt, M),
                          _r(rng, dt, M), _r(rng, dt, M), _r(rng, dt, N)]),
        _ln_rows_ref),
    "layer_norm_bwd_x": Reference(
        lambda rng, dt: (dict(m=M, n=N), [_r(rng, dt, M, N), _r(rng, dt, M, N), np.zeros((M, N), dt),
                                          _r(rng, dt, M), _rstd(rng, dt, M), _r(rng, dt, M), _r(rng, dt, M),
                                          _r(rng, dt, N)]),
        _ln_x_ref),
    "layer_norm_bwd_w": Reference(
        lambda rng, dt: (dict(m=M, n=N, first=_first(rng)),
                         [_r(rng, dt, M, N), _r(rng, dt, M, N), _r(rng, dt, M), _rstd(rng, dt, M),
                          _r(rng, dt, N), _r(rng, dt, N)]),
        _ln_w_ref),
    "rms_norm_bwd_rows": Reference(
        lambda rng, dt: (dict(m=M, n=N, first=_first(rng), alpha=1.0 / 7),
                         [_r(rng, dt, M, N), _r(rng, dt, M, N), _rstd(rng, dt, M), _r(rng, dt, M),
                          _r(rng, dt, N)]),
        _rms_rows_ref),
    "rms_norm_bwd_x": Reference(
        lambda rng, dt: (dict(m=M, n=N), [_r(rng, dt, M, N), _r(rng, dt, M, N), np.zeros((M, N), dt),
                                          _rstd(rng, dt, M), _r(rng, dt, M), _r(rng, dt, N)]),
        _rms_x_ref),
    "rms_norm_bwd_w": Reference(
        lambda rng, dt: (dict(m=M, n=N, first=_first(rng)),
                         [_r(rng, dt, M, N), _r(rng, dt, M, N), _rstd(rng, dt, M), _r(rng, dt, N)]),
        _rms_w_ref),
}
