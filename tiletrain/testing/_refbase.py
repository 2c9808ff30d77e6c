"""Base of the kernel reference tables (imported by references.py and its family modules)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Reference:
    case: Callable
    ref: Callable


def _r(rng, dt, *shape):
    return rng.standard_normal(shape).astype(dt)


def _pos(rng, dt, *shape):
    return (rng.random(shape) + 0.5).astype(dt)


def round_to(x, dtype) -> np.ndarray:
    """x rounded to nearest even into ``dtype`` in one rounding, as tiletrain's cast does.
    NumPy rounds float64 -> float16 directly; ml_dtypes rounds float64 -> bfloat16 through
    float32 (two roundings), so for that pair the float64 value is first rounded to odd into
    float32 (truncate, set the last bit when inexact), which makes the second rounding exact."""
    import ml_dtypes

    x = np.asarray(x)
    dtype = np.dtype(dtype)
    if x.dtype != np.float64 or dtype != np.dtype(ml_dtypes.bfloat16):
        with np.errstate(over="ignore", invalid="ignore"):  # out of range: inf, as intended
            return x.astype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        back = f.astype(np.float64)
    inexact = (back != x) & ~np.isnan(x)
    bits = f.view(np.uint32).copy()
    bits[inexact & (np.abs(back) > np.abs(x))] -= 1  # one step toward zero (sign-magnitude bits)
    bits[inexact] |= 1
    return bits.view(np.float32).astype(dtype)
