"""NumPy references for the special-function kernels (csrc/kernels.def: lgamma, polygamma,
bessel_i, erfcx, bessel_jy, igamma, zeta and their backward rules), computed another way than
the kernels' (csrc/kernels/opencl/tt_special.h), slowly and plainly: digamma's recurrence to 40,
zeta's direct sum to 60 terms, I0/I1 as the trapezoid rule on their integrals, erfcx's
continued fraction, J/Y by their power series, P/Q by the textbook series and continued
fraction.  trigamma is torch's truncated series (the kernel's contract is torch's values, within
~5e-10 of the exact ones).  Inputs stay where these plain methods are exact to ~1e-14."""
from __future__ import annotations

import math

import numpy as np

from ._refbase import Reference, _r

N = 9
_EULER = 0.57721566490153286061


def _vec(fn):
    return np.vectorize(fn, otypes=[np.float64])


def _f(x):
    return np.asarray(x, dtype=np.float64)


@_vec
def _lgamma(x: float) -> float:
    return math.inf if x <= 0 and x == math.floor(x) else math.lgamma(x)


@_vec
def _digamma(x: float) -> float:
    acc = 0.0
    if x <= 0 and x == math.floor(x):
        return math.nan
    if x < 0:  # psi(x) = psi(1 - x) - pi / tan(pi x)
        acc, x = -math.pi / math.tan(math.pi * x), 1 - x
    while x < 40:
        acc, x = acc - 1 / x, x + 1
    z = 1 / (x * x)
    return acc + math.log(x) - 0.5 / x - z * (1 / 12 - z * (1 / 120 - z * (1 / 252 - z / 240)))


@_vec
def _trigamma(x: float) -> float:
    """torch's trigamma: reflection below 1/2, six recurrence steps, the series to 1/(42 x^7)."""
    sign, acc = 1.0, 0.0
    if x < 0.5:
        sign, acc, x = -1.0, -(math.pi / math.sin(math.pi * x)) ** 2, 1 - x
    for _ in range(6):
        acc, x = acc + 1 / (x * x), x + 1
    return sign * (acc + 1 / x + 1 / (2 * x * x) + 1 / (6 * x ** 3) - 1 / (30 * x ** 5) + 1 / (42 * x ** 7))


def _zeta_one(s: float, q: float) -> float:
    """sum (q + k)^-s: 60 terms, then the Euler-Maclaurin tail from a = q + 60."""
    direct = math.fsum((q + k) ** -s for k in range(60))
    a = q + 60
    tail = a ** (1 - s) / (s - 1) + 0.5 * a ** -s + s * a ** (-s - 1) / 12 - s * (s + 1) * (s + 2) * a ** (-s - 3) / 720
    return direct + tail


_zeta = _vec(_zeta_one)


def _polygamma(order: int, x):
    if order == 0:
        return _digamma(x)
    if order == 1:
        return _trigamma(x)
    return (-1) ** (order + 1) * math.factorial(order) * _zeta(order + 1.0, x)


@_vec
def _bessel_i_one(nu: int, scaled: int, x: float) -> float:
    """e^-|x| I_nu(|x|) = (1/pi) int_0^pi e^(|x| (cos t - 1)) cos(nu t) dt by the trapezoid rule
    (exponentially accurate for this periodic integrand); times e^|x| unless scaled."""
    m = 400
    t = np.linspace(0.0, math.pi, m + 1)
    w = np.exp(abs(x) * (np.cos(t) - 1)) * np.cos(nu * t)
    v = (w.sum() - 0.5 * (w[0] + w[-1])) / m
    v = v if scaled else v * math.exp(abs(x))
    return -v if nu and x < 0 else v


def _bessel_i_grad(nu, scaled, x):
    x = _f(x)
    sg = np.sign(x)
    if nu == 0:
        return _bessel_i_one(1, 1, x) - sg * _bessel_i_one(0, 1, x) if scaled else _bessel_i_one(1, 0, x)
    y = _bessel_i_one(1, scaled, x)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = _bessel_i_one(0, 1, x) - y * (sg + 1 / x) if scaled else _bessel_i_one(0, 0, x) - y / x
    return np.where(x == 0, 0.5, d)


@_vec
def _erfcx(x: float) -> float:
    if x < 5:
        return math.exp(x * x) * math.erfc(x)
    t = x  # erfcx = 1 / (sqrt(pi) (x + (1/2) / (x + (2/2) / (x + (3/2) / ...))))
    for k in range(80, 0, -1):
        t = x + 0.5 * k / t
    return 1 / (math.sqrt(math.pi) * t)


def _jy_one(kind: int, x: float) -> float:
    """J0, J1, Y0, Y1 by their power series (0 < x <= 8); NaN at inf."""
    if math.isinf(x):
        return math.nan
    q = x * x / 4
    j0 = j1 = s0 = s1 = 0.0
    t0, t1, h = 1.0, x / 2, 0.0  # t0 = (-q)^k / k!^2, t1 = (-1)^k (x/2)^(2k+1) / (k! (k+1)!)
    for k in range(60):
        hk1 = h + 1 / (k + 1)  # harmonic numbers H_k, H_(k+1)
        j0, j1 = j0 + t0, j1 + t1
        s0, s1 = s0 + (-h) * t0, s1 + (h + hk1) * t1
        t0, t1, h = t0 * -q / ((k + 1) ** 2), t1 * -q / ((k + 1) * (k + 2)), hk1
    lg = math.log(x / 2) + _EULER
    y0 = 2 / math.pi * (lg * j0 + s0)
    y1 = 2 / math.pi * lg * j1 - 2 / (math.pi * x) - s1 / math.pi
    return (j0, j1, y0, y1)[kind]


_jy = _vec(_jy_one)


def _igamma_one(a: float, x: float, upper: int) -> float:
    """P by its series for x < a + 1, else Q by its continued fraction (Lentz)."""
    if x < a + 1:
        term = total = 1 / a
        for n in range(1, 1000):
            term *= x / (a + n)
            total += term
        p = total * math.exp(a * math.log(x) - x - math.lgamma(a))
        return 1 - p if upper else p
    b, c, d = x + 1 - a, 1e300, 1 / (x + 1 - a)
    h = d
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2
        d = 1 / (an * d + b)
        c = b + an / c
        h *= d * c
    q = h * math.exp(a * math.log(x) - x - math.lgamma(a))
    return q if upper else 1 - q


_igamma = _vec(_igamma_one)


def _unary(fn, gen, params=None):
    """A forward kernel (R x, W y): y = fn(x, **params)."""
    def case(rng, dt):
        p = params(rng) if params else {}
        return dict(n=N, **p), [gen(rng, dt, N), np.zeros(N, dt)]
    return Reference(case, lambda a, x, y: {1: fn(a, _f(x))})


def _backward(rule, gen, params=None):
    """A backward kernel (R x, R dy, W dx): dx = dy rule(x, **params)."""
    def case(rng, dt):
        p = params(rng) if params else {}
        return dict(n=N, **p), [gen(rng, dt, N), _r(rng, dt, N), np.zeros(N, dt)]
    return Reference(case, lambda a, x, dy, dx: {2: _f(dy) * rule(a, _f(x))})


def _gamma_inputs(rng, dt, n=N):
    """Both signs, the poles (lgamma: inf; digamma: NaN) and 1 and 2 (lgamma's zeros)."""
    x = rng.uniform(-6, 12, n)
    x[:4] = [0.0, -2.0, 1.0, 2.0]
    return x.astype(dt)


def _nonpole_inputs(rng, dt, n=N):
    x = rng.uniform(-6, 12, n)
    x[np.abs(x - np.round(x)) < 0.05] += 0.25  # away from the poles (trigamma's 1/sin^2 there)
    return x.astype(dt)


def _bessel_inputs(rng, dt, n=N):
    x = _r(rng, dt, n) * 6
    x[:3] = [0.0, 24.5, -31.0]  # the asymptotic branch (|x| > 20) too
    return x.astype(dt)


def _erfcx_inputs(rng, dt, n=N):
    x = np.clip(_r(rng, dt, n) * 4, -9.0, None)  # (e^(x^2) within float32's range)
    x[:4] = [-8.0, 11.5, 12.5, 40.0]
    return x.astype(dt)


def _jy_inputs(rng, dt, n=N):
    x = rng.uniform(0.05, 8.0, n)
    x[0] = np.inf  # NaN, as torch's
    return x.astype(dt)


def _order(rng):
    return {"order": int(rng.integers(4))}


def _bessel_params(rng):
    return {"nu": int(rng.integers(2)), "scaled": int(rng.integers(2))}


def _binary_case(gen_a, gen_b, params=None):
    def case(rng, dt):
        p = params(rng) if params else {}
        return dict(n=N, **p), [gen_a(rng, N).astype(dt), gen_b(rng, N).astype(dt), np.zeros(N, dt)]
    return case


REFERENCES: dict[str, Reference] = {
    "lgamma": _unary(lambda a, x: _lgamma(x), _gamma_inputs),
    "lgamma_backward": _backward(lambda a, x: _digamma(x), _nonpole_inputs),
    "polygamma": _unary(lambda a, x: _polygamma(a["order"], x), _nonpole_inputs, _order),
    "polygamma_backward": _backward(lambda a, x: _polygamma(a["order"] + 1, x), _nonpole_inputs, _order),
    "bessel_i": _unary(lambda a, x: _bessel_i_one(a["nu"], a["scaled"], x), _bessel_inputs, _bessel_params),
    "bessel_i_backward": _backward(lambda a, x: _bessel_i_grad(a["nu"], a["scaled"], x), _bessel_inputs,
                                   _bessel_params),
    "erfcx": _unary(lambda a, x: _erfcx(x), _erfcx_inputs),
    "erfcx_backward": _backward(lambda a, x: 2 * x * _erfcx(x) - 2 / math.sqrt(math.pi), _erfcx_inputs),
    "bessel_jy": _unary(lambda a, x: _jy(a["kind"], x), _jy_inputs, lambda rng: {"kind": int(rng.integers(4))}),
    "igamma": Reference(_binary_case(lambda rng, n: rng.uniform(0.2, 8, n), lambda rng, n: rng.uniform(0.05, 15, n),
                                     lambda rng: {"upper": int(rng.integers(2))}),
                        lambda p, a, b, c: {2: _igamma(_f(a), _f(b), p["upper"])}),
    "zeta": Reference(_binary_case(lambda rng, n: rng.uniform(1.5, 6, n), lambda rng, n: rng.uniform(0.2, 5, n)),
                      lambda p, a, b, c: {2: _zeta(_f(a), _f(b))}),
}
