"""NumPy references for the attention kernels (merged into references.REFERENCES)."""
from __future__ import annotations

import numpy as np

from ._refbase import Reference, _r


# the y tile's heads are the columns c0 .. c0 + nh*hd - 1 of an x tile of width xw = 3 head tiles
def _heads_split_case(rng, dt):
    nb, nt, nh, hd = 2, 3, 4, 5
    return (dict(nb=nb, nt=nt, nh=nh, hd=hd, xw=3 * nh * hd, c0=nh * hd),
            [_r(rng, dt, nb, nt, 3 * nh * hd), np.zeros((nb, nh, nt, hd), dt)])


def _heads_split_ref(a, x, y):
    cols = x[..., a["c0"]:a["c0"] + a["nh"] * a["hd"]]
    return {1: cols.reshape(a["nb"], a["nt"], a["nh"], a["hd"]).transpose(0, 2, 1, 3)}


def _heads_merge_case(rng, dt):
    nb, nh, nt, hd = 2, 4, 3, 5
    return (dict(nb=nb, nh=nh, nt=nt, hd=hd, xw=3 * nh * hd, c0=nh * hd),
            [_r(rng, dt, nb, nh, nt, hd), _r(rng, dt, nb, nt, 3 * nh * hd)])


def _heads_merge_ref(a, y, x):
    out = x.copy()  # the other columns are untouched
    out[..., a["c0"]:a["c0"] + a["nh"] * a["hd"]] = y.transpose(0, 2, 1, 3).reshape(a["nb"], a["nt"], -1)
    return {1: out}


# (causal, qoff, koff, tq, tk): a diagonal block (partly masked), a block below the diagonal,
# a non-causal block with a smaller key tile
_ATTN_BLOCKS = [(1, 4, 4, 4, 4), (1, 8, 4, 3, 4), (0, 0, 4, 4, 3)]
# Tiles of several row blocks (the CPU kernels take 64 query rows at a time where rows see
# part of the key tile, up to 256 where they see all of it): a diagonal tile whose last rows
# see every key, a fully visible tile below the diagonal, a non-causal one
ATTN_MULTI_BLOCKS = [(1, 0, 0, 300, 200), (1, 300, 0, 280, 300), (0, 0, 0, 600, 70)]


def _mask(causal, qoff, koff, tq, tk):
    if not causal:
        return np.ones((tq, tk), bool)
    return (koff + np.arange(tk))[None, :] <= (qoff + np.arange(tq))[:, None]


def _attn_fwd_case(rng, dt):
    causal, qoff, koff, tq, tk = _ATTN_BLOCKS[int(rng.integers(len(_ATTN_BLOCKS)))]
    init = int(rng.integers(2))
    bh, hd, group = 4, 3, int(rng.choice([1, 2, 4]))  # group: query rows per key/value row (GQA)
    m = _r(rng, dt, bh, tq)
    l = (rng.random((bh, tq)) + 0.5).astype(dt)
    if init:  # the kernel must overwrite o, m, l
        o = np.full((bh, tq, hd), np.nan, dt)
        m, l = np.full((bh, tq), np.nan, dt), np.full((bh, tq), np.nan, dt)
    else:
        o = _r(rng, dt, bh, tq, hd)
    args = dict(bh=bh, tq=tq, tk=tk, hd=hd, qoff=qoff, koff=koff, causal=causal, init=init, group=group, scale=0.6)
    bk = bh // group
    return args, [_r(rng, dt, bh, tq, hd), _r(rng, dt, bk, tk, hd), _r(rng, dt, bk, tk, hd), o, m, l]


def _group(a):
    return max(int(a.get("group", 1)), 1)


def _expand(x, a):
    """kv rows repeated for the query rows that read them (row b of q reads row b // group)"""
    return np.repeat(x, _group(a), axis=0)


def _fold(x, a):
    """the inverse of _expand for gradients: rows of one group summed"""
    return x.reshape(-1, _group(a), *x.shape[1:]).sum(axis=1)


def _attn_fwd_ref(a, q, k, v, o, m, l):
    q, k, v, o, m, l = (x.astype(np.float64) for x in (q, k, v, o, m, l))
    k, v = _expand(k, a), _expand(v, a)
    s = a["scale"] * q @ np.swapaxes(k, 1, 2)
    mask = _mask(a["causal"], a["qoff"], a["koff"], a["tq"], a["tk"])
    s = np.where(mask, s, -np.inf)
    if a["init"]:
        m, l, o = np.full_like(m, -np.inf), np.zeros_like(l), np.zeros_like(o)
    mnew = np.maximum(m, s.max(axis=2))
    with np.errstate(invalid="ignore"):  # rows that have seen no key yet: -inf - -inf
        p = np.nan_to_num(np.exp(s - mnew[..., None]), nan=0.0)
        alpha = np.nan_to_num(np.exp(m - mnew), nan=0.0)
    return {3: alpha[..., None] * o + p @ v, 4: mnew, 5: alpha * l + p.sum(axis=2)}


def _attn_fwd_norm_case(rng, dt):
    bh, tq, hd = 2, 3, 4
    l = (rng.random((bh, tq)) + 0.5).astype(dt)
    return dict(bh=bh, tq=tq, hd=hd), [_r(rng, dt, bh, tq, hd), _r(rng, dt, bh, tq), l]


def _attn_fwd_norm_ref(a, o, m, l):
    return {0: o / l[..., None], 1: m + np.log(l)}


def _attn_bwd_rows_case(rng, dt):
    bh, tq, hd = 2, 3, 4
    return (dict(bh=bh, tq=tq, hd=hd),
            [_r(rng, dt, bh, tq, hd), _r(rng, dt, bh, tq, hd), _r(rng, dt, bh, tq),
             np.zeros((bh, tq, 2), dt)])


def _attn_bwd_rows_ref(a, do, o, lse, st):
    return {3: np.stack([lse, (do.astype(np.float64) * o).sum(axis=2)], axis=2)}


def _attn_bwd_case(rng, dt):
    causal, qoff, koff, tq, tk = _ATTN_BLOCKS[int(rng.integers(len(_ATTN_BLOCKS)))]
    initq, initkv = int(rng.integers(2)), int(rng.integers(2))
    bh, hd, group = 4, 3, int(rng.choice([1, 2, 4]))
    bk = bh // group
    st = np.stack([_r(rng, dt, bh, tq) + 2.0, _r(rng, dt, bh, tq)], axis=2)
    dq, dk, dv = _r(rng, dt, bh, tq, hd), _r(rng, dt, bk, tk, hd), _r(rng, dt, bk, tk, hd)
    if initq:
        dq[:] = np.nan
    if initkv:
        dk[:] = np.nan
        dv[:] = np.nan
    args = dict(bh=bh, tq=tq, tk=tk, hd=hd, qoff=qoff, koff=koff, causal=causal, initq=initq, initkv=initkv,
                group=group, scale=0.6)
    return args, [_r(rng, dt, bh, tq, hd), _r(rng, dt, bk, tk, hd), _r(rng, dt, bk, tk, hd),
                  _r(rng, dt, bh, tq, hd), st, dq, dk, dv]


def _attn_bwd_ref(a, q, k, v, do, st, dq, dk, dv):
    q, k, v, do, st, dq, dk, dv = (x.astype(np.float64) for x in (q, k, v, do, st, dq, dk, dv))
    k, v = _expand(k, a), _expand(v, a)
    sc = a["scale"]
    s = sc * q @ np.swapaxes(k, 1, 2)
    mask = _mask(a["causal"], a["qoff"], a["koff"], a["tq"], a["tk"])
    p = np.where(mask, np.exp(s - st[..., 0:1]), 0.0)
    dp = do @ np.swapaxes(v, 1, 2)
    ds = p * (dp - st[..., 1:2])
    return {5: (0 if a["initq"] else dq) + sc * ds @ k,
            6: (0 if a["initkv"] else dk) + _fold(sc * np.swapaxes(ds, 1, 2) @ q, a),
            7: (0 if a["initkv"] else dv) + _fold(np.swapaxes(p, 1, 2) @ do, a)}


def rope_tables(positions, D: int, theta: float, dtype=np.float64):
    """(cos, sin) of shape (len(positions), D // 2): angles position * inv_freq rounded to
    float32 as transformers computes them, cos and sin then in ``dtype``."""
    i = np.arange(0, D, 2, dtype=np.float32)
    # theta ** (i / D) correctly rounded to float32 (as powf and torch's float pow give it:
    # NumPy 2.x's own float32 power may be 2 ulp off), then the float32 division
    power = np.power(np.float64(np.float32(theta)), (i / np.float32(D)).astype(np.float64)).astype(np.float32)
    inv = (np.float32(1.0) / power).astype(np.float32)
    ang = (np.asarray(positions, np.float32)[:, None] * inv[None, :]).astype(np.float32)
    return np.cos(ang.astype(dtype)), np.sin(ang.astype(dtype))


def rope_apply(x, positions, theta: float, inverse: bool = False):
    """Rotate-half rotary embedding of x (..., T, D) at ``positions`` (T,), in float64."""
    D = x.shape[-1]
    c, s = rope_tables(positions, D, theta)
    s = -s if inverse else s
    x = x.astype(np.float64)
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def _rope_case(rng, dt):
    m, k, n = 3, 5, 8
    return (dict(m=m, k=k, n=n, koff=int(rng.integers(0, 300)), inverse=int(rng.integers(2)),
                 pos0=int(rng.integers(0, 3)) * int(rng.integers(0, 200)), theta=10000.0),
            [_r(rng, dt, m, k, n), np.zeros((m, k, n), dt)])


def _rope_ref(a, x, y):
    pos = a["pos0"] + a["koff"] + np.arange(a["k"])
    return {1: rope_apply(x, pos, a["theta"], bool(a["inverse"]))}


REFERENCES: dict = {
    "rope": Reference(_rope_case, _rope_ref),
    "heads_split": Reference(_heads_split_case, _heads_split_ref),
    "heads_merge": Reference(_heads_merge_case, _heads_merge_ref),
    "attn_fwd": Reference(_attn_fwd_case, _attn_fwd_ref),
    "attn_fwd_norm": Reference(_attn_fwd_norm_case, _attn_fwd_norm_ref),
    "attn_bwd_rows": Reference(_attn_bwd_rows_case, _attn_bwd_rows_ref),
    "attn_bwd": Reference(_attn_bwd_case, _attn_bwd_ref),
}
