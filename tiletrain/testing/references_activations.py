"""NumPy references for the activation and dropout kernels."""
from __future__ import annotations

from math import erf, sqrt

import numpy as np

from ._refbase import Reference, _r

_erf = np.vectorize(erf)


def gelu_ref(x, approx):
    x = x.astype(np.float64)
    if approx:
        return 0.5 * x * (1 + np.tanh(sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf(x / sqrt(2)))


def gelu_grad_ref(x, approx):
    x = x.astype(np.float64)
    if approx:
        u = sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)
        t = np.tanh(u)
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * sqrt(2 / np.pi) * (1 + 3 * 0.044715 * x * x)
    return 0.5 * (1 + _erf(x / sqrt(2))) + x * np.exp(-0.5 * x * x) / sqrt(2 * np.pi)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x.astype(np.float64)))


_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(z):
    with np.errstate(over="ignore"):
        z = (np.asarray(z, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def dropout_mask(seed: int, tile: int, n: int, p: float) -> np.ndarray:
    """Keep mask of one tile, bit for bit what the C kernel draws."""
    with np.errstate(over="ignore"):
        base = _splitmix64(np.uint64(seed) ^ _splitmix64(np.uint64(tile)))
        bits = _splitmix64(base + np.arange(n, dtype=np.uint64))
    u = (bits >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    return u >= p


REFERENCES = {
    "gelu": Reference(
        lambda rng, dt: (dict(n=9, approx=int(rng.integers(2))), [_r(rng, dt, 9) * 3, np.zeros(9, dt)]),
        lambda a, x, y: {1: gelu_ref(x, a["approx"])}),
    "gelu_backward": Reference(
        lambda rng, dt: (dict(n=9, approx=int(rng.integers(2))), [_r(rng, dt, 9) * 3, _r(rng, dt, 9), np.zeros(9, dt)]),
        lambda a, x, g, dx: {2: g * gelu_grad_ref(x, a["approx"])}),
    "relu": Reference(lambda rng, dt: (dict(n=9), [_r(rng, dt, 9), np.zeros(9, dt)]),
                      lambda a, x, y: {1: np.maximum(x, 0)}),
    "relu_backward": Reference(lambda rng, dt: (dict(n=9), [_r(rng, dt, 9), _r(rng, dt, 9), np.zeros(9, dt)]),
                               lambda a, x, g, dx: {2: np.where(x > 0, g, 0)}),
    "silu": Reference(lambda rng, dt: (dict(n=9), [_r(rng, dt, 9) * 3, np.zeros(9, dt)]),
                      lambda a, x, y: {1: x * _sigmoid(x)}),
    "silu_backward": Reference(
        lambda rng, dt: (dict(n=9), [_r(rng, dt, 9) * 3, _r(rng, dt, 9), np.zeros(9, dt)]),
        lambda a, x, g, dx: {2: g * _sigmoid(x) * (1 + x * (1 - _sigmoid(x)))}),
    "dropout": Reference(
        lambda rng, dt: (dict(n=64, tile=int(rng.integers(100)), seed=int(rng.integers(2**62)), p=0.3),
                         [_r(rng, dt, 64), np.zeros(64, dt)]),
        lambda a, x, y: {1: np.where(dropout_mask(a["seed"], a["tile"], a["n"], a["p"]), x / (1 - a["p"]), 0)}),
}
