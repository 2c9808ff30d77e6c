"""NumPy reference for the shape kernel (merged into references.REFERENCES).

region_copy: a box d0 x d1 x d2 x d3 copied between two flat tiles, each addressed by an
element offset and one stride per box axis; the case transposes a block of x, steps along
one axis and broadcasts along another, into a box inside y (the rest of y is kept)."""
from __future__ import annotations

import numpy as np

from ._refbase import Reference, _r


def _case(rng, dt):
    """x a (6, 5, 4) tile, y a (3, 4, 3, 5) tile: y[1 + i0, i1, i2, 1 + i3] = x[1 + 2 i1, i3, i2] over a
    (2, 2, 3, 4) box: i0 broadcasts (stride 0), i1 steps by 2, x's last two axes are swapped."""
    args = dict(d0=2, d1=2, d2=3, d3=4, xo=1 * 20, xs0=0, xs1=2 * 20, xs2=1, xs3=4,
                yo=1 * 60 + 1, ys0=60, ys1=15, ys2=5, ys3=1)
    return args, [_r(rng, dt, 120), _r(rng, dt, 180)]


def _ref(a, x, y):
    out = y.copy()
    for i0 in range(a["d0"]):
        for i1 in range(a["d1"]):
            for i2 in range(a["d2"]):
                for i3 in range(a["d3"]):
                    xi = a["xo"] + i0 * a["xs0"] + i1 * a["xs1"] + i2 * a["xs2"] + i3 * a["xs3"]
                    yi = a["yo"] + i0 * a["ys0"] + i1 * a["ys1"] + i2 * a["ys2"] + i3 * a["ys3"]
                    out[yi] = x[xi]
    return {1: out}


def _contiguous_case(rng, dt):  # the memcpy path: unit inner strides
    return (dict(d0=1, d1=1, d2=3, d3=5, xo=2, xs0=0, xs1=0, xs2=7, xs3=1, yo=1, ys0=0, ys1=0, ys2=6, ys3=1),
            [_r(rng, dt, 30), _r(rng, dt, 20)])


def _either_case(rng, dt):
    return _case(rng, dt) if rng.integers(2) else _contiguous_case(rng, dt)


REFERENCES: dict[str, Reference] = {
    "region_copy": Reference(_either_case, _ref),
}
