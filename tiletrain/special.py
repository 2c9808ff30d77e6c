"""torch.special over tiletrain's ops (values and gradients from those ops, double backward
included): the error functions and their inverses, erfcx, the logistic pair, the normal
distribution's cdf and its inverse, xlogy/xlog1py, entr, sinc, exp2/expm1/log1p, logsumexp,
softmax/log_softmax, round; the gamma family (gammaln, digamma/psi, polygamma, multigammaln,
gammainc/gammaincc, zeta) and the Bessel functions i0/i0e/i1/i1e and bessel_j0/j1/y0/y1 (their
kernels' formulas: csrc/kernels/opencl/tt_special.h).  Not here (a clear AttributeError): the
orthogonal polynomials, airy_ai, spherical_bessel_j0 and the modified Bessel functions K and
modified_bessel_i0/i1."""
from __future__ import annotations

import math

from .ops.elementwise import (add, div, erf, erfc, erfinv, eq, expm1, log, log1p, lt, mul, neg, round,  # noqa: A004
                              sigmoid as expit, sin, where)
from .ops.mathfns import exp2, logit, xlogy
from .ops.reduce import logsumexp
from .ops.softmax import log_softmax, softmax
from .ops.specialfns import (bessel_j0, bessel_j1, bessel_y0, bessel_y1, digamma, erfcx, gammainc, gammaincc, i0,
                             i0e, i1, i1e, lgamma as gammaln, multigammaln, polygamma, zeta)
from .tensors import Tensor

__all__ = ["bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "digamma", "entr", "erf", "erfc", "erfcx", "erfinv",
           "exp2", "expit", "expm1", "gammainc", "gammaincc", "gammaln", "i0", "i0e", "i1", "i1e", "log1p", "log_ndtr",
           "log_softmax", "logit", "logsumexp", "multigammaln", "ndtr", "ndtri", "polygamma", "psi", "round", "sinc",
           "softmax", "xlog1py", "xlogy", "zeta"]

psi = digamma
_SQRT2 = math.sqrt(2.0)


def _tensor(x, what: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"special.{what}(): argument 'input' must be Tensor, not {type(x).__name__}")
    return x


def ndtr(input: Tensor) -> Tensor:  # noqa: A002
    """The standard normal cdf, (1 + erf(x / sqrt(2))) / 2, torch's formula (so its lower tail
    rounds to 0 below about x = -8.3, as torch's; log_ndtr keeps the tail)."""
    return mul(add(erf(div(_tensor(input, "ndtr"), _SQRT2)), 1.0), 0.5)


def ndtri(input: Tensor) -> Tensor:  # noqa: A002
    """The inverse of ndtr: sqrt(2) erfinv(2p - 1) (+-inf at 0 and 1, NaN outside [0, 1])."""
    return mul(erfinv(add(mul(_tensor(input, "ndtri"), 2.0), -1.0)), _SQRT2)


def log_ndtr(input: Tensor) -> Tensor:  # noqa: A002
    """log(ndtr(x)) as torch computes it: log1p(-erfc(t) / 2) for x >= -1, log(erfc(-t) / 2)
    below (t = x / sqrt(2); torch writes the latter log(erfcx(-t) / 2) - t^2, the same value
    while erfc(-t) is representable: x > -38 in float64, x > -13 in float32, -inf below)."""
    x = _tensor(input, "log_ndtr")
    low = lt(x, -1.0)
    t = div(x, _SQRT2)  # each branch sees a harmless argument where the other is taken (finite gradients)
    upper = log1p(mul(erfc(where(low, 0.0, t)), -0.5))
    lower = log(mul(erfc(neg(where(low, t, -1.0))), 0.5))
    return where(low, lower, upper)


def xlog1py(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """x log1p(y), 0 where x is 0 (NaN y stays NaN), as torch.special.xlog1py."""
    x = _tensor(input, "xlog1py")
    return where(eq(x, 0.0), where(eq(other, other), 0.0, other), mul(x, log1p(other)))


def entr(input: Tensor) -> Tensor:  # noqa: A002
    """-x ln x elementwise: 0 at 0, -inf below 0."""
    x = _tensor(input, "entr")
    return where(lt(x, 0.0), float("-inf"), neg(xlogy(x, x)))


def sinc(input: Tensor) -> Tensor:  # noqa: A002
    """sin(pi x) / (pi x), 1 at 0 (the normalised sinc)."""
    x = _tensor(input, "sinc")
    px = mul(x, math.pi)
    zero = eq(x, 0.0)
    safe = where(zero, 1.0, px)
    return where(zero, 1.0, div(sin(safe), safe))

