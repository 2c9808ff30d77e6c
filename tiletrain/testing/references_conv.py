"""NumPy references for the convolution, pooling and batch-norm kernels (merged into
references.REFERENCES).

A tile is a batch tile (nb, C, l0, l1, l2) with 3-D spatial geometry (1-D and 2-D ops have
unit leading axes): output o*, kernel k*, stride s*, left padding p*, dilation d*.  The
geometries below have padding, strides, dilation and groups, a pointwise (1x1x1) conv for
the im2col-free path, and a ceil_mode-sized pool (last window partly outside the padding)."""
from __future__ import annotations

import itertools

import numpy as np

from ._refbase import Reference


def _geom(l, o, k, s, p, d):
    g = {}
    for name, v in zip("loksp", (l, o, k, s, p)):
        g.update({f"{name}{j}": int(v[j]) for j in range(3)})
    g.update({f"d{j}": int(d[j]) for j in range(3)})
    return g


def _out(l, k, s, p, d):
    return tuple((li + 2 * pi - di * (ki - 1) - 1) // si + 1 for li, ki, si, pi, di in zip(l, k, s, p, d))


CONV_GEOMS = [  # (l, k, s, p, d)
    ((3, 5, 7), (2, 3, 2), (1, 2, 2), (1, 1, 1), (1, 1, 2)),
    ((1, 4, 5), (1, 1, 1), (1, 1, 1), (0, 0, 0), (1, 1, 1)),   # pointwise
]
# pools: (l, o, k, s, p, d); the second has ceil_mode's extra output along the last axis
POOL_GEOMS = [
    ((3, 5, 6), None, (2, 2, 3), (1, 2, 2), (1, 1, 1), (1, 2, 1)),
    ((1, 5, 6), (1, 2, 4), (1, 3, 3), (1, 2, 2), (0, 1, 1), (1, 1, 1)),
]


def _g(geom):
    l, k, s, p, d = geom
    return l, _out(l, k, s, p, d), k, s, p, d


def _unpack(a):
    return [tuple(a[f"{n}{j}"] for j in range(3)) for n in "loksp"] + [tuple(a[f"d{j}"] for j in range(3))]


def _padded(x, l, o, k, s, p, d, value=0.0):
    """x padded left by p and right far enough for every window; the window slices."""
    right = [max(0, (oi - 1) * si + (ki - 1) * di + 1 - pi - li)
             for li, oi, ki, si, pi, di in zip(l, o, k, s, p, d)]
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(p, right)), constant_values=value)

    def window(kk):
        return (slice(None), slice(None)) + tuple(slice(ki * di, ki * di + si * (oi - 1) + 1, si)
                                                  for ki, di, si, oi in zip(kk, d, s, o))
    return xp, window


def _conv_case(bwd):
    def case(rng, dt):
        l, o, k, s, p, d = _g(CONV_GEOMS[int(rng.integers(len(CONV_GEOMS)))])
        nb, cin, cout, groups = 2, 4, 6, 2
        a = dict(nb=nb, cin=cin, cout=cout, groups=groups, **_geom(l, o, k, s, p, d))
        x = rng.standard_normal((nb, cin, *l)).astype(dt)
        w = rng.standard_normal((cout, cin // groups, *k)).astype(dt)
        y = rng.standard_normal((nb, cout, *o)).astype(dt)
        if bwd == "x":
            return a, [y, np.zeros_like(x), w]
        if bwd == "w":
            a["first"] = int(rng.integers(2))
            return a, [x, y, rng.standard_normal(w.shape).astype(dt), rng.standard_normal(cout).astype(dt)]
        return a, [x, y, w, rng.standard_normal(cout).astype(dt)]
    return case


def _conv_blocks(a):
    cg, cog = a["cin"] // a["groups"], a["cout"] // a["groups"]
    return [(slice(g * cg, (g + 1) * cg), slice(g * cog, (g + 1) * cog)) for g in range(a["groups"])]


def _conv_fwd_ref(a, x, y, w, b):
    l, o, k, s, p, d = _unpack(a)
    xp, win = _padded(x, l, o, k, s, p, d)
    out = np.broadcast_to(b[None, :, None, None, None], y.shape).astype(np.float64)
    for kk in itertools.product(*map(range, k)):
        xw = xp[win(kk)]
        for ci, co in _conv_blocks(a):
            out[:, co] += np.einsum("ncabe,oc->noabe", xw[:, ci], w[(co, slice(None)) + kk])
    return {1: out}


def _conv_bwd_x_ref(a, dy, dx, w):
    l, o, k, s, p, d = _unpack(a)
    dxp, win = _padded(np.zeros(dx.shape), l, o, k, s, p, d)
    for kk in itertools.product(*map(range, k)):
        for ci, co in _conv_blocks(a):
            dxp[win(kk)][:, ci] += np.einsum("noabe,oc->ncabe", dy[:, co], w[(co, slice(None)) + kk])
    return {1: dxp[(slice(None), slice(None)) + tuple(slice(pi, pi + li) for pi, li in zip(p, l))]}


def _conv_bwd_w_ref(a, x, dy, dw, db):
    l, o, k, s, p, d = _unpack(a)
    xp, win = _padded(x, l, o, k, s, p, d)
    dw = np.zeros(dw.shape) if a["first"] else dw.astype(np.float64)
    db = (0 if a["first"] else db) + dy.sum(axis=(0, 2, 3, 4))
    for kk in itertools.product(*map(range, k)):
        xw = xp[win(kk)]
        for ci, co in _conv_blocks(a):
            dw[(co, slice(None)) + kk] += np.einsum("noabe,ncabe->oc", dy[:, co], xw[:, ci])
    return {2: dw, 3: db}


def _pool_case(kind, bwd):
    def case(rng, dt):
        l, o, k, s, p, d = POOL_GEOMS[int(rng.integers(len(POOL_GEOMS)))]
        if kind == "avg":
            d = (1, 1, 1)
        o = o or _out(l, k, s, p, d)
        nb, c = 2, 3
        a = dict(nb=nb, c=c, **_geom(l, o, k, s, p, d))
        if kind == "avg":   # e: the padded input's end, l + p for whole images, further in a halo window
            extra = int(rng.integers(2))
            a.update(cip=int(rng.integers(2)), divisor=float(rng.choice([0.0, 3.0])),
                     **{f"e{j}": l[j] + p[j] + extra for j in range(3)})
        x = rng.standard_normal((nb, c, *l)).astype(dt)
        y = rng.standard_normal((nb, c, *o)).astype(dt)
        if not bwd:
            return a, [x, y]
        return a, ([x, y, np.zeros_like(x)] if kind == "max" else [y, np.zeros_like(x)])
    return case


def _windows(a):
    """(output index, [input indices of its window, in kernel order], pool size) per output."""
    l, o, k, s, p, d = _unpack(a)
    for oi in itertools.product(*map(range, o)):
        idx, pool = [], 1
        for j in range(3):
            st = oi[j] * s[j] - p[j]
            pool *= min(st + k[j], a.get(f"e{j}", l[j] + p[j])) - st
        for kk in itertools.product(*map(range, k)):
            ii = tuple(oi[j] * s[j] - p[j] + kk[j] * d[j] for j in range(3))
            if all(0 <= ii[j] < l[j] for j in range(3)):
                idx.append(ii)
        yield oi, idx, pool


def _first_max(vals):
    best = 0
    for i, v in enumerate(vals):
        if v > vals[best] or np.isnan(v):
            best = i
    return best


def _max_pool_ref(bwd):
    def ref(a, x, *rest):
        out = np.zeros(x.shape) if bwd else np.zeros(rest[0].shape)
        for oi, idx, _ in _windows(a):
            for n, c in np.ndindex(*x.shape[:2]):
                vals = [x[(n, c) + ii] for ii in idx]
                if bwd:
                    out[(n, c) + idx[_first_max(vals)]] += rest[0][(n, c) + oi]
                else:
                    out[(n, c) + oi] = max(vals)
        return {2 if bwd else 1: out}
    return ref


def _avg_pool_ref(bwd):
    def ref(a, src, dst):
        out = np.zeros(dst.shape)
        for oi, idx, pool in _windows(a):
            div = a["divisor"] or (pool if a["cip"] else len(idx))
            for ii in idx:
                if bwd:
                    out[(slice(None), slice(None)) + ii] += src[(slice(None), slice(None)) + oi] / div
                else:
                    out[(slice(None), slice(None)) + oi] += src[(slice(None), slice(None)) + ii] / div
        return {1: out}
    return ref


NB, C, HW = 3, 4, 5


def _bn_case(kind):
    def case(rng, dt):
        def r(*shape):
            return rng.standard_normal(shape).astype(dt)
        a = dict(nb=NB, c=C, hw=HW)
        x = r(NB, C, HW) + 2.0
        if kind == "stats":
            a.update(first=int(rng.integers(2)), na=7.0)
            return a, [x, r(C), np.abs(r(C)) + 1.0]
        mean, rstd = r(C), np.abs(r(C)) + 0.5
        if kind == "fwd":
            return a, [x, np.zeros_like(x), mean, rstd, r(C), r(C)]
        if kind == "bwd_stats":
            a["first"] = int(rng.integers(2))
            return a, [r(NB, C, HW), x, mean, rstd, r(C), r(C)]
        a["alpha"] = float(rng.choice([0.0, 1.0 / 15]))
        return a, [r(NB, C, HW), x, np.zeros_like(x), mean, rstd, r(C), r(C), r(C)]
    return case


def _bn_stats_ref(a, x, mean, m2):
    xs = x.transpose(1, 0, 2).reshape(C, -1).astype(np.float64)
    mb, qb = xs.mean(1), ((xs - xs.mean(1, keepdims=True)) ** 2).sum(1)
    if a["first"]:
        return {1: mb, 2: qb}
    na, nb = a["na"], xs.shape[1]
    delta = mb - mean
    return {1: mean + delta * nb / (na + nb), 2: m2 + qb + delta ** 2 * na * nb / (na + nb)}


def _col(v):
    return v[None, :, None]


def _bn_bwd_stats_ref(a, dy, x, mean, rstd, sdy, sdyx):
    xhat = (x - _col(mean)) * _col(rstd)
    s, sx = dy.sum((0, 2)), (dy * xhat).sum((0, 2))
    return {4: s if a["first"] else sdy + s, 5: sx if a["first"] else sdyx + sx}


def _bn_bwd_x_ref(a, dy, x, dx, mean, rstd, w, sdy, sdyx):
    xhat = (x - _col(mean)) * _col(rstd)
    return {2: _col(w * rstd) * (dy - a["alpha"] * (_col(sdy) + xhat * _col(sdyx)))}


def _region_add_case(rng, dt):
    """x a (6, 5, 4) tile, y a (3, 4, 3, 5) tile: y[1 + i0, i1, i2, 1 + i3] += x[1 + 2 i1, i3, i2]."""
    args = dict(d0=2, d1=2, d2=3, d3=4, xo=1 * 20, xs0=0, xs1=2 * 20, xs2=1, xs3=4,
                yo=1 * 60 + 1, ys0=60, ys1=15, ys2=5, ys3=1)
    return args, [rng.standard_normal(120).astype(dt), rng.standard_normal(180).astype(dt)]


def _region_add_ref(a, x, y):
    out = y.astype(np.float64)
    for i in itertools.product(*(range(a[f"d{j}"]) for j in range(4))):
        xi = a["xo"] + sum(i[j] * a[f"xs{j}"] for j in range(4))
        yi = a["yo"] + sum(i[j] * a[f"ys{j}"] for j in range(4))
        out[yi] += x[xi]
    return {1: out}


def _bn_merge_case(rng, dt):
    a = dict(c=C, first=int(rng.integers(2)), na=float(rng.integers(1, 9)), nb=float(rng.integers(1, 9)))
    return a, [rng.standard_normal(C).astype(dt), np.abs(rng.standard_normal(C)).astype(dt),
               rng.standard_normal(C).astype(dt), np.abs(rng.standard_normal(C)).astype(dt)]


def _bn_merge_ref(a, mb, qb, mean, m2):
    if a["first"]:
        return {2: mb, 3: qb}
    na, nb = a["na"], a["nb"]
    delta = mb - mean
    return {2: mean + delta * nb / (na + nb), 3: m2 + qb + delta ** 2 * na * nb / (na + nb)}


REFERENCES: dict[str, Reference] = {
    "region_add": Reference(_region_add_case, _region_add_ref),
    "bn_merge": Reference(_bn_merge_case, _bn_merge_ref),
    "conv_fwd": Reference(_conv_case(None), _conv_fwd_ref),
    "conv_bwd_x": Reference(_conv_case("x"), _conv_bwd_x_ref),
    "conv_bwd_w": Reference(_conv_case("w"), _conv_bwd_w_ref),
    "max_pool_fwd": Reference(_pool_case("max", False), _max_pool_ref(False)),
    "max_pool_bwd": Reference(_pool_case("max", True), _max_pool_ref(True)),
    "avg_pool_fwd": Reference(_pool_case("avg", False), _avg_pool_ref(False)),
    "avg_pool_bwd": Reference(_pool_case("avg", True), _avg_pool_ref(True)),
    "bn_stats": Reference(_bn_case("stats"), _bn_stats_ref),
    "bn_fwd": Reference(_bn_case("fwd"),
                        lambda a, x, y, mean, rstd, w, b: {1: (x - _col(mean)) * _col(rstd * w) + _col(b)}),
    "bn_bwd_stats": Reference(_bn_case("bwd_stats"), _bn_bwd_stats_ref),
    "bn_bwd_x": Reference(_bn_case("bwd_x"), _bn_bwd_x_ref),
}
