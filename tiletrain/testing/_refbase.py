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
