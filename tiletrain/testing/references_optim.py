"""NumPy references for the optimizer and gradient-clipping kernels (PyTorch's formulas)."""
from __future__ import annotations

import numpy as np

from ._refbase import Reference, _pos, _r


def adamw_ref(a, g, p, m, v):
    p = p * (1 - a["lr"] * a["weight_decay"])
    m = a["beta1"] * m + (1 - a["beta1"]) * g
    v = a["beta2"] * v + (1 - a["beta2"]) * g * g
    denom = np.sqrt(v) / np.sqrt(a["bc2"]) + a["eps"]
    return {1: p - (a["lr"] / a["bc1"]) * m / denom, 2: m, 3: v}


def adamw_comp_ref(a, g, p, m, v, u):
    m = a["beta1"] * m + (1 - a["beta1"]) * g
    v = a["beta2"] * v + (1 - a["beta2"]) * g * g
    first = a["sc_a"] * m + a["sc_b"] * (1 - a["beta1"]) * g
    u = (a["lr"] / a["bc1"]) * first / (np.sqrt(v / a["bc2"]) + a["eps"]) + a["lr"] * a["weight_decay"] * p
    return {1: p - u, 2: m, 3: v, 4: u}


def sgd_momentum_ref(a, g, p, buf):
    d = g + a["weight_decay"] * p
    buf = d if a["first"] else a["momentum"] * buf + (1 - a["dampening"]) * d
    step = d + a["momentum"] * buf if a["nesterov"] else buf
    return {1: p - a["lr"] * step, 2: buf}


def _adamw_case(rng, dt):
    t = int(rng.integers(1, 10))
    return (dict(n=9, lr=1e-2, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.1, bc1=1 - 0.9 ** t,
                 bc2=1 - 0.99 ** t),
            [_r(rng, dt, 9), _r(rng, dt, 9), _r(rng, dt, 9) * 0.1, _pos(rng, dt, 9) * 0.01])


def _adamw_comp_case(rng, dt):
    a, _ = _adamw_case(rng, dt)
    D = int(rng.integers(0, 5))
    sc_a = 0.9 ** D
    a.update(sc_a=sc_a, sc_b=(1 - sc_a) / (1 - 0.9))
    return a, [_r(rng, dt, 9), _r(rng, dt, 9), _r(rng, dt, 9) * 0.1, _pos(rng, dt, 9) * 0.01, np.zeros(9, dt)]


def _sgdm_case(rng, dt):
    return (dict(n=9, first=int(rng.integers(2)), nesterov=int(rng.integers(2)), lr=0.1, momentum=0.9,
                 dampening=0.0, weight_decay=0.01),
            [_r(rng, dt, 9), _r(rng, dt, 9), _r(rng, dt, 9)])


REFERENCES = {
    "adamw": Reference(_adamw_case, adamw_ref),
    "adamw_comp": Reference(_adamw_comp_case, adamw_comp_ref),
    "sgd": Reference(lambda rng, dt: (dict(n=9, lr=0.1, weight_decay=0.01), [_r(rng, dt, 9), _r(rng, dt, 9)]),
                     lambda a, g, p: {1: p - a["lr"] * (g + a["weight_decay"] * p)}),
    "sgd_momentum": Reference(_sgdm_case, sgd_momentum_ref),
    "sumsq_acc": Reference(lambda rng, dt: (dict(m=2, k=5, n=3), [_r(rng, dt, 2, 5, 3), _r(rng, dt, 2, 3)]),
                           lambda a, x, y: {1: y + (x.astype(np.float64) ** 2).sum(axis=1)}),
    "sqrt_scalar": Reference(lambda rng, dt: (dict(n=4), [_pos(rng, dt, 4), np.zeros(4, dt)]),
                             lambda a, x, y: {1: np.sqrt(x)}),
    "clip_scale": Reference(
        lambda rng, dt: (dict(m=1, k=12, n=1, max_norm=float(rng.choice([0.5, 100.0]))),
                         [_r(rng, dt, 12), np.array([4.0], dt)]),
        lambda a, g, s: {0: g * min(1.0, a["max_norm"] / (np.sqrt(s[0]) + 1e-6))}),
}
