"""NumPy references for the creation kernels (arange, linspace, random): csrc/kernels/cpu/random.c."""
from __future__ import annotations

import numpy as np

from ._refbase import Reference

_GAMMA = np.uint64(0x9E3779B97F4A7C15)


def _mix64(z):
    with np.errstate(over="ignore"):
        z = np.asarray(z, dtype=np.uint64) + _GAMMA
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def random_values(seed: int, idx, dist: int, dtype, lo: float, hi: float) -> np.ndarray:
    """Values the random kernel draws for global element indices ``idx``, bit for bit."""
    idx = np.asarray(idx, dtype=np.uint64)
    key = _mix64(np.uint64(seed))
    with np.errstate(over="ignore"):
        b0 = _mix64(key + np.uint64(2) * idx * _GAMMA)
        b1 = _mix64(key + (np.uint64(2) * idx + np.uint64(1)) * _GAMMA)
    if dist == 0:
        u = (b0 >> np.uint64(40)).astype(np.float64) * 2.0 ** -24 if np.dtype(dtype) == np.float32 \
            else (b0 >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
        v = lo + (hi - lo) * u
    elif dist == 1:
        u1 = ((b0 >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * 2.0 ** -53
        u2 = (b1 >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
        v = lo + hi * (np.sqrt(-2.0 * np.log(u1)) * np.cos(6.283185307179586 * u2))
    else:
        span = int(hi - lo)
        v = lo + np.array([(int(b) * span) >> 64 for b in b0.ravel()], dtype=np.float64).reshape(b0.shape)
    return v.astype(dtype)


def _tile_slices(shape, tiles, tile):
    grid = [-(-d // t) for d, t in zip(shape, tiles)]
    idx = np.unravel_index(tile, grid)
    return tuple(slice(i * t, min(d, i * t + t)) for d, t, i in zip(shape, tiles, idx))


def _random_case(rng, dt):
    shape, tiles = (5, 4, 7), (2, 3, 4)
    tile = int(rng.integers(3 * 2 * 2))
    ts = [s.stop - s.start for s in _tile_slices(shape, tiles, tile)]
    dist = int(rng.integers(3))
    lo, hi = [(-1.5, 2.0), (0.5, 2.0), (-3.0, 9.0)][dist]
    args = dict(n=int(np.prod(ts)), tile=tile, seed=int(rng.integers(2**62)), dist=dist, nd=3, lo=lo, hi=hi)
    for d in range(8):
        args[f"d{d}"], args[f"t{d}"] = (shape[d], tiles[d]) if d < 3 else (1, 1)
    return args, [np.zeros(args["n"], dt)]


def _random_ref(a, y):
    shape, tiles = [a[f"d{d}"] for d in range(a["nd"])], [a[f"t{d}"] for d in range(a["nd"])]
    idx = np.arange(np.prod(shape)).reshape(shape)[_tile_slices(shape, tiles, a["tile"])]
    return {0: random_values(a["seed"], idx.ravel(), a["dist"], y.dtype, a["lo"], a["hi"])}


def linspace_ref(start: float, end: float, steps: int, dtype) -> np.ndarray:
    """torch.linspace's values: the step in the element type, the second half counted down from end."""
    dtype = np.dtype(dtype)
    k = np.arange(steps)
    if dtype.kind == "i":
        s, e = np.int64(start), np.int64(end)
        step = (float(e) - float(s)) / (steps - 1) if steps > 1 else 0.0
        up = (k < steps // 2) | (steps == 1)
        return np.where(up, s + step * k, e - step * (steps - k - 1)).astype(dtype)
    s, e = dtype.type(start), dtype.type(end)
    step = (e - s) / dtype.type(steps - 1) if steps > 1 else dtype.type(0)
    out = np.where(k < steps // 2, s + step * k.astype(dtype), e - step * (steps - k - 1).astype(dtype))
    return (out if steps > 1 else np.full(steps, s)).astype(dtype)


def _linspace_case(rng, dt):
    steps, tile = int(rng.integers(7, 10)), int(rng.integers(3))
    n = min(3, steps - 3 * tile)
    return dict(n=n, tile=tile, ts=3, steps=steps, start=-3.0, end=10.0), [np.zeros(n, dt)]


REFERENCES = {
    "random": Reference(_random_case, _random_ref),
    "arange": Reference(
        lambda rng, dt: (dict(n=4, tile=2, ts=5, start=-1.5, step=0.25), [np.zeros(4, dt)]),
        lambda a, y: {0: (a["start"] + a["step"] * np.arange(10, 14, dtype=np.float64)).astype(y.dtype)}),
    "linspace": Reference(_linspace_case, lambda a, y: {
        0: linspace_ref(a["start"], a["end"], a["steps"], y.dtype)[a["tile"] * a["ts"]:][:a["n"]]}),
}
