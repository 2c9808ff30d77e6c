"""NumPy references for the creation kernels (arange, linspace): csrc/kernels/cpu/creation.c."""
from __future__ import annotations

import numpy as np

from ._refbase import Reference


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
    "arange": Reference(
        lambda rng, dt: (dict(n=4, tile=2, ts=5, start=-1.5, step=0.25), [np.zeros(4, dt)]),
        lambda a, y: {0: (a["start"] + a["step"] * np.arange(10, 14, dtype=np.float64)).astype(y.dtype)}),
    "linspace": Reference(_linspace_case, lambda a, y: {
        0: linspace_ref(a["start"], a["end"], a["steps"], y.dtype)[a["tile"] * a["ts"]:][:a["n"]]}),
}
