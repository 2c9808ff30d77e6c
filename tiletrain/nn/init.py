"""torch.nn.init: fill a tensor in place (under no_grad) with torch's fan rules, gains and
draws: after ``manual_seed(s)`` (or with ``generator=``) the values are torch's
(tiletrain/tensors/rng.py)."""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..ops import assign_, no_grad
from ..ops.creation import full_like, normal_values, uniform_values
from ..tensors import Tensor, from_numpy
from ..tensors.creation import _generator

__all__ = ["calculate_gain", "constant_", "ones_", "zeros_", "normal_", "uniform_", "xavier_uniform_",
           "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "trunc_normal_", "orthogonal_"]


def _tensor(t, what: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeError(f"nn.init.{what}: expected a tiletrain Tensor, got {type(t).__name__}")
    return t


def _fill(t: Tensor, y: Tensor) -> Tensor:
    with no_grad():
        assign_(t, y)
    return t


def calculate_gain(nonlinearity: str, param=None) -> float:
    """torch.nn.init.calculate_gain."""
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "sigmoid")
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, numbers.Real) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _fans(t: Tensor) -> tuple[int, int]:
    """torch's fan_in, fan_out: dims 1 and 0, times the receptive field (dims 2...)."""
    if t.ndim < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive = 1
    for s in t.shape[2:]:
        receptive *= s
    return t.shape[1] * receptive, t.shape[0] * receptive


def _uniform(t: Tensor, a: float, b: float, generator) -> Tensor:
    return _fill(t, uniform_values(t, a, b, generator))


def _normal(t: Tensor, mean: float, std: float, generator) -> Tensor:
    return _fill(t, normal_values(t, mean, std, generator))


def constant_(tensor: Tensor, val) -> Tensor:
    return _fill(_tensor(tensor, "constant_"), full_like(tensor, val))


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1.0)


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0.0)


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    return _uniform(_tensor(tensor, "uniform_"), a, b, generator)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    return _normal(_tensor(tensor, "normal_"), mean, std, generator)


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0,
                  generator=None) -> Tensor:
    """Normal(mean, std) truncated to [a, b], drawn as torch's: where [a, b] holds more than
    30 % of the mass, normals with the ones outside redrawn (a whole new draw each round);
    else uniforms on [a, b] accepted against the normal's density (rejection)."""
    t = _tensor(tensor, "trunc_normal_")
    if not a < b:
        raise ValueError(f"nn.init.trunc_normal_: a ({a}) must be below b ({b})")
    g = _generator("trunc_normal_", generator)
    n, dt = t.numel(), t.dtype

    def cdf(x):
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0
    if cdf((b - mean) / std) - cdf((a - mean) / std) > 0.3:
        lo, hi = dt.type(a), dt.type(b)
        v = g.normal(n, dt, mean, std)
        for _ in range(10000):
            bad = (v < lo) | (v > hi)
            if not bad.any():
                break
            v = np.where(bad, g.normal(n, dt, mean, std), v)
    else:
        v = _trunc_by_rejection(g, n, dt, mean, std, a, b)
    return _fill(t, from_numpy(np.ascontiguousarray(v.reshape(t.shape)), tiles=t.tiles if t.ndim else None))


def _trunc_by_rejection(g, n: int, dt, mean: float, std: float, a: float, b: float) -> np.ndarray:
    """torch's rejection branch: candidates uniform on [a, b], kept where log U < the
    normal's log density relative to its peak in [a, b]; the rejected ones redrawn."""
    log_peak = -0.5 * ((max(a, min(mean, b)) - mean) / std) ** 2

    def log_pdf(x):
        return (((x - dt.type(mean)) / dt.type(std)) ** 2 * dt.type(-0.5) - dt.type(log_peak)).astype(dt)
    result = g.uniform(n, dt, a, b)
    pending = np.log(g.uniform(n, dt)) > log_pdf(result)
    for _ in range(10000):
        if not pending.any():
            break
        cand = g.uniform(n, dt, a, b)
        result = np.where(pending, cand, result)
        pending = np.where(pending, np.log(g.uniform(n, dt)) > log_pdf(cand), pending)
    return result


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """A (semi-)orthogonal matrix (rows x the other dimensions flattened), times gain, as torch's
    (QR of a normal draw, the signs of R's diagonal folded in)."""
    t = _tensor(tensor, "orthogonal_")
    if t.ndim < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    rows, cols = t.shape[0], t.numel() // t.shape[0]
    flat = _generator("orthogonal_", generator).normal(rows * cols, t.dtype).reshape(rows, cols)
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q *= np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(t, from_numpy(np.ascontiguousarray((q * gain).reshape(t.shape).astype(t.dtype)),
                               tiles=t.tiles))


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    fan_in, fan_out = _fans(_tensor(tensor, "xavier_uniform_"))
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    a = math.sqrt(3.0) * std
    return _uniform(tensor, -a, a, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    fan_in, fan_out = _fans(_tensor(tensor, "xavier_normal_"))
    return _normal(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)), generator)


def _kaiming_std(t: Tensor, a, mode: str, nonlinearity: str) -> float:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _fans(t)
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                     generator=None) -> Tensor:
    bound = math.sqrt(3.0) * _kaiming_std(_tensor(tensor, "kaiming_uniform_"), a, mode, nonlinearity)
    return _uniform(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    generator=None) -> Tensor:
    return _normal(tensor, 0.0, _kaiming_std(_tensor(tensor, "kaiming_normal_"), a, mode, nonlinearity), generator)
