"""NumPy references for the element-wise math kernels (csrc/kernels.def, `# --- element-wise
math`): unary functions and their backward rules, binary maximum/minimum/pow/atan2, comparisons
into bool, where, masked_fill and the bool logical kernels.  Formulas follow PyTorch's
(tools/autograd/derivatives.yaml), including its values at the edges (NaN, 0, ties).

Inputs are computed in float64 and the kernel's real args are first rounded to the tile's
dtype (the kernels compute in it, as torch does with a Python scalar)."""
from __future__ import annotations

import numpy as np

from ._refbase import Reference, _pos, _r

N = 9


def _f(x):
    return np.asarray(x, dtype=np.float64)


def _sign(x):
    """torch.sign / sgn of a real tensor: NaN gives 0."""
    x = _f(x)
    return (x > 0).astype(np.float64) - (x < 0)


def _edges(rng, dt, n=N):
    """Random values with ties, a zero and a NaN at fixed places (maximum, compare)."""
    a, b = _r(rng, dt, n), _r(rng, dt, n)
    b[0] = a[0]
    a[1] = np.nan
    b[2] = np.nan
    a[3] = b[3] = 0
    return a, b


def _unary(fn, gen=_r):
    return Reference(lambda rng, dt: (dict(n=N), [gen(rng, dt, N), np.zeros(N, dt)]),
                     lambda a, x, y: {1: fn(_f(x))})


def _unary_bwd(fwd, rule, gen=_r, uses_y=False):
    """Backward kernel (R x|y, R dy, W dx): the first buffer is the input x, or the output y =
    fwd(x) when the rule is written in terms of the output."""
    def case(rng, dt):
        x = gen(rng, dt, N)
        first = fwd(_f(x)).astype(dt) if uses_y else x
        return dict(n=N), [first, _r(rng, dt, N), np.zeros(N, dt)]
    return Reference(case, lambda a, first, dy, dx: {2: rule(_f(first), _f(dy))})


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _scalar_case(gen, choices, name):
    def case(rng, dt):
        return {"n": N, name: float(choices[int(rng.integers(len(choices)))])}, [gen(rng, dt, N), np.zeros(N, dt)]
    return case


def _pow_scalar_bwd(a, x, dy, dx):
    p = _f(np.asarray(a["p"], dtype=x.dtype))
    return {2: np.zeros_like(_f(x)) if p == 0 else _f(dy) * (p * _f(x) ** (p - 1))}


def _rpow_scalar_bwd(a, y, dy, dx):
    s = _f(np.asarray(a["s"], dtype=y.dtype))
    with np.errstate(divide="ignore", invalid="ignore"):
        return {2: _f(dy) * np.where((s == 0) & (_f(y) <= 1), 0.0, _f(y) * np.log(s))}


def _rpow_scalar_bwd_case(rng, dt):
    s = float([2.5, 0.5, 0.0][int(rng.integers(3))])
    x = _r(rng, dt, N)
    x[0] = 0
    with np.errstate(divide="ignore"):
        y = (np.asarray(s, dtype=dt) ** x).astype(dt)
    return dict(n=N, s=s), [y, _r(rng, dt, N), np.zeros(N, dt)]


def _clamp_case(rng, dt, bwd=False):
    lo, hi = [(-0.5, 0.7), (-np.inf, 0.25), (0.3, np.inf), (0.5, 0.2), (np.nan, 0.7), (-0.5, np.nan)][int(rng.integers(6))]
    x = _r(rng, dt, N)
    x[0], x[1], x[2] = lo if np.isfinite(lo) else 0, hi if np.isfinite(hi) else 0, np.nan
    bufs = [x, _r(rng, dt, N), np.zeros(N, dt)] if bwd else [x, np.zeros(N, dt)]
    return dict(n=N, lo=lo, hi=hi), bufs


def _bounds(a, dt):
    return _f(np.asarray(a["lo"], dtype=dt)), _f(np.asarray(a["hi"], dtype=dt))


def _clamp(a, x, y):
    lo, hi = _bounds(a, x.dtype)
    return {1: np.where(np.isnan(x), _f(x), np.minimum(np.maximum(_f(x), lo), hi))}


def _clamp_bwd(a, x, dy, dx):
    lo, hi = _bounds(a, x.dtype)
    return {2: np.where((_f(x) >= lo) & (_f(x) <= hi), _f(dy), 0.0)}


def _binary(fn, gen=_edges):
    def case(rng, dt):
        a, b = gen(rng, dt)
        return dict(n=N), [a, b, np.zeros(N, dt)]
    return Reference(case, lambda args, a, b, c: {2: fn(_f(a), _f(b))})


def _maximum(a, b):
    return np.where(np.isnan(a), a, np.where(a >= b, a, b))


def _minimum(a, b):
    return np.where(np.isnan(a), a, np.where(a <= b, a, b))


def _maximum_bwd_case(rng, dt):
    a, b = _edges(rng, dt)
    return dict(n=N, ismin=int(rng.integers(2))), [a, b, _r(rng, dt, N), np.zeros(N, dt), np.zeros(N, dt)]


def _maximum_bwd(args, a, b, dy, da, db):
    """torch: where(a == b, dy / 2, dy), masked to 0 where the other operand wins."""
    a, b, dy = _f(a), _f(b), _f(dy)
    lose_a, lose_b = (a > b, a < b) if args["ismin"] else (a < b, a > b)
    return {3: np.where(a == b, dy / 2, np.where(lose_a, 0.0, dy)),
            4: np.where(a == b, dy / 2, np.where(lose_b, 0.0, dy))}


def _pow_operands(rng, dt):
    a, b = _pos(rng, dt, N), _r(rng, dt, N)
    a[0], b[0] = 0, 2      # 0 ** 2: da = 0, db = 0
    a[1], b[1] = 0, 0      # 0 ** 0: da = 0 (b == 0), db = 0
    a[2], b[2] = 1.25, 0   # da = 0 (b == 0)
    a[3], b[3] = 0, -1.5   # 0 ** -1.5 = inf
    return a, b


def _pow(a, b):
    with np.errstate(divide="ignore"):
        return a ** b


def _pow_bwd_case(rng, dt):
    a, b = _pow_operands(rng, dt)
    return dict(n=N), [a, b, _r(rng, dt, N), np.zeros(N, dt), np.zeros(N, dt)]


def _pow_bwd(args, a, b, dy, da, db):
    a, b, dy = _f(a), _f(b), _f(dy)
    with np.errstate(divide="ignore", invalid="ignore"):
        return {3: np.where(b == 0, 0.0, dy * (b * a ** (b - 1))),
                4: dy * np.where((a == 0) & (b >= 0), 0.0, a ** b * np.log(a))}


_CMP = [np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal]


def _compare_case(rng, dt):
    a, b = _edges(rng, dt)
    return dict(n=N, op=int(rng.integers(6))), [a, b, np.zeros(N, np.bool_)]


def _compare_scalar_case(rng, dt):
    x = _r(rng, dt, N)
    x[1] = np.nan
    return dict(n=N, op=int(rng.integers(6)), s=float(x[0])), [x, np.zeros(N, np.bool_)]


def _bools(rng, n=N):
    return rng.integers(2, size=n).astype(np.bool_)


_LOGICAL = [np.logical_and, np.logical_or, np.logical_xor]


def _divide(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):  # x / 0: inf or nan, as intended
        return a / b


def _halves(rng, dt, n=N):
    """Values with exact halves (round: to even) and integers among them."""
    x = _r(rng, dt, n) * 4
    x[:4] = [0.5, 1.5, -2.5, 3.0]
    return x


def _hardtanh_case(rng, dt, bwd=False, relu6=False):
    lo, hi = (0.0, 6.0) if relu6 else [(-1.0, 1.0), (-0.5, 0.25)][int(rng.integers(2))]
    x = _r(rng, dt, N) * (8 if relu6 else 2)
    x[0], x[1] = lo, hi
    bufs = [x, _r(rng, dt, N), np.zeros(N, dt)] if bwd else [x, np.zeros(N, dt)]
    return dict(n=N, lo=lo, hi=hi), bufs


def _hardtanh(a, x, y):
    lo, hi = _bounds(a, x.dtype)
    return {1: np.where(_f(x) < lo, lo, np.where(_f(x) > hi, hi, _f(x)))}


def _hardtanh_bwd(a, x, dy, dx):
    lo, hi = _bounds(a, x.dtype)
    return {2: np.where((_f(x) > lo) & (_f(x) < hi), _f(dy), 0.0)}


def _c(a, key, dt):
    return _f(np.asarray(a[key], dtype=dt))


_ELU_ARGS = [dict(alpha=1.0, scale=1.0, iscale=1.0), dict(alpha=0.5, scale=1.0, iscale=2.0),
             dict(alpha=1.6732632423543772, scale=1.0507009873554805, iscale=1.0)]


def _act_case(args_list, bwd, scale=3.0):
    def case(rng, dt):
        args = dict(args_list[int(rng.integers(len(args_list)))], n=N)
        x = _r(rng, dt, N) * scale
        x[0] = 0
        return args, ([x, _r(rng, dt, N), np.zeros(N, dt)] if bwd else [x, np.zeros(N, dt)])
    return case


def _elu(a, x, y):
    al, sc, isc, x = _c(a, "alpha", x.dtype), _c(a, "scale", x.dtype), _c(a, "iscale", x.dtype), _f(x)
    return {1: np.where(x > 0, x * sc, np.expm1(x * isc) * (al * sc))}


def _elu_bwd(a, x, dy, dx):
    al, sc, isc, x, dy = _c(a, "alpha", x.dtype), _c(a, "scale", x.dtype), _c(a, "iscale", x.dtype), _f(x), _f(dy)
    return {2: np.where(x > 0, dy * sc, dy * (isc * (al * sc)) * np.exp(x * isc))}


_SOFTPLUS_ARGS = [dict(beta=1.0, threshold=20.0), dict(beta=2.0, threshold=1.0)]


def _softplus(a, x, y):
    b, t, x = _c(a, "beta", x.dtype), _c(a, "threshold", x.dtype), _f(x)
    with np.errstate(over="ignore"):
        return {1: np.where(x * b > t, x, np.log1p(np.exp(x * b)) / b)}


def _softplus_bwd(a, x, dy, dx):
    b, t, x, dy = _c(a, "beta", x.dtype), _c(a, "threshold", x.dtype), _f(x), _f(dy)
    with np.errstate(over="ignore", invalid="ignore"):
        z = np.exp(x * b)
        return {2: np.where(x * b > t, dy, dy * z / (z + 1))}


def _leaky_case(bwd):
    return _act_case([dict(slope=0.01), dict(slope=0.2)], bwd)


def _erf(x):
    from math import erf
    return np.vectorize(erf)(x)


def _erfc(x):
    from math import erfc
    return np.vectorize(erfc, otypes=[np.float64])(x)


def _erfinv_one(x: float) -> float:
    """erfinv by bisection on erf (erfc near +-1, where 1 - |x| is exact): slow and plain."""
    from math import copysign, erf, erfc, inf, isnan, nan
    a = abs(x)
    if isnan(x) or a > 1:
        return nan
    if a == 1:
        return copysign(inf, x)
    f = (lambda y: erf(y) - a) if a < 0.5 else (lambda y: (1 - a) - erfc(y))
    lo, hi = 0.0, 7.0
    while True:
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            return copysign(mid, x)
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)


def _erfinv(x):
    return np.vectorize(_erfinv_one, otypes=[np.float64])(x)


def _unit(rng, dt, n=N):
    """Values in (-1, 1) (asin, acos, erfinv)."""
    return rng.uniform(-0.999, 0.999, n).astype(dt)


def _erfinv_inputs(rng, dt, n=N):
    x = _unit(rng, dt, n)
    x[:5] = [1.0, -1.0, 1.5, 0.0, 1 - float(np.finfo(dt).eps)]
    return x


def _wide(rng, dt, n=N):
    """erfc's inputs: its whole range, the tail where 1 - erf(x) would be 0 included."""
    x = _r(rng, dt, n) * 3
    x[:3] = [6.5, 9.0, -4.0]
    return x


def _atan2_bwd(args, a, b, dy, da, db):
    a, b, dy = _f(a), _f(b), _f(dy)
    s = a * a + b * b
    with np.errstate(divide="ignore"):
        r = np.where(s == 0, 0.0, 1 / s)
    return {3: dy * b * r, 4: dy * -a * r}


def _atan2_bwd_case(rng, dt):
    a, b = _edges(rng, dt)
    return dict(n=N), [a, b, _r(rng, dt, N), np.zeros(N, dt), np.zeros(N, dt)]


def _inv_sqrt_1mx2(x):
    with np.errstate(divide="ignore"):
        return 1 / np.sqrt(1 - x * x)


REFERENCES: dict[str, Reference] = {
    "log1p": _unary(np.log1p, _pos),
    "expm1": _unary(np.expm1),
    "erf": _unary(_erf),
    "floor": _unary(np.floor, _halves),
    "ceil": _unary(np.ceil, _halves),
    "round": _unary(np.rint, _halves),
    "trunc": _unary(np.trunc, _halves),
    "hardtanh": Reference(_hardtanh_case, _hardtanh),
    "log1p_backward": _unary_bwd(np.log1p, lambda x, dy: dy / (x + 1), _pos),
    "expm1_backward": _unary_bwd(np.expm1, lambda y, dy: dy * (y + 1), uses_y=True),
    "erf_backward": _unary_bwd(_erf, lambda x, dy: dy * (1.1283791670955126 * np.exp(-(x * x)))),
    "hardsigmoid": _unary(lambda x: np.minimum(np.maximum(x + 3, 0), 6) / 6, lambda rng, dt, n: _r(rng, dt, n) * 4),
    "hardsigmoid_backward": _unary_bwd(lambda x: x, lambda x, dy: np.where((x > -3) & (x < 3), dy * float(np.float32(1 / 6)), 0.0),
                                       lambda rng, dt, n: _r(rng, dt, n) * 4),
    "hardswish": _unary(lambda x: x * np.minimum(np.maximum(x + 3, 0), 6) / 6, lambda rng, dt, n: _r(rng, dt, n) * 4),
    "hardswish_backward": _unary_bwd(lambda x: x, lambda x, dy: np.where(x <= -3, 0.0, np.where(x < 3, dy * (x / 3 + 0.5), dy)),
                                     lambda rng, dt, n: _r(rng, dt, n) * 4),
    "hardtanh_backward": Reference(lambda rng, dt: _hardtanh_case(rng, dt, bwd=True), _hardtanh_bwd),
    "leaky_relu": Reference(_leaky_case(False), lambda a, x, y: {1: np.where(_f(x) > 0, _f(x), _f(x) * _c(a, "slope", x.dtype))}),
    "leaky_relu_backward": Reference(_leaky_case(True), lambda a, x, dy, dx: {
        2: np.where(_f(x) > 0, _f(dy), _f(dy) * _c(a, "slope", x.dtype))}),
    "elu": Reference(_act_case(_ELU_ARGS, False), _elu),
    "elu_backward": Reference(_act_case(_ELU_ARGS, True), _elu_bwd),
    "softplus": Reference(_act_case(_SOFTPLUS_ARGS, False, 12.0), _softplus),
    "softplus_backward": Reference(_act_case(_SOFTPLUS_ARGS, True, 12.0), _softplus_bwd),
    "exp": _unary(np.exp),
    "log": _unary(np.log, _pos),
    "sqrt": _unary(np.sqrt, _pos),
    "rsqrt": _unary(lambda x: 1 / np.sqrt(x), _pos),
    "abs": _unary(np.abs),
    "sign": _unary(_sign),
    "sin": _unary(np.sin),
    "cos": _unary(np.cos),
    "tanh": _unary(np.tanh),
    "sigmoid": _unary(_sigmoid),
    "pow_scalar": Reference(_scalar_case(_pos, [1.7, 2.0, -0.5, 0.0, 3.0], "p"),
                            lambda a, x, y: {1: _f(x) ** _f(np.asarray(a["p"], dtype=x.dtype))}),
    "rpow_scalar": Reference(_scalar_case(_r, [2.5, 0.5, 1.0], "s"),
                             lambda a, x, y: {1: _f(np.asarray(a["s"], dtype=x.dtype)) ** _f(x)}),
    "clamp": Reference(_clamp_case, _clamp),
    "exp_backward": _unary_bwd(np.exp, lambda y, dy: dy * y, uses_y=True),
    "log_backward": _unary_bwd(np.log, lambda x, dy: dy / x, _pos),
    "sqrt_backward": _unary_bwd(np.sqrt, lambda y, dy: dy / (2 * y), _pos, uses_y=True),
    "rsqrt_backward": _unary_bwd(lambda x: 1 / np.sqrt(x), lambda y, dy: -0.5 * dy * y ** 3, _pos, uses_y=True),
    "abs_backward": _unary_bwd(np.abs, lambda x, dy: dy * _sign(x)),
    "sin_backward": _unary_bwd(np.sin, lambda x, dy: dy * np.cos(x)),
    "cos_backward": _unary_bwd(np.cos, lambda x, dy: -dy * np.sin(x)),
    "tanh_backward": _unary_bwd(np.tanh, lambda y, dy: dy * (1 - y * y), uses_y=True),
    "sigmoid_backward": _unary_bwd(_sigmoid, lambda y, dy: dy * (1 - y) * y, uses_y=True),
    "pow_scalar_backward": Reference(
        lambda rng, dt: (dict(n=N, p=float([1.7, 0.0, 2.0, -0.5][int(rng.integers(4))])),
                         [_pos(rng, dt, N), _r(rng, dt, N), np.zeros(N, dt)]),
        _pow_scalar_bwd),
    "rpow_scalar_backward": Reference(_rpow_scalar_bwd_case, _rpow_scalar_bwd),
    "clamp_backward": Reference(lambda rng, dt: _clamp_case(rng, dt, bwd=True), _clamp_bwd),
    "asin": _unary(np.arcsin, _unit),
    "acos": _unary(np.arccos, _unit),
    "atan": _unary(np.arctan, lambda rng, dt, n: _r(rng, dt, n) * 4),
    "erfc": _unary(_erfc, _wide),
    "erfinv": _unary(_erfinv, _erfinv_inputs),
    "asin_backward": _unary_bwd(np.arcsin, lambda x, dy: dy * _inv_sqrt_1mx2(x), _unit),
    "acos_backward": _unary_bwd(np.arccos, lambda x, dy: dy * -_inv_sqrt_1mx2(x), _unit),
    "atan_backward": _unary_bwd(np.arctan, lambda x, dy: dy / (x * x + 1), lambda rng, dt, n: _r(rng, dt, n) * 4),
    "erfc_backward": _unary_bwd(_erfc, lambda x, dy: -1.1283791670955126 * np.exp(-(x * x)) * dy, _wide),
    "erfinv_backward": _unary_bwd(_erfinv, lambda y, dy: 0.88622692545275801 * np.exp(y * y) * dy, _unit,
                                  uses_y=True),
    "atan2": _binary(np.arctan2),
    "atan2_backward": Reference(_atan2_bwd_case, _atan2_bwd),
    "maximum": _binary(_maximum),
    "minimum": _binary(_minimum),
    "pow": _binary(_pow, _pow_operands),
    "maximum_backward": Reference(_maximum_bwd_case, _maximum_bwd),
    "pow_backward": Reference(_pow_bwd_case, _pow_bwd),
    "compare": Reference(_compare_case, lambda args, a, b, y: {2: _CMP[args["op"]](a, b)}),
    "compare_scalar": Reference(_compare_scalar_case,
                                lambda args, x, y: {1: _CMP[args["op"]](x, np.asarray(args["s"], dtype=x.dtype))}),
    "where": Reference(lambda rng, dt: (dict(n=N), [_bools(rng), _r(rng, dt, N), _r(rng, dt, N), np.zeros(N, dt)]),
                       lambda args, cond, a, b, y: {3: np.where(cond, a, b)}),
    "masked_fill": Reference(
        lambda rng, dt: (dict(n=N, value=-2.5, invert=int(rng.integers(2))), [_r(rng, dt, N), _bools(rng),
                                                                            np.zeros(N, dt)]),
        lambda args, x, mask, y: {2: np.where(mask != bool(args["invert"]), args["value"], x)}),
    "div_scalar": Reference(lambda rng, dt: (dict(n=N, s=float([3.0, -0.7, 0.0][int(rng.integers(3))])),
                                             [_r(rng, dt, N), np.zeros(N, dt)]),
                            lambda args, x, y: {1: _divide(x, np.asarray(args["s"], dtype=x.dtype))}),
    "logical": Reference(lambda rng, dt: (dict(n=N, op=int(rng.integers(3))),
                                          [_bools(rng), _bools(rng), np.zeros(N, np.bool_)]),
                         lambda args, a, b, y: {2: _LOGICAL[args["op"]](a, b)}),
    "logical_not": Reference(lambda rng, dt: (dict(n=N), [_bools(rng), np.zeros(N, np.bool_)]),
                             lambda args, a, y: {1: ~a}),
}
