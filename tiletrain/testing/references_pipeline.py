"""NumPy reference for the synthetic spin kernel (scheduling experiments): after waiting
`usec` microseconds it writes c = a + b when wmask & 1 and accumulates d += a when wmask & 2;
buffers whose bit is clear are left as they were."""
from __future__ import annotations

from ._refbase import Reference, _r


def _spin_case(rng, dt):
    n = int(rng.integers(1, 9))
    return (dict(n=n, usec=int(rng.integers(0, 3)), sleep=int(rng.integers(2)), wmask=int(rng.integers(4))),
            [_r(rng, dt, n), _r(rng, dt, n), _r(rng, dt, n), _r(rng, dt, n)])


def spin_ref(a, x, y, c, d):
    return {2: x + y if a["wmask"] & 1 else c, 3: d + x if a["wmask"] & 2 else d}


REFERENCES = {"spin": Reference(_spin_case, spin_ref)}
