"""Element-wise ops, generated from one table.

A unary op is one ``Unary`` row: its forward kernel, its backward kernel and which tensor
that kernel reads (the input x or the output y), and how the op's Python parameters become
kernel arguments.  A binary op is one ``Binary`` row: its forward kernel and its backward
kernel (which writes both gradients at once) or its backward rule when the gradients are
other ops (add, sub, mul, div).  From a row come the same-layout op (BINARY_OPS), its
autograd node and its backward rule; the public function (torch's name and signature) adds
broadcasting, promotion and numbers.  Adding an element-wise op with its derivative = a
kernels.def line (csrc/kernels.def, with an `expr` the bodies are generated) + one row here +
a test row.

Binary ops take tensors or Python numbers and follow PyTorch's rules:
- broadcasting (NumPy's rules): operands are expanded to the result's shape by copy tasks
  (tiletrain.ops.shape.expand_to), whose backward sums the gradient back;
- tiling: operands tiled differently are re-tiled to the result's tiling, which takes, axis
  by axis, the tile size of the first operand that spans that axis (so ``x + bias`` keeps
  x's tiling and costs no copy of x);
- dtype promotion between float types (float32 + float64 -> float64; float16 + bfloat16 ->
  float32), by a cast of the narrower operand."""
from __future__ import annotations

import math
import numbers
import weakref
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..runtime.kernels import run_map
from ..tensors import Tensor, TensorTraits, as_dtype, from_numpy, is_float, is_half
from ..tensors.tensor import get_default_dtype
from . import basic
from .autograd import backward_rule, double_backward_rule, record
from .basic import HALF_OPS, _any_float_tensor, _float_tensor, _scalar, _scaled, _tensor
from .shape import expand_to

# ---------------------------------------------------------------------------------- unary


@dataclass(frozen=True)
class Unary:
    """One element-wise unary op: y = kernel(x), dx = backward(x or y, dy)."""
    name: str                       # torch's name: the function, the method and the autograd node
    kernel: str                     # forward kernel (csrc/kernels.def): R x, W y
    backward: str | None            # backward kernel: R x|y, R dy, W dx (None: the gradient is zero)
    reads: str = "x"                # what the backward kernel reads: "x" (the input) or "y" (the output)
    params: Callable | None = None  # (*args, **kwargs after x) -> kernel arguments
    doc: str = ""
    differentiable: bool = True     # False: the result has no graph (torch's special.bessel_j0, ...)


def _gelu_params(approximate: str = "none") -> dict:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return {"approx": int(approximate == "tanh")}


def _inplace_params(what: str) -> Callable:
    """torch.nn.functional's ``inplace`` flag (relu, silu): accepted, the result is a new
    tensor either way (as nn.ReLU(inplace=True)); use the return value."""
    def params(inplace: bool = False) -> dict:
        if not isinstance(inplace, bool):
            raise TypeError(f"{what}: inplace must be a bool, got {type(inplace).__name__}")
        return {}
    return params


def _clamp_params(min=None, max=None) -> dict:  # noqa: A002 - torch's names
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must not be None")
    lo = -np.inf if min is None else _scalar(min, "clamp", "min")
    hi = np.inf if max is None else _scalar(max, "clamp", "max")
    return {"lo": lo, "hi": hi}


def _pow_params(exponent) -> dict:
    return {"p": _scalar(exponent, "pow", "exponent")}


def _rpow_params(base) -> dict:
    return {"s": _scalar(base, "pow", "self")}


def _leaky_params(negative_slope: float = 0.01, inplace: bool = False) -> dict:
    _inplace_params("leaky_relu")(inplace)
    return {"slope": _scalar(negative_slope, "leaky_relu", "negative_slope")}


def _elu_params(alpha: float = 1.0, inplace: bool = False) -> dict:
    _inplace_params("elu")(inplace)
    return {"alpha": _scalar(alpha, "elu", "alpha"), "scale": 1.0, "iscale": 1.0}


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def _selu_params(inplace: bool = False) -> dict:
    _inplace_params("selu")(inplace)
    return {"alpha": _SELU_ALPHA, "scale": _SELU_SCALE, "iscale": 1.0}


def _celu_params(alpha: float = 1.0, inplace: bool = False) -> dict:
    _inplace_params("celu")(inplace)
    alpha = _scalar(alpha, "celu", "alpha")
    if alpha == 0:
        raise ValueError("ZeroDivisionError: celu: alpha must not be 0")
    return {"alpha": alpha, "scale": 1.0, "iscale": 1.0 / alpha}


def _softplus_params(beta: float = 1.0, threshold: float = 20.0) -> dict:
    return {"beta": _scalar(beta, "softplus", "beta"), "threshold": _scalar(threshold, "softplus", "threshold")}


def _hardtanh_params(min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> dict:
    _inplace_params("hardtanh")(inplace)
    lo, hi = _scalar(min_val, "hardtanh", "min_val"), _scalar(max_val, "hardtanh", "max_val")
    if lo > hi:
        raise ValueError("hardtanh: min_val cannot be greater than max_val")
    return {"lo": lo, "hi": hi}


def _relu6_params(inplace: bool = False) -> dict:
    _inplace_params("relu6")(inplace)
    return {"lo": 0.0, "hi": 6.0}


def _fixed(what: str, **args) -> Callable:
    """The kernel arguments of a row that takes no Python parameters (digamma: polygamma of
    order 0, i0e: bessel_i with nu 0 and scaled 1)."""
    def params(*extra, **kw) -> dict:
        if extra or kw:
            raise TypeError(f"{what}() takes one tensor argument")
        return dict(args)
    return params


def _polygamma_params(n) -> dict:
    """torch.polygamma's n: an int >= 0 (orders past 2**30 keep their parity: n! is inf from 171 on)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"polygamma(): argument 'n' (position 1) must be int, not {type(n).__name__}")
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    return {"order": int(n) if n < 2 ** 30 else 2 ** 30 + int(n) % 2}


def _round_params(decimals: int = 0) -> dict:
    if decimals != 0:
        raise NotImplementedError("round: decimals other than 0 are not supported")
    return {}


UNARY = [
    Unary("relu", "relu", "relu_backward", "x", _inplace_params("relu"), "max(x, 0)"),
    Unary("gelu", "gelu", "gelu_backward", "x", _gelu_params,
          "x * Phi(x) (approximate='none', erf form) or the tanh approximation (approximate='tanh')"),
    Unary("silu", "silu", "silu_backward", "x", _inplace_params("silu"), "x * sigmoid(x)"),
    Unary("exp", "exp", "exp_backward", "y", doc="e ** x"),
    Unary("log", "log", "log_backward", "x", doc="natural logarithm"),
    Unary("sqrt", "sqrt", "sqrt_backward", "y", doc="square root"),
    Unary("rsqrt", "rsqrt", "rsqrt_backward", "y", doc="1 / sqrt(x)"),
    Unary("abs", "abs", "abs_backward", "x", doc="|x|"),
    Unary("sign", "sign", None, doc="-1, 0 or 1 (NaN stays NaN); zero gradient"),
    Unary("sin", "sin", "sin_backward", "x", doc="sine"),
    Unary("cos", "cos", "cos_backward", "x", doc="cosine"),
    Unary("tanh", "tanh", "tanh_backward", "y", doc="hyperbolic tangent"),
    Unary("sigmoid", "sigmoid", "sigmoid_backward", "y", doc="1 / (1 + e ** -x)"),
    Unary("clamp", "clamp", "clamp_backward", "x", _clamp_params,
          "min(max(x, min), max); the gradient passes where min <= x <= max"),
    Unary("pow_scalar", "pow_scalar", "pow_scalar_backward", "x", _pow_params, "x ** exponent"),
    Unary("rpow_scalar", "rpow_scalar", "rpow_scalar_backward", "y", _rpow_params, "base ** x"),
    Unary("log1p", "log1p", "log1p_backward", "x", doc="log(1 + x), exact for small x"),
    Unary("expm1", "expm1", "expm1_backward", "y", doc="exp(x) - 1, exact for small x"),
    Unary("erf", "erf", "erf_backward", "x", doc="the error function"),
    Unary("erfc", "erfc", "erfc_backward", "x", doc="1 - erf(x), accurate where erf(x) is near 1"),
    Unary("erfinv", "erfinv", "erfinv_backward", "y", doc="the inverse of erf on [-1, 1] (NaN outside)"),
    Unary("asin", "asin", "asin_backward", "x", doc="arcsine"),
    Unary("acos", "acos", "acos_backward", "x", doc="arccosine"),
    Unary("atan", "atan", "atan_backward", "x", doc="arctangent"),
    Unary("lgamma", "lgamma", "lgamma_backward", "x", doc="log |Gamma(x)| (+inf at 0 and the negative integers)"),
    Unary("digamma", "polygamma", "polygamma_backward", "x", _fixed("digamma", order=0),
          "d/dx log Gamma(x) (-inf at +0, +inf at -0, NaN at the negative integers)"),
    Unary("polygamma", "polygamma", "polygamma_backward", "x", _polygamma_params,
          "the n-th derivative of digamma (polygamma(input, n): tiletrain.polygamma(n, input) is torch's order)"),
    Unary("i0", "bessel_i", "bessel_i_backward", "x", _fixed("i0", nu=0, scaled=0),
          "the modified Bessel function of the first kind of order 0"),
    Unary("i0e", "bessel_i", "bessel_i_backward", "x", _fixed("i0e", nu=0, scaled=1), "exp(-|x|) i0(x)"),
    Unary("i1", "bessel_i", "bessel_i_backward", "x", _fixed("i1", nu=1, scaled=0),
          "the modified Bessel function of the first kind of order 1"),
    Unary("i1e", "bessel_i", "bessel_i_backward", "x", _fixed("i1e", nu=1, scaled=1), "exp(-|x|) i1(x)"),
    Unary("erfcx", "erfcx", "erfcx_backward", "x", doc="exp(x ** 2) erfc(x), the scaled complementary error function"),
    Unary("bessel_j0", "bessel_jy", None, params=_fixed("bessel_j0", kind=0), differentiable=False,
          doc="the Bessel function of the first kind of order 0 (no gradient, as torch)"),
    Unary("bessel_j1", "bessel_jy", None, params=_fixed("bessel_j1", kind=1), differentiable=False,
          doc="the Bessel function of the first kind of order 1 (no gradient, as torch)"),
    Unary("bessel_y0", "bessel_jy", None, params=_fixed("bessel_y0", kind=2), differentiable=False,
          doc="the Bessel function of the second kind of order 0 (no gradient, as torch)"),
    Unary("bessel_y1", "bessel_jy", None, params=_fixed("bessel_y1", kind=3), differentiable=False,
          doc="the Bessel function of the second kind of order 1 (no gradient, as torch)"),
    Unary("floor", "floor", None, doc="the largest integer <= x; zero gradient"),
    Unary("ceil", "ceil", None, doc="the smallest integer >= x; zero gradient"),
    Unary("round", "round", None, params=_round_params, doc="nearest integer, halves to even; zero gradient"),
    Unary("trunc", "trunc", None, doc="x rounded toward zero; zero gradient"),
    Unary("leaky_relu", "leaky_relu", "leaky_relu_backward", "x", _leaky_params,
          "x where x > 0, else negative_slope * x"),
    Unary("elu", "elu", "elu_backward", "x", _elu_params, "x where x > 0, else alpha (e ** x - 1)"),
    Unary("selu", "elu", "elu_backward", "x", _selu_params, "scale * elu(x, alpha) with SELU's constants"),
    Unary("celu", "elu", "elu_backward", "x", _celu_params, "max(0, x) + min(0, alpha (e ** (x / alpha) - 1))"),
    Unary("softplus", "softplus", "softplus_backward", "x", _softplus_params,
          "log(1 + e ** (beta x)) / beta, x itself where beta x > threshold"),
    Unary("hardtanh", "hardtanh", "hardtanh_backward", "x", _hardtanh_params,
          "x clamped to [min_val, max_val]; the gradient passes strictly inside"),
    Unary("relu6", "hardtanh", "hardtanh_backward", "x", _relu6_params, "min(max(x, 0), 6)"),
    Unary("hardsigmoid", "hardsigmoid", "hardsigmoid_backward", "x", _inplace_params("hardsigmoid"),
          "min(max(x + 3, 0), 6) / 6"),
    Unary("hardswish", "hardswish", "hardswish_backward", "x", _inplace_params("hardswish"),
          "x * min(max(x + 3, 0), 6) / 6"),
]


# torch's unary ops on an int64 tensor: these keep the integers (computed in NumPy on the host,
# as the other integer arithmetic, _int_host) ...
_INT_KEEPING = {"abs": np.abs, "sign": np.sign, "relu": lambda a: np.maximum(a, 0),
                "floor": np.copy, "ceil": np.copy, "round": np.copy, "trunc": np.copy}
# ... and these compute in the default float dtype (an int64 or bool input is cast first).
_INT_TO_FLOAT = {"exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "log1p", "expm1", "erf", "erfc",
                 "erfinv", "asin", "acos", "atan", "lgamma", "digamma", "polygamma", "i0", "i0e", "i1", "i1e", "erfcx",
                 "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1"}


def _integer_unary(name: str, x: Tensor, args, kwargs):
    """(result, None) when torch keeps an integer input's dtype for op ``name``; (None, x as
    the default float dtype) when torch computes it in floats; (None, x) otherwise (the float
    check that follows refuses it, as torch refuses e.g. gelu of int64)."""
    if x.dtype == np.int64 and name in _INT_KEEPING:
        return _int_host(name, _INT_KEEPING[name], x), None
    if x.dtype == np.int64 and name == "clamp":
        bounds = dict(zip(("min", "max"), args), **kwargs)
        _clamp_params(**bounds)  # the same argument checks
        if all(v is None or (isinstance(v, numbers.Integral) and not isinstance(v, bool)) for v in bounds.values()):
            return _int_host(name, lambda a: np.clip(a, bounds.get("min"), bounds.get("max")), x), None
        return None, convert(x, get_default_dtype())  # a float bound: a float result
    if name in _INT_TO_FLOAT:
        return None, convert(x, get_default_dtype())
    return None, x


def _unary_op(row: Unary) -> Callable:
    def op(input: Tensor, *args, **kwargs) -> Tensor:  # noqa: A002 - torch's name
        if isinstance(input, Tensor) and input.dtype in (np.int64, np.bool_):
            done, input = _integer_unary(row.name, input, args, kwargs)
            if done is not None:
                return done
        x = _float_tensor(input, row.name, "input")
        if row.params is not None:
            params = row.params(*args, **kwargs)
        elif args or kwargs:
            raise TypeError(f"{row.name}() takes one tensor argument")
        else:
            params = {}
        y = Tensor(x.traits, x.dtype)
        run_map(row.kernel, x, y, **params)
        if not row.differentiable:
            return y
        # the output is saved weakly: it is alive whenever its node can be reached
        return record(row.name, y, (x,), saved=(x,) if row.reads == "x" else (),
                      params=params, output=weakref.ref(y) if row.reads == "y" else None)

    op.__name__ = op.__qualname__ = row.name
    op.__doc__ = f"{row.doc} (element-wise; kernel `{row.kernel}`)."

    if not row.differentiable:
        return op

    @backward_rule(row.name)
    def rule(node, g):
        if row.backward is None:
            return (basic.fill_(Tensor(g.traits, g.dtype), 0.0),)
        t = node.saved[0] if row.reads == "x" else node.ctx["output"]()
        dx = Tensor(t.traits, t.dtype)
        run_map(row.backward, t, g, dx, **node.ctx["params"])
        return (dx,)

    return op


_UNARY_OPS = {row.name: _unary_op(row) for row in UNARY}
relu, gelu, silu = _UNARY_OPS["relu"], _UNARY_OPS["gelu"], _UNARY_OPS["silu"]
exp, log, sqrt, rsqrt = _UNARY_OPS["exp"], _UNARY_OPS["log"], _UNARY_OPS["sqrt"], _UNARY_OPS["rsqrt"]
abs, sign = _UNARY_OPS["abs"], _UNARY_OPS["sign"]  # noqa: A001 - torch's name
sin, cos, tanh, sigmoid = _UNARY_OPS["sin"], _UNARY_OPS["cos"], _UNARY_OPS["tanh"], _UNARY_OPS["sigmoid"]
_clamp_numbers = _UNARY_OPS["clamp"]


def clamp(input: Tensor, min=None, max=None) -> Tensor:  # noqa: A002 - torch's names
    """min(max(x, min), max) (element-wise); a bound may be a number or a tensor (broadcast:
    maximum/minimum with it, the gradient flowing to the bound where it is chosen)."""
    if not isinstance(min, Tensor) and not isinstance(max, Tensor):
        return _clamp_numbers(input, min, max)
    y = input
    if min is not None:
        y = maximum(y, min) if isinstance(min, Tensor) else _clamp_numbers(y, min=min)
    if max is not None:
        y = minimum(y, max) if isinstance(max, Tensor) else _clamp_numbers(y, max=max)
    return y


clip = clamp
log1p, expm1, erf = _UNARY_OPS["log1p"], _UNARY_OPS["expm1"], _UNARY_OPS["erf"]
erfc, erfinv = _UNARY_OPS["erfc"], _UNARY_OPS["erfinv"]
lgamma, digamma, i0, erfcx = _UNARY_OPS["lgamma"], _UNARY_OPS["digamma"], _UNARY_OPS["i0"], _UNARY_OPS["erfcx"]
i0e, i1, i1e = _UNARY_OPS["i0e"], _UNARY_OPS["i1"], _UNARY_OPS["i1e"]
asin, acos, atan = _UNARY_OPS["asin"], _UNARY_OPS["acos"], _UNARY_OPS["atan"]
arcsin, arccos, arctan = asin, acos, atan
floor, ceil, round, trunc = (_UNARY_OPS[k] for k in ("floor", "ceil", "round", "trunc"))  # noqa: A001
leaky_relu, elu, selu, celu = (_UNARY_OPS[k] for k in ("leaky_relu", "elu", "selu", "celu"))
softplus, hardtanh, relu6 = _UNARY_OPS["softplus"], _UNARY_OPS["hardtanh"], _UNARY_OPS["relu6"]
hardsigmoid, hardswish = _UNARY_OPS["hardsigmoid"], _UNARY_OPS["hardswish"]


# ---- double backward: each unary op's derivative written with recorded ops ---------------
# f(x, y, g, params) -> dx (x the input, y the output), the formulas of torch's derivatives.

def _gelu_d(x, y, g, p):
    if p["approx"]:  # the tanh form: its derivative is recorded ops all through
        k, c = math.sqrt(2.0 / math.pi), 0.044715
        t = tanh(mul(add(x, mul(mul(mul(x, x), x), c)), k))
        # 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)
        inner = mul(add(mul(mul(x, x), 3.0 * c), 1.0), k)
        d = add(mul(add(t, 1.0), 0.5), mul(mul(mul(x, sub(1.0, mul(t, t))), inner), 0.5))
        return mul(g, d)
    return mul(g, _gelu_grad(x))


def _silu_d(x, y, g, p):
    s = sigmoid(x)  # d silu = s (1 + x (1 - s))
    return mul(g, mul(s, add(mul(x, sub(1.0, s)), 1.0)))


def _clamp_d(x, y, g, p):
    return where(logical_and(ge(x, p["lo"]), le(x, p["hi"])), g, 0.0)


def _pow_scalar_d(x, y, g, p):
    e = p["p"]
    if e == 0.0:
        return basic.fill_(Tensor(g.traits, g.dtype), 0.0)
    return mul(g, mul(pow(x, e - 1.0), e))


def _rpow_scalar_d(x, y, g, p):
    s = p["s"]
    if s == 0.0:  # torch: 0 ** x has gradient 0 where x >= 0
        return where(ge(x, 0.0), 0.0, mul(g, mul(y, -math.inf)))
    return mul(g, mul(y, math.log(s)))


def _zero_d(x, y, g, p):
    return basic.fill_(Tensor(g.traits, g.dtype), 0.0)


def _elu_d(x, y, g, p):
    neg = mul(mul(g, p["iscale"] * (p["alpha"] * p["scale"])), exp(mul(x, p["iscale"])))
    return where(gt(x, 0.0), mul(g, p["scale"]), neg)


def _softplus_d(x, y, g, p):
    bx = mul(x, p["beta"])
    return where(gt(bx, p["threshold"]), g, mul(g, sigmoid(bx)))


def _hardtanh_d(x, y, g, p):
    return where(logical_and(gt(x, p["lo"]), lt(x, p["hi"])), g, 0.0)


def _i1_d(x, y, g, p):
    """torch's i1 / i1e backward as recorded ops: 1/2 where |x| <= eps, else i0 - i1 / x
    (e^-|x| (i0 - i1 (sgn x + 1 / x)) for i1e), x replaced by eps in the branch not taken."""
    eps = float(np.finfo(np.dtype(x.dtype)).eps)
    tiny = le(abs(x), eps)
    safe = where(tiny, eps, x)
    if p["scaled"]:
        d = sub(i0e(safe), mul(i1e(safe), add(sign(safe), reciprocal(safe))))
    else:
        d = sub(i0(safe), div(i1(safe), safe))
    return mul(g, where(tiny, 0.5, d))


_UNARY_DOUBLE = {
    "relu": lambda x, y, g, p: where(gt(x, 0.0), g, 0.0),
    "gelu": _gelu_d,
    "silu": _silu_d,
    "exp": lambda x, y, g, p: mul(g, y),
    "log": lambda x, y, g, p: div(g, x),
    "sqrt": lambda x, y, g, p: div(g, mul(y, 2.0)),
    "rsqrt": lambda x, y, g, p: mul(mul(g, pow(y, 3.0)), -0.5),
    "abs": lambda x, y, g, p: mul(g, sign(x)),
    "sign": lambda x, y, g, p: basic.fill_(Tensor(g.traits, g.dtype), 0.0),
    "sin": lambda x, y, g, p: mul(g, cos(x)),
    "cos": lambda x, y, g, p: mul(g, neg(sin(x))),
    "tanh": lambda x, y, g, p: mul(g, sub(1.0, mul(y, y))),
    "sigmoid": lambda x, y, g, p: mul(g, mul(sub(1.0, y), y)),
    "clamp": _clamp_d,
    "pow_scalar": _pow_scalar_d,
    "rpow_scalar": _rpow_scalar_d,
    "log1p": lambda x, y, g, p: div(g, add(x, 1.0)),
    "expm1": lambda x, y, g, p: mul(g, add(y, 1.0)),
    "erf": lambda x, y, g, p: mul(g, mul(exp(neg(mul(x, x))), 2.0 / math.sqrt(math.pi))),
    "erfc": lambda x, y, g, p: mul(g, mul(exp(neg(mul(x, x))), -2.0 / math.sqrt(math.pi))),
    "erfinv": lambda x, y, g, p: mul(g, mul(exp(mul(y, y)), 0.5 * math.sqrt(math.pi))),
    "asin": lambda x, y, g, p: mul(g, rsqrt(sub(1.0, mul(x, x)))),
    "acos": lambda x, y, g, p: mul(g, neg(rsqrt(sub(1.0, mul(x, x))))),
    "atan": lambda x, y, g, p: div(g, add(mul(x, x), 1.0)),
    "lgamma": lambda x, y, g, p: mul(g, digamma(x)),
    "digamma": lambda x, y, g, p: mul(g, _UNARY_OPS["polygamma"](x, 1)),
    "polygamma": lambda x, y, g, p: mul(g, _UNARY_OPS["polygamma"](x, p["order"] + 1)),
    "i0": lambda x, y, g, p: mul(g, i1(x)),
    "i0e": lambda x, y, g, p: mul(g, sub(i1e(x), mul(sign(x), i0e(x)))),
    "i1": _i1_d, "i1e": _i1_d,
    "erfcx": lambda x, y, g, p: mul(g, sub(mul(mul(x, 2.0), erfcx(x)), 2.0 / math.sqrt(math.pi))),
    "floor": _zero_d, "ceil": _zero_d, "round": _zero_d, "trunc": _zero_d,
    "leaky_relu": lambda x, y, g, p: where(gt(x, 0.0), g, mul(g, p["slope"])),
    "elu": _elu_d, "selu": _elu_d, "celu": _elu_d,
    "softplus": _softplus_d,
    "hardtanh": _hardtanh_d, "relu6": _hardtanh_d,
    "hardswish": lambda x, y, g, p: where(le(x, -3.0), 0.0, where(lt(x, 3.0), mul(g, add(div(x, 3.0), 0.5)), g)),
    "hardsigmoid": lambda x, y, g, p: where(logical_and(gt(x, -3.0), lt(x, 3.0)), mul(g, 0.16666667163372040), 0.0),
}


def _unary_double(row: Unary) -> None:
    if not row.differentiable:
        return
    f = _UNARY_DOUBLE[row.name]

    @double_backward_rule(row.name)
    def rule(node, g):
        x = node.saved[0] if row.reads == "x" else node.inputs[0]
        y = node.ctx["output"]() if row.reads == "y" else None
        return (f(x, y, g, node.ctx["params"]),)


def _gelu_grad(x: Tensor) -> Tensor:
    """gelu'(x), erf form (Phi(x) + x phi(x)), as a recorded op: its own gradient is
    gelu''(x) = phi(x) (2 - x^2), recorded ops again."""
    ones = basic.fill_(Tensor(x.traits, x.dtype), 1.0)
    d = Tensor(x.traits, x.dtype)
    run_map("gelu_backward", x, ones, d, approx=0)
    return record("gelu_grad", d, (x,), saved=(x,))


@backward_rule("gelu_grad", differentiable=True)
def _gelu_grad_bwd(node, g):
    (x,) = node.saved
    x2 = mul(x, x)
    phi = mul(exp(mul(x2, -0.5)), 1.0 / math.sqrt(2.0 * math.pi))
    return (mul(g, mul(phi, sub(2.0, x2))),)


def rdiv_scalar(s: float, x: Tensor) -> Tensor:
    """s / x"""
    _float_tensor(x, "rdiv_scalar", "x")
    y = Tensor(x.traits, x.dtype)
    s = _scalar(s, "rdiv_scalar", "s")
    run_map("rdiv_scalar", x, y, s=s)
    return record("rdiv_scalar", y, (x,), saved=(x,), s=s)


@backward_rule("rdiv_scalar", differentiable=True)
def _rdiv_scalar_bwd(node, g):
    (x,) = node.saved
    return (BINARY_OPS["div"](g, BINARY_OPS["mul"](x, x, alpha=1.0), alpha=-node.ctx["s"]),)  # d(s/x) = -s/x^2


def reciprocal(input: Tensor) -> Tensor:  # noqa: A002
    """1 / x (element-wise)."""
    return rdiv_scalar(1.0, input)


def neg(input: Tensor) -> Tensor:  # noqa: A002
    """-x (element-wise)."""
    if isinstance(input, Tensor) and input.dtype == np.int64:
        return _int_host("neg", np.negative, input)
    return basic.scale(input, -1.0)


negative = neg

# ---------------------------------------------------------------------------------- binary


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def result_layout(*shapes_tiles) -> TensorTraits:
    """The broadcast shape of (shape, tiles) operands, with each axis tiled like the first
    operand that spans it (size > 1 along it), else like the first that has it."""
    shapes = [s for s, _ in shapes_tiles]
    try:
        shape = np.broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError("operands could not be broadcast together with shapes "
                         + " ".join(str(tuple(s)) for s in shapes)) from None
    nd = len(shape)
    tiles = []
    for ax in range(nd):
        pick = None
        for s, t in shapes_tiles:
            off = ax - (nd - len(s))
            if off < 0:
                continue
            if s[off] == shape[ax]:
                pick = t[off]
                break
        tiles.append(pick if pick is not None else min(shape[ax], 512))
    return TensorTraits(tuple(shape), tuple(tiles))


def _promote(what: str, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    if a.dtype == b.dtype:
        return a, b
    if not (is_float(a.dtype) and is_float(b.dtype)):
        raise TypeError(f"{what}: dtype mismatch, input is {a.dtype} and other is {b.dtype}")
    # float16 + bfloat16 -> float32, as torch; otherwise NumPy's promotion of the float types
    dt = np.dtype(np.float32) if is_half(a.dtype) and is_half(b.dtype) else np.promote_types(a.dtype, b.dtype)
    return (a if a.dtype == dt else basic.astype(a, dt)), (b if b.dtype == dt else basic.astype(b, dt))


def align(what: str, *tensors: Tensor) -> tuple[Tensor, ...]:
    """The operands expanded and re-tiled to their common layout (themselves when they have it)."""
    first = tensors[0]
    if all(t.shape == first.shape and t.tiles == first.tiles for t in tensors[1:]):
        return tensors
    traits = result_layout(*((t.shape, t.tiles) for t in tensors))
    return tuple(expand_to(t, traits.shape, traits.tiles) for t in tensors)


def _tensor_operands(what: str, a, b, half: bool) -> tuple[Tensor, Tensor]:
    if _nonfloat(a, b) and any(isinstance(t, Tensor) and is_float(t.dtype) for t in (a, b)):
        a, b = _float_operands(a, b)  # an int64/bool tensor meeting a float one: torch's promotion
    check = _any_float_tensor if half else _float_tensor
    check(a, what, "input")
    check(b, what, "other")
    a, b = _promote(what, a, b)
    return align(what, a, b)


@dataclass(frozen=True)
class Binary:
    """One element-wise binary op of same-layout tensors: c = kernel(a, b, **args), the
    arguments (add: alpha, beta; mul, div: alpha) given by the caller.  The gradients come
    from ``backward``: a kernel (R a, R b, R dc, W da, W db, with ``params``) or a rule (node,
    g) -> (da, db) of other ops."""
    name: str                       # torch's name: the function and the autograd node
    kernel: str
    backward: str | Callable
    params: dict | None = None      # fixed arguments of a backward kernel
    saves: bool = True              # the backward reads a and b


def _add_bwd(node, g):  # c = alpha a + beta b (sub: beta = -alpha)
    a, b = node.inputs
    return (_scaled(g, node.ctx["alpha"]) if a is not None else None,
            _scaled(g, node.ctx["beta"]) if b is not None else None)


def _mul_bwd(node, g):  # c = alpha a b
    a, b = node.saved
    alpha = node.ctx["alpha"]
    return (BINARY_OPS["mul"](g, b, alpha=alpha) if node.inputs[0] is not None else None,
            BINARY_OPS["mul"](g, a, alpha=alpha) if node.inputs[1] is not None else None)


def _div_bwd(node, g):  # c = alpha a / b
    a, b = node.saved
    div, mul = BINARY_OPS["div"], BINARY_OPS["mul"]
    da = div(g, b, alpha=node.ctx["alpha"])                                            # alpha g / b
    db = div(mul(da, a, alpha=1.0), b, alpha=-1.0) if node.inputs[1] is not None else None  # -alpha g a / b^2
    return (da if node.inputs[0] is not None else None, db)


def _igamma_bwd(node, g):  # c = P(a, b) (igamma) or Q(a, b) (igammac), torch's derivatives
    a, x = node.saved
    if node.inputs[0] is not None:
        raise NotImplementedError(f"the derivative for '{node.op}: input' is not implemented.")
    if node.inputs[1] is None:
        return None, None
    d = exp(sub(sub(mul(sub(a, 1.0), log(x)), x), lgamma(a)))  # x^(a-1) e^-x / Gamma(a)
    return None, mul(g, d) if node.op == "igamma" else mul(neg(g), d)


def _zeta_bwd(node, g):  # c = zeta(s, q): d/dq = -s zeta(s + 1, q); none in s (torch's)
    s, q = node.saved
    if node.inputs[0] is not None:
        raise NotImplementedError("the derivative for 'zeta' is not implemented.")
    if node.inputs[1] is None:
        return None, None
    return None, mul(mul(g, neg(s)), BINARY_OPS["zeta"](add(s, 1.0), q))


BINARY = [
    Binary("add", "add", _add_bwd, saves=False),
    Binary("sub", "add", _add_bwd, saves=False),
    Binary("mul", "mul", _mul_bwd),
    Binary("div", "div", _div_bwd),
    Binary("maximum", "maximum", "maximum_backward", {"ismin": 0}),
    Binary("minimum", "minimum", "maximum_backward", {"ismin": 1}),
    Binary("pow", "pow", "pow_backward"),
    Binary("atan2", "atan2", "atan2_backward"),
    Binary("igamma", "igamma", _igamma_bwd),
    Binary("igammac", "igamma", _igamma_bwd),
    Binary("zeta", "zeta", _zeta_bwd),
]


def _binary_op(row: Binary) -> Callable:
    def op(a: Tensor, b: Tensor, **args) -> Tensor:
        c = Tensor(a.traits, a.dtype)
        run_map(row.kernel, a, b, c, **args)
        return record(row.name, c, (a, b), saved=(a, b) if row.saves else (), **args)

    op.__name__ = op.__qualname__ = f"{row.name}_same_layout"
    op.__doc__ = f"{row.name} of two tensors of one shape, tiling and dtype (kernel `{row.kernel}`)."

    if callable(row.backward):  # a rule of recorded ops (add, sub, mul, div): differentiable as it is
        backward_rule(row.name, differentiable=True)(row.backward)
    else:
        @backward_rule(row.name)
        def rule(node, g):
            a, b = node.saved
            da, db = Tensor(a.traits, a.dtype), Tensor(b.traits, b.dtype)
            run_map(row.backward, a, b, g, da, db, **(row.params or {}))
            return (da if node.inputs[0] is not None else None, db if node.inputs[1] is not None else None)

    return op


# The same-layout op of each row: operands of one shape, tiling and dtype (no checks), the
# kernel's arguments as keywords.  The public functions below check, broadcast and promote,
# then call these; backward rules elsewhere call them directly (one task with the kernel's
# scaling where a second op would cost another).
BINARY_OPS = {row.name: _binary_op(row) for row in BINARY}


def maximum(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """Element-wise maximum (NaN propagates; ties split the gradient, as torch)."""
    return BINARY_OPS["maximum"](*_tensor_operands("maximum", input, other, half=False))


def minimum(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """Element-wise minimum (NaN propagates; ties split the gradient, as torch)."""
    return BINARY_OPS["minimum"](*_tensor_operands("minimum", input, other, half=False))


def _nonfloat(a, b) -> bool:
    """An int64 or bool tensor among two operands (the hot float path skips the integer rules)."""
    return (isinstance(a, Tensor) and not is_float(a.dtype)) or (isinstance(b, Tensor) and not is_float(b.dtype))


def _integral(v) -> bool:
    return (isinstance(v, Tensor) and not is_float(v.dtype)) or (isinstance(v, numbers.Integral))


def _int_case(*vals) -> bool:
    """True when every operand is an int64/bool tensor or an int (torch's integer arithmetic:
    an integer result), with at least one tensor."""
    return any(isinstance(v, Tensor) for v in vals) and all(_integral(v) for v in vals)


def _int_host(what: str, fn, *vals) -> Tensor:
    """Integer arithmetic in NumPy (the operands are read; int64 wraps around as torch's): index
    and label tensors are small, and float kernels would not keep int64 values beyond 2**53."""
    args = [v.numpy(force=True) if isinstance(v, Tensor) else v for v in vals]
    try:
        with np.errstate(over="ignore"):
            out = fn(*args)
    except ValueError as e:
        raise RuntimeError(f"{what}: {e}") from None
    return host_tensor(out)


def host_tensor(a) -> Tensor:
    """A NumPy result as a tensor, integers as int64 (tiletrain's one integer dtype)."""
    a = np.asarray(a)
    return from_numpy(_c(a.astype(np.int64) if a.dtype.kind in "iu" else a))


def _float_operands(*vals):
    """An int64/bool tensor meeting a float number or tensor: cast to the float dtype (torch's
    promotion: the float tensor's dtype, else the default dtype)."""
    floats = [v.dtype for v in vals if isinstance(v, Tensor) and is_float(v.dtype)]
    dt = floats[0] if floats else get_default_dtype()
    return tuple(convert(v, dt) if isinstance(v, Tensor) and not is_float(v.dtype) else v for v in vals)


def _no_zero_divisor(what: str, b) -> None:
    bad = (np.asarray(b) == 0).any()
    if bad:
        raise RuntimeError(f"{what}: ZeroDivisionError (integer division by zero)")


def floor_divide(input, other) -> Tensor:  # noqa: A002
    """input // other: floor(input / other); integers stay integers (torch's floor division)."""
    return div(input, other, rounding_mode="floor")


def _modulo(what: str, np_fn, rounding: str, input, other) -> Tensor:  # noqa: A002
    """input - round(input / other) * other; integers in NumPy (np_fn), refusing a zero divisor."""
    if _int_case(input, other):
        def fn(a, b):
            _no_zero_divisor(what, b)
            return np_fn(a, b)
        return _int_host(what, fn, input, other)
    a, b = _float_operands(input, other)
    return sub(a, mul(div(a, b, rounding_mode=rounding), b))


def remainder(input, other) -> Tensor:  # noqa: A002
    """input % other with the sign of other (Python's and torch's remainder)."""
    return _modulo("remainder", np.remainder, "floor", input, other)


def fmod(input, other) -> Tensor:  # noqa: A002
    """input - trunc(input / other) * other (C's fmod: the sign of input)."""
    return _modulo("fmod", np.fmod, "trunc", input, other)


def pow(input, exponent) -> Tensor:  # noqa: A001,A002
    """input ** exponent: tensor ** number, number ** tensor or tensor ** tensor (broadcast)."""
    if _nonfloat(input, exponent) and _int_case(input, exponent):
        def fn(a, b):
            if (np.asarray(b) < 0).any():
                raise ValueError("Integers to negative integer powers are not allowed.")
            return np.power(a, b)
        return _int_host("pow", fn, input, exponent)
    if _nonfloat(input, exponent):
        input, exponent = _float_operands(input, exponent)
    if isinstance(input, Tensor) and _is_number(exponent):
        e = float(exponent)
        x = _float_tensor(input, "pow", "input")
        if e == 1.0:
            return basic.copy(x)
        if e == 2.0:  # as torch: x * x (exact, and far cheaper than pow)
            return BINARY_OPS["mul"](x, x, alpha=1.0)
        if e == 0.5:
            return sqrt(x)
        if e == -1.0:
            return reciprocal(x)
        return _UNARY_OPS["pow_scalar"](x, e)
    if _is_number(input) and isinstance(exponent, Tensor):
        return _UNARY_OPS["rpow_scalar"](exponent, float(input))
    if isinstance(input, Tensor) and isinstance(exponent, Tensor):
        return BINARY_OPS["pow"](*_tensor_operands("pow", input, exponent, half=False))
    raise TypeError(f"pow: expected tensors or numbers, got {type(input).__name__} and "
                    f"{type(exponent).__name__}")


def atan2(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """The angle of the point (other, input) in (-pi, pi], element-wise (broadcasting; integer
    tensors compute in the default float dtype, as torch)."""
    for name, pos, v in (("input", 1, input), ("other", 2, other)):
        if not isinstance(v, Tensor):
            raise TypeError(f"atan2(): argument '{name}' (position {pos}) must be Tensor, not {type(v).__name__}")
    if not is_float(input.dtype) and not is_float(other.dtype):
        input, other = convert(input, get_default_dtype()), convert(other, get_default_dtype())
    return BINARY_OPS["atan2"](*_tensor_operands("atan2", input, other, half=False))


arctan2 = atan2


def add(input, other, *, alpha=1) -> Tensor:  # noqa: A002
    """input + alpha * other (broadcasting; other may be a number)."""
    if _nonfloat(input, other) and _int_case(input, other, alpha):
        return _int_host("add", lambda a, b: a + alpha * b if alpha != 1 else a + b, input, other)
    if _nonfloat(input, other):
        input, other = _float_operands(input, other)
    alpha = _scalar(alpha, "add", "alpha")
    if _is_number(other):
        return basic.add_scalar(_any_float_tensor(input, "add", "input"), alpha * float(other))
    if _is_number(input) and isinstance(other, Tensor):
        return basic.add_scalar(_any_float_tensor(other, "add", "other"), float(input), alpha=alpha)
    y = _add_trailing(input, other, alpha)
    if y is not None:
        return y
    a, b = _tensor_operands("add", input, other, half=True)
    return BINARY_OPS["add"](a, b, alpha=1.0, beta=alpha)


def _add_trailing(input, other, alpha: float):  # noqa: A002
    """input + alpha * other where one operand's shape is the other's trailing axes (a bias
    added to a batch: ``out + self.bias``): one add_bcast task per tile of the larger, where
    broadcasting in general first copies the smaller to the full shape (region copies) and
    then adds.  None where that is not the case (same float dtype, a true trailing match)."""
    if not (isinstance(input, Tensor) and isinstance(other, Tensor)) or input.dtype != other.dtype \
            or input.dtype not in (np.float32, np.float64) or input.ndim == other.ndim:
        return None
    big, small, a_big, a_small = (input, other, 1.0, alpha) if input.ndim > other.ndim else (other, input, alpha, 1.0)
    lead = big.ndim - small.ndim
    if small.ndim == 0 or tuple(big.shape[lead:]) != tuple(small.shape) or tuple(big.tiles[lead:]) != tuple(small.tiles):
        return None
    return basic.add_broadcast(big, small, tuple(range(lead)), alpha=a_big, beta=a_small)


def sub(input, other, *, alpha=1) -> Tensor:  # noqa: A002
    """input - alpha * other (broadcasting; either may be a number)."""
    if _nonfloat(input, other) and _int_case(input, other, alpha):
        if any(isinstance(v, Tensor) and v.dtype == np.bool_ for v in (input, other)):
            raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. If you are "
                               "trying to invert a mask, use the `~` or `logical_not()` operator instead.")
        return _int_host("sub", lambda a, b: a - alpha * b if alpha != 1 else a - b, input, other)
    if _nonfloat(input, other):
        input, other = _float_operands(input, other)
    alpha = _scalar(alpha, "sub", "alpha")
    if _is_number(input) and isinstance(other, Tensor):
        return basic.add_scalar(_any_float_tensor(other, "sub", "other"), float(input), alpha=-alpha)
    if _is_number(other):
        return add(input, -alpha * float(other))
    a, b = _tensor_operands("sub", input, other, half=True)
    return BINARY_OPS["sub"](a, b, alpha=1.0, beta=-alpha)


subtract = sub


def mul(input, other) -> Tensor:  # noqa: A002
    """input * other (broadcasting; either may be a number)."""
    if _nonfloat(input, other) and _int_case(input, other):
        return _int_host("mul", lambda a, b: a * b, input, other)
    if _nonfloat(input, other):
        input, other = _float_operands(input, other)
    if _is_number(other):
        return basic.scale(_any_float_tensor(input, "mul", "input"), float(other))
    if _is_number(input):
        return basic.scale(_any_float_tensor(other, "mul", "other"), float(input))
    a, b = _tensor_operands("mul", input, other, half=True)
    return BINARY_OPS["mul"](a, b, alpha=1.0)


multiply = mul


def div(input, other, *, rounding_mode=None) -> Tensor:  # noqa: A002
    """input / other (true division, broadcasting; either may be a number; x / 0 gives inf
    or nan as in IEEE arithmetic)."""
    if rounding_mode is not None:
        return _rounded_div(input, other, rounding_mode)
    input, other = _true_division_operands(input, other)
    if _is_number(other):
        return basic.div_scalar(_any_float_tensor(input, "div", "input"), float(other))
    if _is_number(input):
        return rdiv_scalar(float(input), _float_tensor(other, "div", "other"))
    a, b = _tensor_operands("div", input, other, half=False)
    return BINARY_OPS["div"](a, b, alpha=1.0)


divide = true_divide = div


def _rounded_div(input, other, rounding_mode: str) -> Tensor:  # noqa: A002
    """torch's div with rounding_mode "floor" or "trunc": integers stay integers (computed in
    NumPy); floats are floor/trunc of the true quotient (zero gradient, as torch)."""
    if rounding_mode not in ("floor", "trunc"):
        raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                         f"'{rounding_mode}'")
    if _int_case(input, other):
        def fn(a, b):
            _no_zero_divisor("div", b)
            if rounding_mode == "floor":
                return np.floor_divide(a, b)
            q = np.floor_divide(a, b)
            return q + ((np.remainder(a, b) != 0) & ((np.asarray(a) < 0) != (np.asarray(b) < 0)))
        return _int_host("div", fn, input, other)
    q = div(input, other)
    return floor(q) if rounding_mode == "floor" else trunc(q)


def _true_division_operands(input, other):  # noqa: A002
    """torch's true division of integer (int64, bool) tensors: a float result, the other
    operand's float dtype when it is a float tensor, the default dtype otherwise
    (``torch.arange(0, 8, 2) / 8`` is a float tensor)."""
    tensors = [t for t in (input, other) if isinstance(t, Tensor)]
    floats = [t.dtype for t in tensors if is_float(t.dtype)]
    if len(floats) == len(tensors):
        return input, other
    dt = floats[0] if floats else get_default_dtype()
    return tuple(convert(t, dt) if isinstance(t, Tensor) and not is_float(t.dtype) else t for t in (input, other))

# ---------------------------------------------------------------- comparisons, where, masks

_COMPARE = {"eq": 0, "ne": 1, "lt": 2, "le": 3, "gt": 4, "ge": 5}
_SWAPPED = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}


def _compare(name: str, input, other) -> Tensor:  # noqa: A002
    """A bool tensor: input <op> other, element-wise (broadcasting; either may be a number).
    NaN compares unequal to everything.  No gradient (as torch)."""
    if _is_number(input) and isinstance(other, Tensor):
        return _compare(_SWAPPED[name], other, input)
    x = _tensor(input, name, "input")
    if not is_float(x.dtype) or (isinstance(other, Tensor) and not is_float(other.dtype)):
        return _compare_host(name, x, other)
    if _is_number(other):
        y = Tensor(x.traits, np.bool_)
        run_map("compare_scalar", x, y, op=_COMPARE[name], s=float(other))
        return y
    a, b = _tensor_operands(name, x, other, half=False)
    y = Tensor(a.traits, np.bool_)
    run_map("compare", a, b, y, op=_COMPARE[name])
    return y


def _compare_host(name: str, x: Tensor, other) -> Tensor:
    """Comparisons with an int64 or bool operand: in NumPy (the operands are read; int64
    values are exact, which a float kernel would not keep beyond 2**53)."""
    if isinstance(other, Tensor):
        _tensor(other, name, "other")
    elif not _is_number(other):
        raise TypeError(f"{name}: other must be a tensor or a number, got {type(other).__name__}")
    b = other.numpy(force=True) if isinstance(other, Tensor) else other
    try:
        out = getattr(np, {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
                           "ge": "greater_equal"}[name])(x.numpy(force=True), b)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None
    return from_numpy(_c(out))


def _comparison(name: str) -> Callable:
    def op(input, other) -> Tensor:  # noqa: A002
        return _compare(name, input, other)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"input {name} other, element-wise, as a bool tensor (broadcasting; numbers allowed)."
    return op


eq, ne, lt, le, gt, ge = (_comparison(n) for n in _COMPARE)
greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne


def _bool_tensor(t, what: str, name: str) -> Tensor:
    _tensor(t, what, name)
    if t.dtype != np.bool_:
        raise TypeError(f"{what}: {name} must be a bool tensor, got dtype {t.dtype}")
    return t


_LOGICAL = {"logical_and": 0, "logical_or": 1, "logical_xor": 2}


def _logical(name: str) -> Callable:
    def op(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
        a, b = _bool_tensor(input, name, "input"), _bool_tensor(other, name, "other")
        a, b = align(name, a, b)
        y = Tensor(a.traits, np.bool_)
        run_map("logical", a, b, y, op=_LOGICAL[name])
        return y
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"{name.replace('_', ' ')} of two bool tensors, element-wise (broadcasting)."
    return op


logical_and, logical_or, logical_xor = (_logical(n) for n in _LOGICAL)


def logical_not(input: Tensor) -> Tensor:  # noqa: A002
    """not input, element-wise, for a bool tensor."""
    x = _bool_tensor(input, "logical_not", "input")
    y = Tensor(x.traits, np.bool_)
    run_map("logical_not", x, y)
    return y


def where(condition: Tensor, input=None, other=None) -> Tensor:  # noqa: A002
    """input where condition is true, else other (broadcasting all three; input or other may
    be a number).  The gradient flows to the chosen operand.  where(condition) alone is
    nonzero(condition, as_tuple=True), as torch's."""
    what = "where"
    if input is None and other is None:  # the indices where condition holds, one tensor per axis
        _tensor(condition, what, "condition")
        return tuple(from_numpy(_c(i.astype(np.int64))) for i in np.nonzero(np.atleast_1d(condition.numpy(force=True))))
    _bool_tensor(condition, what, "condition")
    ref = input if isinstance(input, Tensor) else other
    if not isinstance(ref, Tensor):
        return _where_numbers(condition, input, other)
    if _int_case(input, other) or (all(isinstance(v, Tensor) and v.dtype == np.bool_ for v in (input, other))):
        return _int_host(what, np.where, condition, input, other)  # integers (or bools) stay so, as torch's
    if any(isinstance(v, Tensor) and v.dtype in (np.int64, np.bool_) for v in (input, other)):
        input, other = _float_operands(input, other)  # an integer tensor meets a float: torch's promotion
        ref = input if isinstance(input, Tensor) else other
    _float_tensor(ref, what, "input" if ref is input else "other")
    if _is_number(input):
        input = basic.fill_(Tensor(ref.traits, ref.dtype), float(input))
    if _is_number(other):
        other = basic.fill_(Tensor(ref.traits, ref.dtype), float(other))
    _float_tensor(input, what, "input")
    _float_tensor(other, what, "other")
    a, b = _promote(what, input, other)
    c, a, b = align(what, condition, a, b)
    y = Tensor(a.traits, a.dtype)
    run_map("where", c, a, b, y)
    return record("where", y, (a, b), saved=(c,))


def _where_numbers(condition: Tensor, input, other) -> Tensor:  # noqa: A002
    """where(condition, a, b) of two numbers, as torch's: bool for two bools, int64 for two
    ints (on the host), else the default float dtype (a tensor of a filled where the
    condition holds, without a graph)."""
    for v in (input, other):
        if not isinstance(v, numbers.Number) or isinstance(v, complex):
            raise TypeError(f"where: expected a tensor or a real number for input and other, got {type(v).__name__}")
    if all(isinstance(v, (bool, np.bool_)) for v in (input, other)):
        return from_numpy(np.where(condition.numpy(force=True), bool(input), bool(other)))
    if all(isinstance(v, numbers.Integral) for v in (input, other)):
        return from_numpy(np.where(condition.numpy(force=True), int(input), int(other)).astype(np.int64))
    a = basic.fill_(Tensor(condition.traits, get_default_dtype()), float(input))
    return where(condition, a, float(other))


@backward_rule("where")
def _where_bwd(node, g):
    (c,) = node.saved
    da = db = None
    if node.inputs[0] is not None:
        da = Tensor(g.traits, g.dtype)
        run_map("masked_fill", g, c, da, value=0.0, invert=1)
    if node.inputs[1] is not None:
        db = Tensor(g.traits, g.dtype)
        run_map("masked_fill", g, c, db, value=0.0, invert=0)
    return da, db


def masked_fill(input: Tensor, mask: Tensor, value) -> Tensor:  # noqa: A002
    """input with ``value`` where mask is true (mask broadcasts to input's shape)."""
    what = "masked_fill"
    x = _float_tensor(input, what, "input")
    _bool_tensor(mask, what, "mask")
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ValueError(f"{what}: value must be a number or a 0-d tensor, got shape {value.shape}")
        value = value.item()
    value = _scalar(value, what, "value")
    if mask.shape != x.shape or mask.tiles != x.tiles:
        try:
            fits = np.broadcast_shapes(mask.shape, x.shape) == x.shape
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"{what}: mask of shape {mask.shape} does not broadcast to input's shape {x.shape}")
        mask = expand_to(mask, x.shape, x.tiles)
    y = Tensor(x.traits, x.dtype)
    run_map("masked_fill", x, mask, y, value=value, invert=0)
    return record("masked_fill", y, (x,), saved=(mask,))


@backward_rule("masked_fill")
def _masked_fill_bwd(node, g):
    (mask,) = node.saved
    dx = Tensor(g.traits, g.dtype)
    run_map("masked_fill", g, mask, dx, value=0.0, invert=0)
    return (dx,)


def _c(a) -> np.ndarray:
    """a as a C-contiguous array that keeps 0-d arrays 0-d (np.ascontiguousarray makes them 1-d)."""
    return np.array(a, order="C")


def convert(input: Tensor, dtype) -> Tensor:  # noqa: A002
    """Tensor.to(dtype) for any pair of dtypes: floats by astype (differentiable), bool to
    float by where, float to bool by ne(x, 0), the others (int64 to or from a float, to or
    from bool) through NumPy (torch's rules: truncation toward zero, nonzero is True)."""
    x = basic._tensor(input, "to", "input")
    dt = as_dtype(dtype)
    if dt == x.dtype:
        return x
    if is_float(dt) and is_float(x.dtype):
        return basic.astype(x, dt)
    if x.dtype == np.bool_ and is_float(dt):
        return where(x, basic.fill_(Tensor(x.traits, dt), 1.0), basic.fill_(Tensor(x.traits, dt), 0.0))
    if dt == np.bool_ and is_float(x.dtype):
        return ne(x, 0.0)
    a = x.numpy(force=True)
    with np.errstate(invalid="ignore"):
        b = (np.trunc(a.astype(np.float64)) if dt.kind in "iu" and a.dtype.kind == "f" else a).astype(dt)
    return from_numpy(_c(b), x.tiles if x.ndim else None)


for _row in UNARY:
    _unary_double(_row)


def _maximum_double(node, g, ismin: int):
    a, b = node.saved  # torch: the gradient goes to the larger (smaller) operand, split evenly on ties
    win = lt(a, b) if ismin else gt(a, b)
    half = mul(g, 0.5)
    tie = eq(a, b)
    da = where(win, g, where(tie, half, 0.0)) if node.inputs[0] is not None else None
    db = where(logical_or(win, tie), where(tie, half, 0.0), g) if node.inputs[1] is not None else None
    return da, db


double_backward_rule("maximum")(lambda node, g: _maximum_double(node, g, 0))
double_backward_rule("minimum")(lambda node, g: _maximum_double(node, g, 1))


@double_backward_rule("pow")
def _pow_double(node, g):
    a, b = node.saved  # c = a ** b: dc/da = b a^(b-1) (0 where b == 0), dc/db = c log(a) (0 where a == 0, b >= 0)
    da = db = None
    if node.inputs[0] is not None:
        da = where(eq(b, 0.0), 0.0, mul(g, mul(b, BINARY_OPS["pow"](a, sub(b, 1.0)))))
    if node.inputs[1] is not None:
        c = BINARY_OPS["pow"](a, b)
        db = where(logical_and(eq(a, 0.0), ge(b, 0.0)), 0.0, mul(g, mul(c, log(a))))
    return da, db


@double_backward_rule("atan2")
def _atan2_double(node, g):
    a, b = node.saved  # c = atan2(a, b): dc/da = b / (a^2 + b^2), dc/db = -a / (a^2 + b^2), 0 where that is 0/0
    s = add(mul(a, a), mul(b, b))
    r = where(eq(s, 0.0), 0.0, reciprocal(s))
    return (mul(mul(g, b), r) if node.inputs[0] is not None else None,
            mul(mul(g, neg(a)), r) if node.inputs[1] is not None else None)


@double_backward_rule("where")
def _where_double(node, g):
    (c,) = node.saved
    return (where(c, g, 0.0) if node.inputs[0] is not None else None,
            where(c, 0.0, g) if node.inputs[1] is not None else None)


@double_backward_rule("masked_fill")
def _masked_fill_double(node, g):
    (mask,) = node.saved
    return (masked_fill(g, mask, 0.0),)


__all__ = ["acos", "arccos", "arcsin", "arctan", "arctan2", "asin", "atan", "atan2", "digamma", "erfc", "erfinv", "i0",
           "lgamma",
           "floor_divide", "fmod", "remainder", "abs", "add", "ceil", "celu", "clamp", "elu", "erf", "expm1", "floor", "hardsigmoid", "hardswish", "hardtanh", "leaky_relu", "log1p",
           "relu6", "round", "selu", "softplus", "trunc", "clip", "cos", "div", "divide",
           "eq", "ge", "greater", "logical_and", "logical_not", "logical_or", "logical_xor", "greater_equal", "gt", "le", "less", "less_equal", "lt", "masked_fill", "ne",
           "not_equal", "where", "exp", "gelu", "log", "maximum", "minimum", "mul", "multiply", "neg", "negative", "pow", "reciprocal",
           "relu", "rsqrt", "sigmoid", "sign", "silu", "sin", "sqrt", "sub", "subtract", "tanh",
           "true_divide"]
