"""torch.distributions' families over tiletrain's ops, with torch's constructor signatures:
Normal, Uniform, Bernoulli, Categorical, Exponential, Laplace, LogNormal, Gamma, Beta,
Dirichlet, Poisson, Binomial, Geometric, OneHotCategorical, MultivariateNormal and Independent
(log_prob, entropy, mean, mode, variance, stddev, cdf / icdf where torch has them, sample /
rsample, expand, batch_shape / event_shape) and kl_divergence between two of one family.

log_prob, entropy, the moments and kl_divergence are torch's formulas from recorded ops: their
values and gradients compare with torch's (float64, ~1e-12).  log-gamma and digamma (Gamma,
Beta, Dirichlet, Poisson, Binomial) are tiletrain.lgamma and tiletrain.digamma (torch's values,
and torch's trigamma as digamma's gradient).  Samples of Normal, Uniform, Bernoulli, Categorical,
Exponential, Laplace, Geometric, Gamma, Beta and Dirichlet are torch's for a seed
(tiletrain/tensors/rng.py; the gamma draws by torch's sampler on the host, one element at a
time), and the rsample of Gamma, Beta and Dirichlet has torch's implicit gradient in the
concentrations (torch's approximations of d sample / d concentration); Poisson and Binomial
are NumPy's draws on the host, seeded from the generator that manual_seed seeds.  Differences
from torch: validate_args is accepted and not checked; no support / arg_constraints / enumerate_support;
MultivariateNormal factorises a covariance or precision matrix by a Cholesky of d**2 small
recorded ops (for small event sizes); LogNormal is one class (torch's is a
TransformedDistribution), with base_dist the Normal.

(tiletrain.distribution, singular, is how a tensor's tiles are spread over MPI ranks: another
thing.)"""
from __future__ import annotations

import math

import numpy as np

from .functional import binary_cross_entropy_with_logits, log_softmax, softmax
from .ops import no_grad
from .ops.autograd import backward_rule, needs_grad, record
from .ops.creation import exponential_values, full, rand, randn, uniform_values
from .ops.elementwise import (abs, add, clamp, digamma, div, eq, erf, exp, expm1, floor, ge, gt, le, lgamma, log,  # noqa: A004
                              log1p, erfinv, lt, minimum, mul, neg, pow, reciprocal, sigmoid, sign, softplus, sqrt, sub,
                              where)
from .ops.index import gather, multinomial, one_hot
from .ops.reduce import argmax, sum as _sum
from .ops.shape import cat, expand, reshape, squeeze, stack, transpose, unsqueeze
from .ops.specialfns import igamma
from .tensors import Tensor, from_numpy, tensor
from .tensors.creation import default_generator, empty
from .tensors.rng import NormalStream
from .tensors.tensor import get_default_dtype

__all__ = ["Bernoulli", "Beta", "Binomial", "Categorical", "Dirichlet", "Distribution", "Exponential", "Gamma",
           "Geometric", "Independent", "Laplace", "LogNormal", "MultivariateNormal", "Normal", "OneHotCategorical",
           "Poisson", "Uniform", "kl_divergence"]


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


# -- torch's gamma and Dirichlet draws and their implicit (reparameterised) gradients -------
# The draws: torch's CPU sampler (Marsaglia and Tsang's method, a boost for concentrations
# below 1), element after element in row-major order, its uniforms and normals taken from the
# default generator as torch takes them: the same values after the same seed.  The gradients:
# d sample / d concentration = -(d cdf / d concentration) / pdf, by the approximations torch
# uses (Jankowiak and Obermeyer, "Pathwise derivatives beyond the reparameterization trick",
# 2018: a Taylor series for small samples, Rice's saddle point expansion for large
# concentrations, their bivariate rational fits otherwise), evaluated here on the host in
# float64 so that they are torch's values.  Constants torch writes as float literals are
# float32 values (1/3, 0.0331, 0.8, 0.9, 1.1): their float32 roundings are used.
_F32 = np.float32
_THIRD = float(_F32(1.0) / _F32(3.0))
_SQUEEZE = float(_F32(0.0331))


def _gamma_one(alpha: float, g, single: bool) -> float:
    """One standard gamma draw of concentration alpha (float32 arithmetic where torch's
    float kernel has it: single)."""
    scale = 1.0
    if alpha < 1.0:
        if alpha == 0.0:
            return 0.0
        p = float(_F32(1.0) / _F32(alpha)) if single else 1.0 / alpha
        scale *= math.pow(1.0 - float(g.unit(1, np.float64)[0]), p)
        alpha = float(_F32(alpha) + _F32(1.0)) if single else alpha + 1.0
    d = float(_F32(alpha) - _F32(_THIRD)) if single else alpha - _THIRD
    c = 1.0 / math.sqrt(9.0 * d)
    while True:
        y = 0.0
        while y <= 0.0:
            x = float(NormalStream(g, 1, np.float64).take(1)[0])
            y = 1.0 + c * x
        v = y * y * y
        u = 1.0 - float(g.unit(1, np.float64)[0])
        xx = x * x
        if u < 1.0 - _SQUEEZE * xx * xx or math.log(u) < 0.5 * xx + d * (1.0 - v + math.log(v)):
            return scale * d * v


def _standard_gamma_np(alpha: np.ndarray, dtype) -> np.ndarray:
    """torch._standard_gamma(alpha) for alpha of dtype (its values, in float64)."""
    single = np.dtype(dtype) == np.float32
    tiny = float(np.finfo(np.dtype(dtype)).tiny)
    g = default_generator
    flat = [max(tiny, float(np.dtype(dtype).type(_gamma_one(a, g, single)))) for a in alpha.reshape(-1).tolist()]
    return np.asarray(flat, dtype=np.float64).reshape(alpha.shape)


def _digamma_np(x: np.ndarray) -> np.ndarray:
    """digamma of a host array (float64) by the digamma kernel: the library's one digamma."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return x.copy()
    return digamma(from_numpy(np.ascontiguousarray(x.reshape(-1)))).numpy().reshape(x.shape)


def _standard_gamma_grad_np(alpha: np.ndarray, x: np.ndarray) -> np.ndarray:
    """torch._standard_gamma_grad(alpha, x): d x / d alpha of a standard gamma sample x."""
    alpha, x = (np.asarray(v, dtype=np.float64) for v in np.broadcast_arrays(alpha, x))
    out = np.empty_like(x)
    small = x < float(_F32(0.8))
    with np.errstate(all="ignore"):
        a, s = alpha[small], x[small]
        numer, denom = np.ones_like(s), a.copy()
        s1, s2 = numer / denom, numer / (denom * denom)
        for i in range(1, 6):
            numer = numer * (-s / i)
            denom = denom + 1.0
            s1, s2 = s1 + numer / denom, s2 + numer / (denom * denom)
        pow_xa = s ** a
        cdf_alpha = (np.log(s) - _digamma_np(a)) * (pow_xa * s1) - pow_xa * s2
        r = -cdf_alpha / (s ** (a - 1.0) * np.exp(-s))
        out[small] = np.where(np.isnan(r), 0.0, r)
        large = ~small & (alpha > 8.0)
        near = large & (float(_F32(0.9)) * alpha <= x) & (x <= float(_F32(1.1)) * alpha)
        a, s = alpha[near], x[near]
        out[near] = ((1 + 24 * a * (1 + 12 * a)) * (1440 * (a * a) + 6 * s * (53 - 120 * s) - 65 * s * s / a
                                                    + a * (107 + 3600 * s)) / (1244160 * (a * a) * (a * a)))
        far = large & ~near
        a, s = alpha[far], x[far]
        denom = np.sqrt(8 * a)
        term2, term3 = denom / (a - s), (s - a - a * np.log(s / a)) ** -1.5
        term1 = np.log(s / a) * np.where(s < a, term2 - term3, term2 + term3) - np.sqrt(2 / a) * (a + s) / ((a - s) ** 2)
        out[far] = -(1 + 1 / (12 * a) * (1 + 1 / (24 * a))) * (s * term1) / denom
        rest = ~small & ~large
        u, v = np.log(x[rest] / alpha[rest]), np.log(alpha[rest])
        cv = _GAMMA_UV[0][:, None] + u * (_GAMMA_UV[1][:, None] + u * _GAMMA_UV[2][:, None])
        p = cv[0] + v * (cv[1] + v * (cv[2] + v * cv[3]))
        q = cv[4] + v * (cv[5] + v * (cv[6] + v * cv[7]))
        out[rest] = np.exp(p / q)
    return out


_GAMMA_UV = np.array([  # the rational fit of the gamma gradient in u = log(x / alpha), v = log(alpha)
    [0.16009398, -0.094634809, 0.025146376, -0.0030648343, 1, 0.32668115, 0.10406089, 0.0014179084],
    [0.53487893, 0.1298071, 0.065735949, -0.0015649758, 0.16639465, 0.020070113, -0.0035938915, -0.00058392623],
    [0.040121004, -0.0065914022, -0.0026286047, -0.0013441777, 0.017050642, -0.0021309326, 0.00085092367,
     -1.5247877e-07]])


def _beta_grad_alpha_small(x, alpha, beta):
    """The Beta(alpha, beta) gradient in alpha (scaled by 1 / (1 - x)) for x near 0: a series."""
    factor = _digamma_np(alpha) - _digamma_np(alpha + beta) - np.log(x)
    numer = np.ones_like(x)
    series = numer / alpha * (factor + 1 / alpha)
    for i in range(1, 11):
        numer = numer * ((i - beta) * x / i)
        denom = alpha + i
        series = series + numer / denom * (factor + 1 / denom)
    r = x * (1 - x) ** (-beta) * series
    return np.where(np.isnan(r), 0.0, r)


def _beta_grad_beta_small(x, alpha, beta):
    """The Beta(alpha, beta) gradient in beta for x near 0: a series."""
    factor = _digamma_np(alpha + beta) - _digamma_np(beta)
    numer, betas, dbetas = np.ones_like(x), np.ones_like(x), np.zeros_like(x)
    series = factor / alpha
    for i in range(1, 9):
        numer = numer * (-x / i)
        dbetas = dbetas * (beta - i) + betas
        betas = betas * (beta - i)
        series = series + numer / (alpha + i) * (dbetas + factor * betas)
    r = -((1 - x) ** (1 - beta)) * series
    return np.where(np.isnan(r), 0.0, r)


def _beta_grad_alpha_mid(x, alpha, beta):
    """The Beta gradient in alpha when alpha and beta are both large: Rice's saddle point."""
    total = alpha + beta
    mean = alpha / total
    std = np.sqrt(alpha * beta / (total + 1)) / total
    near = (mean - 0.1 * std <= x) & (x <= mean + 0.1 * std)
    bb = beta * beta
    poly = 47 * x * bb * bb + alpha * ((43 + 20 * (16 + 27 * beta) * x) * bb * beta + alpha * (
        3 * (59 + 180 * beta - 90 * x) * bb + alpha * ((453 + 1620 * beta * (1 - x) - 455 * x) * beta + alpha * (
            8 * (1 - x) * (135 * beta - 11)))))
    pre_num = (1 + 12 * alpha) * (1 + 12 * beta) / (total * total)
    pre_den = 12960 * alpha * alpha * alpha * beta * beta * (1 + 12 * total)
    at_mean = pre_num / (1 - x) * poly / pre_den
    prefactor = -x / np.sqrt(2 * alpha * beta / total)
    stirling = ((1 + 1 / (12 * alpha) + 1 / (288 * alpha * alpha)) * (1 + 1 / (12 * beta) + 1 / (288 * beta * beta))
                / (1 + 1 / (12 * total) + 1 / (288 * total * total)))
    axbx = alpha * (x - 1) + beta * x
    term1 = ((2 * (alpha * alpha) * (x - 1) + alpha * beta * (x - 1) - x * bb)
             / (np.sqrt(2 * alpha / beta) * total ** 1.5 * axbx * axbx))
    term2 = 0.5 * np.log(alpha / (total * x))
    term3 = np.sqrt(8 * alpha * beta / total) / (beta * x + alpha * (x - 1))
    term4 = (beta * np.log(beta / (total * (1 - x))) + alpha * np.log(alpha / (total * x))) ** -1.5
    away = stirling * prefactor * (term1 + term2 * (term3 + np.where(x < mean, term4, -term4)))
    return np.where(near, at_mean, away)


def _dirichlet_grad_np(x: np.ndarray, alpha: np.ndarray, total: np.ndarray) -> np.ndarray:
    """torch._dirichlet_grad(x, alpha, total): the gradient of a Dirichlet sample's component
    x in its concentration alpha (total: the concentrations' sum), scaled by 1 / (1 - x)."""
    x, alpha, total = (np.asarray(v, dtype=np.float64) for v in np.broadcast_arrays(x, alpha, total))
    out = np.empty_like(x)
    beta = total - alpha
    boundary = total * x * (1 - x)
    with np.errstate(all="ignore"):
        near0 = (x <= 0.5) & (boundary < 2.5)
        near1 = ~near0 & (x >= 0.5) & (boundary < 0.75)
        mid = ~near0 & ~near1 & (alpha > 6) & (beta > 6)
        rest = ~(near0 | near1 | mid)
        out[near0] = _beta_grad_alpha_small(x[near0], alpha[near0], beta[near0])
        out[near1] = -_beta_grad_beta_small(1 - x[near1], beta[near1], alpha[near1])
        out[mid] = _beta_grad_alpha_mid(x[mid], alpha[mid], beta[mid])
        xs, al, tot, be = x[rest], alpha[rest], total[rest], beta[rest]
        u = np.log(xs)
        a = np.log(al) - u
        b = np.log(tot) - a
        p, q = np.zeros_like(xs), np.zeros_like(xs)
        for i in range(3):
            for j in range(3):
                ua = u ** i * a ** j
                cp, cq = _DIRICHLET_PQ[0, i, j], _DIRICHLET_PQ[1, i, j]
                p = p + ua * (cp[0] + b * (cp[1] + b * (cp[2] + b * cp[3])))
                q = q + ua * (cq[0] + b * (cq[1] + b * (cq[2] + b * cq[3])))
        out[rest] = p / q * (xs * (_digamma_np(tot) - _digamma_np(al)) / be)
    return out


_DIRICHLET_PQ = np.array([  # the rational correction's numerator (0) and denominator (1) in log x, log(alpha/x), ...
    [[[1.003668233, -0.01061107488, -0.0657888334, 0.01201642863],
      [0.6336835991, -0.3557432599, 0.05486251648, -0.001465281033],
      [-0.03276231906, 0.004474107445, 0.002429354597, -0.0001557569013]],
     [[0.221950385, -0.3187676331, 0.01799915743, 0.01074823814],
      [-0.2951249643, 0.06219954479, 0.01535556598, 0.001550077057],
      [0.02155310298, 0.004170831599, 0.001292462449, 6.976601077e-05]],
     [[-0.05980841433, 0.008441916499, 0.01085618172, 0.002319392565],
      [0.02911413504, 0.01400243777, -0.002721828457, 0.000751041181],
      [0.005900514878, -0.001936558688, -9.495446725e-06, 5.385558597e-05]]],
    [[[1, -0.02924021934, -0.04438342661, 0.007285809825],
      [0.6357567472, -0.3473456711, 0.05454656494, -0.002407477521],
      [-0.03301322327, 0.004845219414, 0.00231480583, -0.0002307248149]],
     [[0.5925320577, -0.1757678135, 0.01505928619, 0.000564515273],
      [0.1014815858, -0.06589186703, 0.01272886114, -0.0007316646956],
      [-0.007258481865, 0.001096195486, 0.0003934994223, -4.12701925e-05]],
     [[0.06469649321, -0.0236701437, 0.002902096474, -5.896963079e-05],
      [0.001925008108, -0.002869809258, 0.0008000589141, -6.063713228e-05],
      [-0.0003477407336, 6.959756487e-05, 1.097287507e-05, -1.650964693e-06]]]])


def _xlogy(x: Tensor, y: Tensor) -> Tensor:
    """x log y with 0 where x == 0 (torch.xlogy; NaN y stays NaN)."""
    return where(eq(x, 0.0), 0.0, mul(x, log(y)))


def _rng() -> np.random.Generator:
    """A NumPy generator for the draws torch makes with kernels tiletrain has no stream for
    (gamma, Poisson, binomial), seeded from the default generator (reproducible after
    manual_seed; not torch's values)."""
    return np.random.default_rng(default_generator.next_seed())


def _host(a, like: Tensor) -> Tensor:
    return from_numpy(np.ascontiguousarray(np.asarray(a, dtype=np.dtype(like.dtype))))


def _host_like(a, like: Tensor) -> Tensor:
    """A host array as a tensor of like's dtype and tiling (a gradient for like)."""
    return from_numpy(np.ascontiguousarray(np.asarray(a, dtype=np.dtype(like.dtype))), tiles=like.tiles)


def _expanded(t: Tensor, shape) -> Tensor:
    shape = tuple(shape)
    return t if tuple(t.shape) == shape else expand(t, shape)


def _sum_rightmost(t: Tensor, n: int) -> Tensor:
    for _ in range(n):
        t = _sum(t, -1)
    return t


def _probs_to_logits_binary(probs: Tensor) -> Tensor:
    p = clamp(probs, _eps(probs), 1 - _eps(probs))
    return sub(log(p), log1p(neg(p)))


def _probs_or_logits(probs, logits, like=None):
    """(probs, logits) of a two-outcome family from the one given (torch's rule); a number
    takes like's dtype when like is a float tensor."""
    if (probs is None) == (logits is None):
        raise ValueError("Either `probs` or `logits` must be specified, but not both.")
    like = like if isinstance(like, Tensor) and np.issubdtype(np.dtype(like.dtype), np.floating) else None
    if probs is not None:
        probs = _tensor(probs, like)
        return probs, _probs_to_logits_binary(probs)
    logits = _tensor(logits, like)
    return sigmoid(logits), logits


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

    def entropy(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no entropy (as torch's)")

    def perplexity(self) -> Tensor:
        return exp(self.entropy())

    def cdf(self, value) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.cdf is not available in tiletrain")

    def icdf(self, value) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.icdf is not available in tiletrain")

    def _params(self) -> dict:
        """{constructor argument: (tensor, its number of event dims)} for expand."""
        raise NotImplementedError(f"{type(self).__name__}.expand is not supported")

    def expand(self, batch_shape, _instance=None) -> "Distribution":
        """The family with its parameters expanded to batch_shape (built anew from expanded
        parameters, so gradients reach the originals; _instance is accepted and ignored)."""
        batch_shape = tuple(batch_shape)
        kw = {name: _expanded(t, batch_shape + tuple(t.shape[t.ndim - nev:] if nev else ()))
              for name, (t, nev) in self._params().items()}
        return type(self)(**kw)


class _LocScale(Distribution):
    """A family of a location and a scale (Normal, Laplace): mean and mode are the location."""
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = _broadcast(loc, scale)
        super().__init__(self.loc.shape)

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    def _params(self) -> dict:
        return {"loc": (self.loc, 0), "scale": (self.scale, 0)}


class Normal(_LocScale):
    """torch.distributions.Normal(loc, scale)."""

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

    def icdf(self, value) -> Tensor:
        u = sub(mul(_tensor(value, self.loc), 2.0), 1.0)
        return add(self.loc, mul(mul(self.scale, erfinv(u)), math.sqrt(2)))


class Uniform(Distribution):
    """torch.distributions.Uniform(low, high): [low, high)."""
    has_rsample = True

    def __init__(self, low, high, validate_args=None):
        self.low, self.high = _broadcast(low, high)
        super().__init__(self.low.shape)

    @property
    def mode(self) -> Tensor:
        """NaN (as torch's: every point of [low, high) is a mode)."""
        return full(self.batch_shape, float("nan"), dtype=self.low.dtype)

    def _params(self) -> dict:
        return {"low": (self.low, 0), "high": (self.high, 0)}

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
        self.probs, self.logits = _probs_or_logits(probs, logits)
        self._given = "probs" if logits is None else "logits"
        super().__init__(self.probs.shape)

    @property
    def mode(self) -> Tensor:
        """1 where probs > 1/2, 0 where below, NaN at 1/2 (as torch's)."""
        return where(eq(self.probs, 0.5), float("nan"), ge(self.probs, 0.5).to(self.probs.dtype))

    def _params(self) -> dict:
        return {self._given: (getattr(self, self._given), 0)}

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
        self._given, self._input = ("probs", _tensor(probs)) if probs is not None else ("logits", _tensor(logits))
        if probs is not None:
            p = self._input
            self.probs = div(p, _sum(p, -1, keepdim=True))
            self.logits = log(clamp(self.probs, _eps(self.probs), 1 - _eps(self.probs)))
        else:
            self.logits = log_softmax(self._input, -1)
            self.probs = softmax(self.logits, -1)
        self._num_events = self.probs.shape[-1]
        super().__init__(self.probs.shape[:-1])

    @property
    def mean(self) -> Tensor:
        """NaN per batch element, as torch's (a categorical has no mean)."""
        return full(self.batch_shape, float("nan"), dtype=self.probs.dtype)

    @property
    def mode(self) -> Tensor:
        return argmax(self.probs, -1)

    @property
    def variance(self) -> Tensor:
        """NaN per batch element, as torch's."""
        return full(self.batch_shape, float("nan"), dtype=self.probs.dtype)

    def _params(self) -> dict:
        return {self._given: (self._input, 1)}

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


class Exponential(Distribution):
    """torch.distributions.Exponential(rate)."""
    has_rsample = True

    def __init__(self, rate, validate_args=None):
        (self.rate,) = _broadcast(rate)
        super().__init__(self.rate.shape)

    @property
    def mean(self) -> Tensor:
        return reciprocal(self.rate)

    @property
    def mode(self) -> Tensor:
        return full(self.batch_shape, 0.0, dtype=self.rate.dtype)

    @property
    def stddev(self) -> Tensor:
        return reciprocal(self.rate)

    @property
    def variance(self) -> Tensor:
        return pow(self.rate, -2)

    def rsample(self, sample_shape=()) -> Tensor:
        e = exponential_values(empty(self._extended(sample_shape), dtype=self.rate.dtype))  # torch's exponential_()
        return div(e, self.rate)

    def log_prob(self, value) -> Tensor:
        return sub(log(self.rate), mul(self.rate, _tensor(value, self.rate)))

    def cdf(self, value) -> Tensor:
        return sub(1.0, exp(mul(neg(self.rate), _tensor(value, self.rate))))

    def icdf(self, value) -> Tensor:
        return div(neg(log1p(neg(_tensor(value, self.rate)))), self.rate)

    def entropy(self) -> Tensor:
        return sub(1.0, log(self.rate))

    def _params(self) -> dict:
        return {"rate": (self.rate, 0)}


class Laplace(_LocScale):
    """torch.distributions.Laplace(loc, scale)."""

    @property
    def variance(self) -> Tensor:
        return mul(pow(self.scale, 2), 2.0)

    @property
    def stddev(self) -> Tensor:
        return mul(self.scale, math.sqrt(2))

    def rsample(self, sample_shape=()) -> Tensor:
        eps = _eps(self.loc)
        u = uniform_values(empty(self._extended(sample_shape), dtype=self.loc.dtype), eps - 1.0, 1.0)
        return sub(self.loc, mul(mul(self.scale, sign(u)), log1p(neg(abs(u)))))

    def log_prob(self, value) -> Tensor:
        z = abs(sub(_tensor(value, self.loc), self.loc))
        return sub(neg(log(mul(self.scale, 2.0))), div(z, self.scale))

    def cdf(self, value) -> Tensor:
        d = sub(_tensor(value, self.loc), self.loc)
        return sub(0.5, mul(mul(sign(d), 0.5), expm1(div(neg(abs(d)), self.scale))))

    def icdf(self, value) -> Tensor:
        t = sub(_tensor(value, self.loc), 0.5)
        return sub(self.loc, mul(mul(self.scale, sign(t)), log1p(mul(abs(t), -2.0))))

    def entropy(self) -> Tensor:
        return add(log(mul(self.scale, 2.0)), 1.0)


class LogNormal(Distribution):
    """torch.distributions.LogNormal(loc, scale): exp of Normal(loc, scale) (torch builds it as
    a TransformedDistribution; here it is one class with the same values; base_dist is the
    Normal)."""
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.base_dist = Normal(loc, scale)
        self.loc, self.scale = self.base_dist.loc, self.base_dist.scale
        super().__init__(self.loc.shape)

    @property
    def mean(self) -> Tensor:
        return exp(add(self.loc, div(pow(self.scale, 2), 2.0)))

    @property
    def mode(self) -> Tensor:
        return exp(sub(self.loc, pow(self.scale, 2)))

    @property
    def variance(self) -> Tensor:
        s2 = pow(self.scale, 2)
        return mul(expm1(s2), exp(add(mul(self.loc, 2.0), s2)))

    def rsample(self, sample_shape=()) -> Tensor:
        return exp(self.base_dist.rsample(sample_shape))

    def log_prob(self, value) -> Tensor:
        y = log(_tensor(value, self.loc))
        return sub(self.base_dist.log_prob(y), y)

    def cdf(self, value) -> Tensor:
        return self.base_dist.cdf(log(_tensor(value, self.loc)))

    def icdf(self, value) -> Tensor:
        return exp(self.base_dist.icdf(value))

    def entropy(self) -> Tensor:
        return add(self.base_dist.entropy(), self.loc)

    def _params(self) -> dict:
        return {"loc": (self.loc, 0), "scale": (self.scale, 0)}


def _standard_gamma(c: Tensor) -> Tensor:
    """torch._standard_gamma(c): torch's draws, recorded with their implicit gradient."""
    alpha = c.numpy(force=True).astype(np.float64)
    x = _standard_gamma_np(alpha, c.dtype)
    out = _host_like(x, c)
    if not needs_grad(c):
        return out
    return record("standard_gamma", out, (c,), saved=(_host_like(_standard_gamma_grad_np(alpha, x), c),))


@backward_rule("standard_gamma")
def _standard_gamma_bwd(node, g):
    return (mul(node.saved[0], g),)


def _sample_dirichlet(c: Tensor) -> Tensor:
    """torch._sample_dirichlet(c): float64 gamma draws normalised over the last dim, kept in
    [tiny, the largest value below 1] of c's dtype; recorded with torch's implicit gradient."""
    alpha = c.numpy(force=True).astype(np.float64)
    gam = _standard_gamma_np(alpha, np.float64)
    dt = np.dtype(c.dtype)
    x = np.clip((gam / gam.sum(-1, keepdims=True)).astype(dt), np.finfo(dt).tiny, np.nextafter(dt.type(1), dt.type(0)))
    out = _host_like(x, c)
    if not needs_grad(c):
        return out
    total = np.broadcast_to(alpha.sum(-1, keepdims=True), alpha.shape)
    grad = _host_like(_dirichlet_grad_np(x.astype(np.float64), alpha, total), c)
    return record("sample_dirichlet", out, (c,), saved=(grad, out))


@backward_rule("sample_dirichlet")
def _sample_dirichlet_bwd(node, g):
    grad, x = node.saved
    return (mul(grad, sub(g, _sum(mul(x, g), -1, keepdim=True))),)


class Gamma(Distribution):
    """torch.distributions.Gamma(concentration, rate): sample / rsample are torch's draws for a
    seed, rsample with torch's implicit gradient in the concentration."""
    has_rsample = True

    def __init__(self, concentration, rate, validate_args=None):
        self.concentration, self.rate = _broadcast(concentration, rate)
        super().__init__(self.rate.shape)

    @property
    def mean(self) -> Tensor:
        return div(self.concentration, self.rate)

    @property
    def mode(self) -> Tensor:
        return clamp(div(sub(self.concentration, 1.0), self.rate), min=0.0)

    @property
    def variance(self) -> Tensor:
        return div(self.concentration, pow(self.rate, 2))

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended(sample_shape)
        value = div(_standard_gamma(_expanded(self.concentration, shape)), _expanded(self.rate, shape))
        tiny = float(np.finfo(np.dtype(value.dtype)).tiny)
        v = value.numpy(force=True)
        if (v < tiny).any():  # torch clamps the values outside the graph
            value = add(value, _host(np.maximum(v, tiny) - v, value))
        return value

    def log_prob(self, value) -> Tensor:
        value = _tensor(value, self.rate)
        c = self.concentration
        return sub(sub(add(_xlogy(c, self.rate), _xlogy(sub(c, 1.0), value)), mul(self.rate, value)), lgamma(c))

    def entropy(self) -> Tensor:
        c = self.concentration
        return add(add(sub(c, log(self.rate)), lgamma(c)), mul(sub(1.0, c), digamma(c)))

    def cdf(self, value) -> Tensor:
        """torch's: gammainc(concentration, rate * value) (no gradient in the concentration)."""
        return igamma(self.concentration, mul(self.rate, _tensor(value, self.rate)))

    def _params(self) -> dict:
        return {"concentration": (self.concentration, 0), "rate": (self.rate, 0)}


class Dirichlet(Distribution):
    """torch.distributions.Dirichlet(concentration): the last dim holds the categories.
    sample / rsample are torch's draws for a seed, rsample with torch's implicit gradient."""
    has_rsample = True

    def __init__(self, concentration, validate_args=None):
        self.concentration = _tensor(concentration)
        if self.concentration.ndim < 1:
            raise ValueError("`concentration` parameter must be at least one-dimensional.")
        super().__init__(self.concentration.shape[:-1], self.concentration.shape[-1:])

    @property
    def mean(self) -> Tensor:
        return div(self.concentration, _sum(self.concentration, -1, keepdim=True))

    @property
    def mode(self) -> Tensor:
        c = self.concentration
        cm1 = clamp(sub(c, 1.0), min=0.0)
        mode = div(cm1, _sum(cm1, -1, keepdim=True))
        k = c.shape[-1]
        all_below = eq(_sum(lt(c, 1.0).to(c.dtype), -1, keepdim=True), float(k))  # every concentration < 1
        first = _host(np.eye(k)[0], c)  # torch: the one-hot of the first category there
        return where(all_below, _expanded(first, c.shape), mode)

    @property
    def variance(self) -> Tensor:
        c = self.concentration
        c0 = _sum(c, -1, keepdim=True)
        return div(mul(c, sub(c0, c)), mul(pow(c0, 2), add(c0, 1.0)))

    def rsample(self, sample_shape=()) -> Tensor:
        return _sample_dirichlet(_expanded(self.concentration, self._extended(sample_shape)))

    def log_prob(self, value) -> Tensor:
        c = self.concentration
        value = _tensor(value, c)
        return add(_sum(_xlogy(sub(c, 1.0), value), -1), sub(lgamma(_sum(c, -1)), _sum(lgamma(c), -1)))

    def entropy(self) -> Tensor:
        c = self.concentration
        k = c.shape[-1]
        a0 = _sum(c, -1)
        t = sub(sub(_sum(lgamma(c), -1), lgamma(a0)), mul(sub(float(k), a0), digamma(a0)))
        return sub(t, _sum(mul(sub(c, 1.0), digamma(c)), -1))

    def _params(self) -> dict:
        return {"concentration": (self.concentration, 1)}


class Beta(Distribution):
    """torch.distributions.Beta(concentration1, concentration0) (a two-category Dirichlet):
    sample / rsample are the Dirichlet's first component, torch's for a seed."""
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args=None):
        self.concentration1, self.concentration0 = _broadcast(concentration1, concentration0)
        self._dirichlet = Dirichlet(stack([self.concentration1, self.concentration0], -1))
        super().__init__(self._dirichlet.batch_shape)

    @property
    def mean(self) -> Tensor:
        return div(self.concentration1, add(self.concentration1, self.concentration0))

    @property
    def mode(self) -> Tensor:
        return self._dirichlet.mode[..., 0]

    @property
    def variance(self) -> Tensor:
        total = add(self.concentration1, self.concentration0)
        return div(mul(self.concentration1, self.concentration0), mul(pow(total, 2), add(total, 1.0)))

    def rsample(self, sample_shape=()) -> Tensor:
        return self._dirichlet.rsample(sample_shape)[..., 0]

    def log_prob(self, value) -> Tensor:
        value = _tensor(value, self.concentration1)
        return self._dirichlet.log_prob(stack([value, sub(1.0, value)], -1))

    def entropy(self) -> Tensor:
        return self._dirichlet.entropy()

    def _params(self) -> dict:
        return {"concentration1": (self.concentration1, 0), "concentration0": (self.concentration0, 0)}


class Poisson(Distribution):
    """torch.distributions.Poisson(rate): counts as floats of rate's dtype.  No entropy (as torch)."""

    def __init__(self, rate, validate_args=None):
        (self.rate,) = _broadcast(rate)
        super().__init__(self.rate.shape)

    @property
    def mean(self) -> Tensor:
        return self.rate

    @property
    def mode(self) -> Tensor:
        return floor(self.rate)

    @property
    def variance(self) -> Tensor:
        return self.rate

    def sample(self, sample_shape=()) -> Tensor:
        shape = self._extended(sample_shape)
        return _host(_rng().poisson(np.broadcast_to(self.rate.numpy(force=True).astype(np.float64), shape)), self.rate)

    def log_prob(self, value) -> Tensor:
        value = _tensor(value, self.rate)
        return sub(sub(_xlogy(value, self.rate), self.rate), lgamma(add(value, 1.0)))

    def _params(self) -> dict:
        return {"rate": (self.rate, 0)}


def _clamp_by_zero(x: Tensor) -> Tensor:
    """max(x, 0) with gradient 1/2 at 0 (torch's _clamp_by_zero)."""
    return div(sub(add(clamp(x, min=0.0), x), clamp(x, max=0.0)), 2.0)


class Binomial(Distribution):
    """torch.distributions.Binomial(total_count=1, probs=None, logits=None): counts as floats."""

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        probs, logits = _probs_or_logits(probs, logits, like=total_count)
        self.probs, self.logits, n = _broadcast(probs, logits, total_count)
        self.total_count = n if n.dtype == self.probs.dtype else n.to(self.probs.dtype)
        self._given = "probs" if logits is None else "logits"
        super().__init__(self.probs.shape)

    @property
    def mean(self) -> Tensor:
        return mul(self.total_count, self.probs)

    @property
    def mode(self) -> Tensor:
        return minimum(clamp(floor(mul(add(self.total_count, 1.0), self.probs)), min=0.0), self.total_count)

    @property
    def variance(self) -> Tensor:
        return mul(mul(self.total_count, self.probs), sub(1.0, self.probs))

    def sample(self, sample_shape=()) -> Tensor:
        shape = self._extended(sample_shape)
        n = np.broadcast_to(self.total_count.numpy(force=True).astype(np.int64), shape)
        p = np.broadcast_to(self.probs.numpy(force=True).astype(np.float64), shape)
        return _host(_rng().binomial(n, p), self.probs)

    def log_prob(self, value) -> Tensor:
        value = _tensor(value, self.probs)
        n = self.total_count
        norm = sub(add(mul(n, _clamp_by_zero(self.logits)), mul(n, log1p(exp(neg(abs(self.logits)))))),
                   lgamma(add(n, 1.0)))
        return sub(sub(sub(mul(value, self.logits), lgamma(add(value, 1.0))), lgamma(add(sub(n, value), 1.0))), norm)

    def entropy(self) -> Tensor:
        counts = np.unique(self.total_count.numpy(force=True))
        if counts.size > 1:
            raise NotImplementedError("Inhomogeneous total count not supported by `entropy`.")
        k = int(counts[0]) if counts.size else 0
        values = _host(np.arange(k + 1).reshape((-1,) + (1,) * len(self.batch_shape)), self.probs)
        lp = self.log_prob(values)
        return neg(_sum(mul(exp(lp), lp), 0))

    def _params(self) -> dict:
        return {"total_count": (self.total_count, 0), self._given: (getattr(self, self._given), 0)}


class Geometric(Distribution):
    """torch.distributions.Geometric(probs=None, logits=None): the number of failures before
    the first success."""

    def __init__(self, probs=None, logits=None, validate_args=None):
        probs, logits = _probs_or_logits(probs, logits)
        self.probs, self.logits = _broadcast(probs, logits)
        self._given = "probs" if logits is None else "logits"
        super().__init__(self.probs.shape)

    @property
    def mean(self) -> Tensor:
        return sub(reciprocal(self.probs), 1.0)

    @property
    def mode(self) -> Tensor:
        return full(self.batch_shape, 0.0, dtype=self.probs.dtype)

    @property
    def variance(self) -> Tensor:
        return div(sub(reciprocal(self.probs), 1.0), self.probs)

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            tiny = float(np.finfo(np.dtype(self.probs.dtype)).tiny)
            u = uniform_values(empty(self._extended(sample_shape), dtype=self.probs.dtype), tiny, 1.0)
            return floor(div(log(u), log1p(neg(self.probs))))

    def log_prob(self, value) -> Tensor:
        value, probs = _broadcast(_tensor(value, self.probs), self.probs)
        p = where(gt(mul(eq(probs, 1.0).to(probs.dtype), eq(value, 0.0).to(probs.dtype)), 0.0), 0.0, probs)
        return add(mul(value, log1p(neg(p))), log(self.probs))

    def entropy(self) -> Tensor:
        return div(binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none"), self.probs)

    def _params(self) -> dict:
        return {self._given: (getattr(self, self._given), 0)}


class OneHotCategorical(Distribution):
    """torch.distributions.OneHotCategorical(probs=None, logits=None): one-hot vectors over the
    last dim, in probs' dtype."""

    def __init__(self, probs=None, logits=None, validate_args=None):
        self._categorical = Categorical(probs, logits)
        super().__init__(self._categorical.batch_shape, self._categorical.probs.shape[-1:])

    @property
    def probs(self) -> Tensor:
        return self._categorical.probs

    @property
    def logits(self) -> Tensor:
        return self._categorical.logits

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def mode(self) -> Tensor:
        return one_hot(argmax(self.probs, -1), self.event_shape[0]).to(self.probs.dtype)

    @property
    def variance(self) -> Tensor:
        return mul(self.probs, sub(1.0, self.probs))

    def sample(self, sample_shape=()) -> Tensor:
        idx = self._categorical.sample(sample_shape)
        return one_hot(idx, self.event_shape[0]).to(self.probs.dtype)

    def log_prob(self, value) -> Tensor:
        value = _tensor(value, self.probs)
        return self._categorical.log_prob(argmax(value, -1))

    def entropy(self) -> Tensor:
        return self._categorical.entropy()

    def _params(self) -> dict:
        return self._categorical._params()


class Independent(Distribution):
    """torch.distributions.Independent(base_distribution, reinterpreted_batch_ndims): the
    rightmost batch dims of the base become event dims (log_prob and entropy sum over them)."""

    def __init__(self, base_distribution, reinterpreted_batch_ndims, validate_args=None):
        n = int(reinterpreted_batch_ndims)
        if n > len(base_distribution.batch_shape):
            raise ValueError("Expected reinterpreted_batch_ndims <= len(base_distribution.batch_shape), "
                             f"actual {n} vs {len(base_distribution.batch_shape)}")
        self.base_dist, self.reinterpreted_batch_ndims = base_distribution, n
        shape = base_distribution.batch_shape + base_distribution.event_shape
        event_dim = n + len(base_distribution.event_shape)
        super().__init__(shape[:len(shape) - event_dim], shape[len(shape) - event_dim:])

    @property
    def has_rsample(self) -> bool:
        return self.base_dist.has_rsample

    @property
    def mean(self) -> Tensor:
        return self.base_dist.mean

    @property
    def mode(self) -> Tensor:
        return self.base_dist.mode

    @property
    def variance(self) -> Tensor:
        return self.base_dist.variance

    def sample(self, sample_shape=()) -> Tensor:
        return self.base_dist.sample(sample_shape)

    def rsample(self, sample_shape=()) -> Tensor:
        return self.base_dist.rsample(sample_shape)

    def log_prob(self, value) -> Tensor:
        return _sum_rightmost(self.base_dist.log_prob(value), self.reinterpreted_batch_ndims)

    def entropy(self) -> Tensor:
        return _sum_rightmost(self.base_dist.entropy(), self.reinterpreted_batch_ndims)

    def expand(self, batch_shape, _instance=None) -> "Independent":
        batch_shape = tuple(batch_shape)
        base = self.base_dist.expand(batch_shape + self.event_shape[:self.reinterpreted_batch_ndims])
        return Independent(base, self.reinterpreted_batch_ndims)


def _symmetric(a: Tensor) -> Tensor:
    """(a + a.mT) / 2: a symmetric matrix unchanged, its gradient symmetric (as torch's
    Cholesky's)."""
    return mul(add(a, transpose(a, -1, -2)), 0.5)


def _cholesky(a: Tensor) -> Tensor:
    """The lower Cholesky factor of the symmetric positive-definite matrices a (..., d, d),
    column by column from recorded ops (d**2 small ops: for small event sizes)."""
    d = a.shape[-1]
    cols = []
    for j in range(d):
        v = a[..., :, j]
        for k in range(j):
            v = sub(v, mul(cols[k], cols[k][..., j:j + 1]))
        mask = _host((np.arange(d) >= j).astype(np.float64), a)
        cols.append(mul(div(v, sqrt(v[..., j:j + 1])), mask))
    return stack(cols, -1)


def _solve_tril(lower: Tensor, b: Tensor) -> Tensor:
    """x with lower @ x = b for b (..., d) (broadcast against lower (..., d, d)): forward
    substitution from recorded ops."""
    xs = None
    for i in range(lower.shape[-1]):
        r = b[..., i:i + 1]
        if xs is not None:
            r = sub(r, _sum(mul(lower[..., i, :i], xs), -1, keepdim=True))
        xi = div(r, lower[..., i, i:i + 1])
        xs = xi if xs is None else cat([xs, xi], -1)
    return xs


def _tril_inverse(lower: Tensor) -> Tensor:
    """lower**-1 of lower-triangular matrices (..., d, d)."""
    d = lower.shape[-1]
    cols = _solve_tril(unsqueeze(lower, -3), _host(np.eye(d), lower))  # (..., column, row)
    return transpose(cols, -1, -2)


def _mm_t(a: Tensor, b: Tensor) -> Tensor:
    """a @ b.mT for (..., n, k) and (..., m, k)."""
    return _sum(mul(unsqueeze(a, -2), unsqueeze(b, -3)), -1)


def _diagonal(m: Tensor) -> Tensor:
    return _sum(mul(m, _host(np.eye(m.shape[-1]), m)), -1)


class MultivariateNormal(Distribution):
    """torch.distributions.MultivariateNormal(loc, covariance_matrix=None, precision_matrix=None,
    scale_tril=None).  A covariance or precision matrix is factorised by a Cholesky from
    recorded ops (gradients reach the matrix); for small event sizes (d**2 ops per factor)."""
    has_rsample = True

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None, validate_args=None):
        loc = _tensor(loc)
        if loc.ndim < 1:
            raise ValueError("loc must be at least one-dimensional.")
        if (covariance_matrix is not None) + (scale_tril is not None) + (precision_matrix is not None) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or scale_tril may be specified.")
        name, m = next((n, v) for n, v in (("scale_tril", scale_tril), ("covariance_matrix", covariance_matrix),
                                          ("precision_matrix", precision_matrix)) if v is not None)
        m = _tensor(m, loc)
        if m.ndim < 2:
            raise ValueError(f"{name} matrix must be at least two-dimensional, with optional leading batch dimensions")
        if name == "scale_tril":
            lower = m
        elif name == "covariance_matrix":
            lower = _cholesky(_symmetric(m))
        else:
            inv = _tril_inverse(_cholesky(_symmetric(m)))  # P = Lp Lp^T, so P^-1 = Lp^-T Lp^-1
            lower = _cholesky(_mm_t(transpose(inv, -1, -2), transpose(inv, -1, -2)))
        self._given = name
        batch_shape = tuple(np.broadcast_shapes(tuple(m.shape[:-2]), tuple(loc.shape[:-1])))
        self._unbroadcasted_scale_tril = lower
        self.loc = _expanded(loc, batch_shape + tuple(loc.shape[-1:]))
        super().__init__(batch_shape, loc.shape[-1:])

    @property
    def scale_tril(self) -> Tensor:
        return _expanded(self._unbroadcasted_scale_tril, self.batch_shape + self.event_shape * 2)

    @property
    def covariance_matrix(self) -> Tensor:
        lower = self._unbroadcasted_scale_tril
        return _expanded(_mm_t(lower, lower), self.batch_shape + self.event_shape * 2)

    @property
    def precision_matrix(self) -> Tensor:
        """The inverse of scale_tril @ scale_tril.mT (through the whole matrix given, as torch's
        cholesky_inverse: its gradient reaches entries above the diagonal too)."""
        lower = self._unbroadcasted_scale_tril
        inv = transpose(_tril_inverse(_cholesky(_symmetric(_mm_t(lower, lower)))), -1, -2)
        return _expanded(_mm_t(inv, inv), self.batch_shape + self.event_shape * 2)

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        lower = self._unbroadcasted_scale_tril
        return _expanded(_sum(mul(lower, lower), -1), self.batch_shape + self.event_shape)

    def rsample(self, sample_shape=()) -> Tensor:
        eps = randn(self._extended(sample_shape), dtype=self.loc.dtype)
        return add(self.loc, _sum(mul(self._unbroadcasted_scale_tril, unsqueeze(eps, -2)), -1))

    def _half_log_det(self) -> Tensor:
        return _sum(log(_diagonal(self._unbroadcasted_scale_tril)), -1)

    def log_prob(self, value) -> Tensor:
        diff = sub(_tensor(value, self.loc), self.loc)
        z = _solve_tril(self._unbroadcasted_scale_tril, diff)
        m = _sum(mul(z, z), -1)
        return sub(mul(add(m, self.event_shape[0] * math.log(2 * math.pi)), -0.5), self._half_log_det())

    def entropy(self) -> Tensor:
        h = add(self._half_log_det(), 0.5 * self.event_shape[0] * (1.0 + math.log(2 * math.pi)))
        return _expanded(h, self.batch_shape)

    def expand(self, batch_shape, _instance=None) -> "MultivariateNormal":
        batch_shape = tuple(batch_shape)
        return MultivariateNormal(_expanded(self.loc, batch_shape + self.event_shape),
                                  scale_tril=_expanded(self._unbroadcasted_scale_tril,
                                                       batch_shape + self.event_shape * 2))


def _kl_gamma(p: Gamma, q: Gamma) -> Tensor:
    t1 = mul(q.concentration, log(div(p.rate, q.rate)))
    t2 = sub(lgamma(q.concentration), lgamma(p.concentration))
    t3 = mul(sub(p.concentration, q.concentration), digamma(p.concentration))
    t4 = mul(sub(q.rate, p.rate), div(p.concentration, p.rate))
    return add(add(add(t1, t2), t3), t4)


def _kl_beta(p: Beta, q: Beta) -> Tensor:
    sp, sq = add(p.concentration1, p.concentration0), add(q.concentration1, q.concentration0)
    t1 = add(add(lgamma(q.concentration1), lgamma(q.concentration0)), lgamma(sp))
    t2 = add(add(lgamma(p.concentration1), lgamma(p.concentration0)), lgamma(sq))
    t3 = mul(sub(p.concentration1, q.concentration1), digamma(p.concentration1))
    t4 = mul(sub(p.concentration0, q.concentration0), digamma(p.concentration0))
    t5 = mul(sub(sq, sp), digamma(sp))
    return add(add(add(sub(t1, t2), t3), t4), t5)


def _kl_dirichlet(p: Dirichlet, q: Dirichlet) -> Tensor:
    sp, sq = _sum(p.concentration, -1), _sum(q.concentration, -1)
    t1 = sub(lgamma(sp), lgamma(sq))
    t2 = _sum(sub(lgamma(p.concentration), lgamma(q.concentration)), -1)
    t3 = sub(p.concentration, q.concentration)
    t4 = sub(digamma(p.concentration), unsqueeze(digamma(sp), -1))
    return add(sub(t1, t2), _sum(mul(t3, t4), -1))


def _kl_binomial(p: Binomial, q: Binomial) -> Tensor:
    if (p.total_count.numpy(force=True) < q.total_count.numpy(force=True)).any():
        raise NotImplementedError("KL between Binomials where q.total_count > p.total_count is not implemented")
    kl = mul(p.total_count, sub(add(mul(p.probs, sub(p.logits, q.logits)), log1p(neg(p.probs))), log1p(neg(q.probs))))
    return where(gt(p.total_count, q.total_count), float("inf"), kl)


def _kl_mvn(p: MultivariateNormal, q: MultivariateNormal) -> Tensor:
    if p.event_shape != q.event_shape:
        raise ValueError("KL-divergence between two Multivariate Normals with different event shapes "
                         "cannot be computed")
    n = p.event_shape[0]
    half_term1 = sub(q._half_log_det(), p._half_log_det())
    batch = tuple(np.broadcast_shapes(tuple(q._unbroadcasted_scale_tril.shape[:-2]),
                                      tuple(p._unbroadcasted_scale_tril.shape[:-2])))
    lq = _expanded(q._unbroadcasted_scale_tril, batch + (n, n))
    lp = _expanded(p._unbroadcasted_scale_tril, batch + (n, n))
    x = _solve_tril(unsqueeze(lq, -3), transpose(lp, -1, -2))  # the columns of lq^-1 lp
    term2 = _sum(_sum(mul(x, x), -1), -1)
    z = _solve_tril(q._unbroadcasted_scale_tril, sub(q.loc, p.loc))
    term3 = _sum(mul(z, z), -1)
    return add(half_term1, mul(sub(add(term2, term3), float(n)), 0.5))


_KL = {
    Exponential: lambda p, q: add(neg(log(div(q.rate, p.rate))), sub(div(q.rate, p.rate), 1.0)),
    Laplace: lambda p, q: sub(add(add(neg(log(div(p.scale, q.scale))), div(abs(sub(p.loc, q.loc)), q.scale)),
                                  mul(div(p.scale, q.scale), exp(div(neg(abs(sub(p.loc, q.loc))), p.scale)))), 1.0),
    LogNormal: lambda p, q: kl_divergence(p.base_dist, q.base_dist),
    Gamma: _kl_gamma,
    Beta: _kl_beta,
    Dirichlet: _kl_dirichlet,
    Poisson: lambda p, q: sub(mul(p.rate, sub(log(p.rate), log(q.rate))), sub(p.rate, q.rate)),
    Binomial: _kl_binomial,
    Geometric: lambda p, q: sub(sub(neg(p.entropy()), div(log1p(neg(q.probs)), p.probs)), q.logits),
    OneHotCategorical: lambda p, q: kl_divergence(p._categorical, q._categorical),
    MultivariateNormal: _kl_mvn,
}


def _kl_independent(p: Independent, q: Independent) -> Tensor:
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError("kl_divergence(Independent, Independent) needs equal reinterpreted_batch_ndims")
    return _sum_rightmost(kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)


_KL[Independent] = _kl_independent


def kl_divergence(p: Distribution, q: Distribution) -> Tensor:
    """KL(p || q) for two distributions of one family (each family here; Independent pairs with
    equal reinterpreted_batch_ndims), torch's formulas."""
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
    if type(p) is type(q) and type(p) in _KL:
        return _KL[type(p)](p, q)
    raise NotImplementedError(f"kl_divergence({type(p).__name__}, {type(q).__name__}) is not supported")
