"""NumPy references for the reduction and loss kernels of tiletrain/ops/reduce.py and
tiletrain/functional/losses.py (merged into references.REFERENCES).  Span tiles are viewed as
(m, k, n) around the reduced axis; reduced buffers are (m, n)."""
from __future__ import annotations

import numpy as np

from ._refbase import Reference, _pos, _r

M, K, N = 3, 5, 4


def _span(rng, dt, **extra):
    return dict(m=M, k=K, n=N, first=int(rng.integers(2)), **extra)


def _ties(rng, dt, *shape):
    """Small integers: ties are common (first-index rules are exercised)."""
    return rng.integers(-2, 3, size=shape).astype(dt)


def _arg_ref(a, x, v, i, ci=None):
    x = x.astype(np.float64)
    key = -x if a["ismin"] else x
    key = np.where(np.isnan(key), np.inf, key)
    loc = np.argmax(key, axis=1)               # first maximum (first NaN)
    tv = np.take_along_axis(x, loc[:, None, :], axis=1)[:, 0, :]
    pos = a["koff"] + loc
    ti = pos if ci is None else pos * a["inner"] + np.take_along_axis(ci, loc[:, None, :], axis=1)[:, 0, :]
    if not a["first"]:
        better = np.where(np.isnan(tv), ~np.isnan(v), ~np.isnan(v) & ((tv < v) if a["ismin"] else (tv > v)))
        tv, ti = np.where(better, tv, v), np.where(better, ti, i)
    nv = 1 if ci is None else 2  # buffer index of v (i follows it)
    return {nv: tv, nv + 1: ti}


def _arg_case(rng, dt):
    x = _ties(rng, dt, M, K, N)
    x[0, 1, 0] = np.nan
    return _span(rng, dt, koff=int(rng.integers(4)), ismin=int(rng.integers(2))), \
        [x, _ties(rng, dt, M, N), rng.integers(0, 9, (M, N)).astype(np.int64)]


def _carry_case(rng, dt):
    x = _ties(rng, dt, M, K, N)
    return _span(rng, dt, koff=int(rng.integers(4)), inner=7, ismin=int(rng.integers(2))), \
        [x, rng.integers(0, 7, (M, K, N)).astype(np.int64), _ties(rng, dt, M, N),
         rng.integers(0, 9, (M, N)).astype(np.int64)]


def _scatter_case(rng, dt):
    koff = int(rng.integers(3))
    return dict(m=M, k=K, n=N, koff=koff), [np.full((M, K, N), np.nan, dt),
                                            rng.integers(0, K + koff + 2, (M, N)).astype(np.int64), _r(rng, dt, M, N)]


def _scatter_ref(a, dx, i, g):
    pos = a["koff"] + np.arange(a["k"])[None, :, None]
    return {0: np.where(pos == i[:, None, :], g[:, None, :], 0.0)}


def _sqdev_ref(a, x, mu, y):
    d = x.astype(np.float64) - mu.astype(np.float64)[:, None, :]
    return {2: (0 if a["first"] else y) + a["alpha"] * (d * d).sum(axis=1)}


def _term(x, p):
    x = np.abs(x.astype(np.float64))
    return (x != 0).astype(np.float64) if p == 0 else x ** p


def _pnorm_bwd_ref(a, x, out, g, dx):
    p, x, o = a["p"], x.astype(np.float64), out.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.sign(x) * np.abs(x) ** (p - 1) / o ** (p - 1)
    return {3: np.where((o == 0) | (p == 0), 0.0, r) * g}


def _softplus_neg(x):
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(-x, 0)


def _bce(x, t, w, pw):
    x, t = x.astype(np.float64), t.astype(np.float64)
    lw = 1 + (pw.astype(np.float64) - 1) * t
    return w * ((1 - t) * x + lw * _softplus_neg(x)), lw


def _bce_bwd_ref(a, x, t, w, pw, g, dx, dt):
    _, lw = _bce(x, t, w, pw)
    x64, t64 = x.astype(np.float64), t.astype(np.float64)
    s = w.astype(np.float64) * g
    sig = 1 / (1 + np.exp(-x64))
    return {5: s * ((1 - t64) + lw * (sig - 1)), 6: s * (-x64 + (pw - 1.0) * _softplus_neg(x64))}


_P = (0.0, 1.0, 2.0, 3.5)
REFERENCES: dict[str, Reference] = {
    "min_axis": Reference(
        lambda rng, dt: (_span(rng, dt), [_r(rng, dt, M, K, N), _r(rng, dt, M, N)]),
        lambda a, x, y: {1: x.min(axis=1) if a["first"] else np.minimum(y, x.min(axis=1))}),
    "arg_axis": Reference(_arg_case, lambda a, x, v, i: _arg_ref(a, x, v, i)),
    "arg_carry": Reference(_carry_case, lambda a, x, ci, v, i: _arg_ref(a, x, v, i, ci)),
    "arg_scatter": Reference(_scatter_case, _scatter_ref),
    "sqdev_axis": Reference(
        lambda rng, dt: (_span(rng, dt, alpha=0.25), [_r(rng, dt, M, K, N), _r(rng, dt, M, N), _pos(rng, dt, M, N)]),
        _sqdev_ref),
    "expsum_axis": Reference(
        lambda rng, dt: (_span(rng, dt), [_r(rng, dt, M, K, N), _r(rng, dt, M, N), _pos(rng, dt, M, N)]),
        lambda a, x, mx, y: {2: (0 if a["first"] else y) + np.exp(x.astype(np.float64) - mx[:, None, :]).sum(axis=1)}),
    "eq_mask": Reference(
        lambda rng, dt: (dict(n=9), [_ties(rng, dt, 9), _ties(rng, dt, 9), np.zeros(9, dt)]),
        lambda a, x, v, y: {2: (x == v).astype(np.float64)}),
    "lse_finish": Reference(
        lambda rng, dt: (dict(n=7), [np.append(_r(rng, dt, 5), np.array([-np.inf, np.inf], dt)), _pos(rng, dt, 7),
                                     np.zeros(7, dt)]),
        lambda a, mx, s, y: {2: np.where(np.isinf(mx), mx, mx + np.log(s.astype(np.float64)))}),
    "pnorm_axis": Reference(
        lambda rng, dt: (_span(rng, dt, p=float(rng.choice(_P))), [_ties(rng, dt, M, K, N), _pos(rng, dt, M, N)]),
        lambda a, x, y: {1: (0 if a["first"] else y) + _term(x, a["p"]).sum(axis=1)}),
    "pnorm_root": Reference(
        lambda rng, dt: (dict(n=7, p=float(rng.choice(_P))), [_pos(rng, dt, 7), np.zeros(7, dt)]),
        lambda a, s, y: {1: s if a["p"] in (0.0, 1.0) else s.astype(np.float64) ** (1 / a["p"])}),
    "pnorm_bwd": Reference(
        lambda rng, dt: (dict(n=9, p=float(rng.choice(_P))),
                         [_r(rng, dt, 9), np.append(_pos(rng, dt, 8), np.zeros(1, dt)), _r(rng, dt, 9),
                          np.zeros(9, dt)]),
        _pnorm_bwd_ref),
    "absdiff": Reference(
        lambda rng, dt: (dict(n=9), [_ties(rng, dt, 9), _ties(rng, dt, 9), np.zeros(9, dt)]),
        lambda a, u, w, y: {2: np.abs(u.astype(np.float64) - w)}),
    "absdiff_bwd": Reference(
        lambda rng, dt: (dict(n=9, alpha=0.5), [_ties(rng, dt, 9), _ties(rng, dt, 9), _r(rng, dt, 9),
                                                np.zeros(9, dt)]),
        lambda a, u, w, g, dx: {3: a["alpha"] * np.sign(u.astype(np.float64) - w) * g}),
    "bce_logits": Reference(
        lambda rng, dt: (dict(n=9), [_r(rng, dt, 9) * 20, rng.random(9).astype(dt), _pos(rng, dt, 9),
                                     _pos(rng, dt, 9), np.zeros(9, dt)]),
        lambda a, x, t, w, pw, y: {4: _bce(x, t, w, pw)[0]}),
    "bce_logits_bwd": Reference(
        lambda rng, dt: (dict(n=9), [_r(rng, dt, 9) * 20, rng.random(9).astype(dt), _pos(rng, dt, 9),
                                     _pos(rng, dt, 9), _r(rng, dt, 9), np.zeros(9, dt), np.zeros(9, dt)]),
        _bce_bwd_ref),
}
