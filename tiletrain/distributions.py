"""torch.distributions' everyday families over tiletrain's ops: Normal, Uniform, Bernoulli and
Categorical (sample / rsample, log_prob, entropy, mean, variance, cdf where torch has it) and
kl_divergence between two of one family.  log_prob, entropy and kl_divergence are torch's
formulas (their values and gradients compare with torch's); the samples are tiletrain's draws,
not torch's.  (tiletrain.distribution, singular, is how a tensor's tiles are spread over MPI
ranks: another thing.)"""
from __future__ import annotations

import math

import numpy as np

from .functional import binary_cross_entropy_with_logits, log_softmax, softmax
from .ops import no_grad
from .ops.creation import full, rand, randn
from .ops.elementwise import (add, clamp, div, eq, erf, gt, le, log, log1p, lt, mul, neg, sigmoid, softplus, sqrt,
                              sub, where)
from .ops.index import gather, multinomial
from .ops.reduce import sum as _sum
from .ops.shape import expand, reshape, squeeze, transpose, unsqueeze
from .tensors import Tensor, tensor
from .tensors.tensor import get_default_dtype

__all__ = ["Bernoulli", "Categorical", "Distribution", "Normal", "Uniform", "kl_divergence"]


def _tensor(v, like=None) -> Tensor:
    """v as a tensor (a number or array-like in like's dtype, else the default dtype)."""
    if isinstance(v, Tensor):
        return v
    return tensor(v, dtype=like.dtype if like is not None else get_default_dtype())


def _broadcast(*vals):
    like = next((v for v in vals if isinstance(v, Tensor)), None)
    ts = [_tensor(v, like) for v in vals]
    shape = np.broadcast_shapes(*(tuple(t.shape) for t in ts))
    return [t if tuple(t.shape) == shape else expand(t, shape) for t in ts]


def _eps(t: Tensor) -> float:
    return float(np.finfo(np.dtype(t.dtype)).eps)


class Distribution:
    """The common surface: batch_shape, event_shape, sample (no gradient), rsample where the
    family reparameterises, stddev."""
    has_rsample = False

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None):
        self.batch_shape, self.event_shape = tuple(batch_shape), tuple(event_shape)

    def _extended(self, sample_shape) -> tuple:
        return tuple(sample_shape) + self.batch_shape + self.event_shape

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no reparameterised sample (rsample)")

    @property
    def stddev(self) -> Tensor:
        return sqrt(self.variance)


class Normal(Distribution):
    """torch.distributions.Normal(loc, scale)."""
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = _broadcast(loc, scale)
        super().__init__(self.loc.shape)

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def stddev(self) -> Tensor:
        return self.scale

    @property
    def variance(self) -> Tensor:
        return mul(self.scale, self.scale)

    def rsample(self, sample_shape=()) -> Tensor:
        eps = randn(self._extended(sample_shape), dtype=self.loc.dtype)
        return add(self.loc, mul(eps, self.scale))

    def log_prob(self, value) -> Tensor:
        value = _tensor(value, self.loc)
        z = sub(value, self.loc)
        return sub(sub(neg(div(mul(z, z), mul(self.variance, 2.0))), log(self.scale)), math.log(math.sqrt(2 * math.pi)))

    def entropy(self) -> Tensor:
        return add(log(self.scale), 0.5 + 0.5 * math.log(2 * math.pi))

    def cdf(self, value) -> Tensor:
        z = div(sub(_tensor(value, self.loc), self.loc), mul(self.scale, math.sqrt(2)))
        return mul(add(erf(z), 1.0), 0.5)


class Uniform(Distribution):
    """torch.distributions.Uniform(low, high): [low, high)."""
    has_rsample = True

    def __init__(self, low, high, validate_args=None):
        self.low, self.high = _broadcast(low, high)
        super().__init__(self.low.shape)

    @property
    def mean(self) -> Tensor:
        return mul(add(self.low, self.high), 0.5)

    @property
    def variance(self) -> Tensor:
        w = sub(self.high, self.low)
        return div(mul(w, w), 12.0)

    def rsample(self, sample_shape=()) -> Tensor:
        u = rand(self._extended(sample_shape), dtype=self.low.dtype)
        return add(self.low, mul(u, sub(self.high, self.low)))

    def log_prob(self, value) -> Tensor:
        value = _tensor(value, self.low)
        inside = mul(le(self.low, value).to(value.dtype), gt(self.high, value).to(value.dtype))
        return sub(log(inside), log(sub(self.high, self.low)))

    def entropy(self) -> Tensor:
        return log(sub(self.high, self.low))

    def cdf(self, value) -> Tensor:
        return clamp(div(sub(_tensor(value, self.low), self.low), sub(self.high, self.low)), 0.0, 1.0)


class Bernoulli(Distribution):
    """torch.distributions.Bernoulli(probs=None, logits=None)."""

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            self.probs = _tensor(probs)
            p = clamp(self.probs, _eps(self.probs), 1 - _eps(self.probs))
            self.logits = sub(log(p), log1p(neg(p)))
        else:
            self.logits = _tensor(logits)
            self.probs = sigmoid(self.logits)
        super().__init__(self.probs.shape)

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def variance(self) -> Tensor:
        return mul(self.probs, sub(1.0, self.probs))

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            shape = self._extended(sample_shape)
            p = self.probs if tuple(self.probs.shape) == shape else expand(self.probs, shape)
            return lt(rand(shape, dtype=p.dtype), p).to(p.dtype)

    def log_prob(self, value) -> Tensor:
        logits, value = _broadcast(self.logits, _tensor(value, self.logits))
        return neg(binary_cross_entropy_with_logits(logits, value, reduction="none"))

    def entropy(self) -> Tensor:
        return binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")


class Categorical(Distribution):
    """torch.distributions.Categorical(probs=None, logits=None): categories on the last dim."""

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            p = _tensor(probs)
            self.probs = div(p, _sum(p, -1, keepdim=True))
            self.logits = log(clamp(self.probs, _eps(self.probs), 1 - _eps(self.probs)))
        else:
            self.logits = log_softmax(_tensor(logits), -1)
            self.probs = softmax(self.logits, -1)
        self._num_events = self.probs.shape[-1]
        super().__init__(self.probs.shape[:-1])

    @property
    def mean(self) -> Tensor:
        """NaN per batch element, as torch's (a categorical has no mean)."""
        return full(self.batch_shape, float("nan"), dtype=self.probs.dtype)

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            n = int(np.prod(sample_shape)) if sample_shape else 1
            p2 = reshape(self.probs, (-1, self._num_events))
            draws = multinomial(p2, n, replacement=True)  # (batch, n)
            return reshape(transpose(draws, 0, 1), tuple(sample_shape) + self.batch_shape)

    def log_prob(self, value) -> Tensor:
        value = _tensor(value) if not isinstance(value, Tensor) else value
        shape = np.broadcast_shapes(tuple(value.shape), self.batch_shape)
        v = unsqueeze(value if tuple(value.shape) == shape else expand(value, shape), -1)
        lp = self.logits if tuple(self.logits.shape[:-1]) == shape else expand(self.logits, shape + (self._num_events,))
        return squeeze(gather(lp, -1, v), -1)

    def entropy(self) -> Tensor:
        lg = clamp(self.logits, min=float(np.finfo(np.dtype(self.logits.dtype)).min))
        return neg(_sum(mul(lg, self.probs), -1))


def kl_divergence(p: Distribution, q: Distribution) -> Tensor:
    """KL(p || q) for two distributions of one family (Normal, Bernoulli, Categorical, Uniform)."""
    if isinstance(p, Normal) and isinstance(q, Normal):
        var_ratio = div(p.scale, q.scale)
        var_ratio = mul(var_ratio, var_ratio)
        t1 = div(sub(p.loc, q.loc), q.scale)
        return mul(sub(sub(add(var_ratio, mul(t1, t1)), 1.0), log(var_ratio)), 0.5)
    if isinstance(p, Categorical) and isinstance(q, Categorical):
        t = mul(p.probs, sub(p.logits, q.logits))
        return _sum(where(eq(p.probs, 0.0), 0.0, t), -1)  # (0 log 0 = 0, as torch)
    if isinstance(p, Bernoulli) and isinstance(q, Bernoulli):
        t1 = mul(p.probs, sub(softplus(neg(q.logits)), softplus(neg(p.logits))))
        t2 = mul(sub(1.0, p.probs), sub(softplus(q.logits), softplus(p.logits)))
        return add(t1, t2)
    if isinstance(p, Uniform) and isinstance(q, Uniform):
        return sub(log(sub(q.high, q.low)), log(sub(p.high, p.low)))
    raise NotImplementedError(f"kl_divergence({type(p).__name__}, {type(q).__name__}) is not supported")
