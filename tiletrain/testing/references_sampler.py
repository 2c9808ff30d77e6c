"""NumPy reference of the GraphSAINT sampler kernel (csrc/kernels/cpu/sampler.c): the same
splitmix64 draws, so the reference reproduces a sample exactly.  All buffers are int64
whatever the task's dtype."""
from __future__ import annotations

import numpy as np

from ._refbase import Reference

M64 = (1 << 64) - 1


def _mix(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _draw(key: int, i: int, n: int) -> int:
    return _mix(key ^ _mix(i)) % n if n > 0 else 0


def _deg(rowptr, u: int) -> int:
    return max(int(rowptr[u + 1] - rowptr[u]), 1)


def saint_sample_ref(rowptr, col, n, e, kind, roots, length, seed, step, cap) -> np.ndarray:
    """The kernel's output buffer (cap entries; those it does not write are left as 0 here)."""
    key = _mix(((seed * 0x2545F4914F6CDD1D) & M64) ^ _mix(step & M64))
    nodes, tries = [], 0
    for r in range(roots):
        if kind == 0:
            nodes.append(int(np.searchsorted(rowptr, _draw(key, r, e), side="right") - 1) if e else _draw(key, r, n))
        elif kind == 1:
            if e == 0:
                break
            while True:  # GraphSAINT's p_e ~ 1/deg(u) + 1/deg(v), by rejection from uniform edges
                p = _draw(key, 2 * tries, e)
                u = int(np.searchsorted(rowptr, p, side="right") - 1)
                w = 1.0 / _deg(rowptr, u) + 1.0 / _deg(rowptr, int(col[p]))
                q = (_mix(key ^ _mix(2 * tries + 1)) >> 11) * 2.0 ** -53
                tries += 1
                if 2.0 * q < w:
                    break
            nodes += [u, int(col[p])]
        else:
            base = r * (length + 1)
            u = _draw(key, base, n)
            nodes.append(u)
            for s in range(1, length + 1):
                d = int(rowptr[u + 1] - rowptr[u])
                if d > 0:
                    u = int(col[rowptr[u] + _draw(key, base + s, d)])
                nodes.append(u)
    sn = np.unique(np.array(nodes, np.int64))
    out = np.zeros(cap, np.int64)
    m = len(sn)
    out[0], out[1] = m, -1
    if 2 + m > cap:
        return out
    out[2:2 + m] = sn
    pos = {int(v): i for i, v in enumerate(sn)}
    src, dst, eid = [], [], []
    for i, u in enumerate(sn):
        for p in range(rowptr[u], rowptr[u + 1]):
            if int(col[p]) in pos:
                src.append(i)
                dst.append(pos[int(col[p])])
                eid.append(p)
    k = len(src)
    if 2 + m + 3 * k > cap:
        return out
    out[2 + m:2 + m + 3 * k] = src + dst + eid
    out[1] = k
    return out


_N = 9
_ROWPTR = np.array([0, 2, 4, 5, 5, 8, 9, 11, 12, 12], np.int64)  # nodes 3 and 8: no out-edges
_COL = np.array([1, 4, 0, 2, 1, 0, 5, 6, 4, 4, 7, 6], np.int64)


def _case(rng, dt):
    kind = int(rng.integers(3))
    cap = int(rng.choice([64, 12]))  # 12: may overflow (k = -1)
    a = dict(n=_N, e=len(_COL), kind=kind, roots=3, length=2, seed=int(rng.integers(100)), step=int(rng.integers(5)),
             cap=cap)
    return a, [_ROWPTR.copy(), _COL.copy(), np.zeros(cap, np.int64)]


def _ref(a, rowptr, col, out):
    exp = saint_sample_ref(rowptr, col, **a)
    m, k = int(exp[0]), int(exp[1])
    got = out.copy()  # the kernel writes only the counts and the used prefix
    used = 2 + (m if 2 + m <= a["cap"] else 0) + (3 * k if k >= 0 else 0)
    got[:used] = exp[:used]
    return {2: got}


REFERENCES: dict[str, Reference] = {"saint_sample": Reference(_case, _ref)}
