"""torch's gamma family and Bessel functions over the element-wise table's kernels
(csrc/kernels.def: lgamma, polygamma, bessel_i, erfcx, bessel_jy, igamma, zeta; their formulas
in csrc/kernels/opencl/tt_special.h): the functions whose torch signature is not the table's
``op(input, *params)`` -- polygamma(n, input), mvlgamma(input, p), igamma/igammac(input, other),
zeta(input, other) with a number on either side -- and the torch.special-only names.
lgamma, digamma and i0 are the table's ops themselves (tiletrain.ops.elementwise).

Gradients are torch's: lgamma' = digamma, polygamma(n)' = polygamma(n + 1), i0' = i1, i0e, i1,
i1e and erfcx by torch's formulas, mvlgamma through its lgammas; igamma/igammac and zeta have a
gradient in their second argument only (NotImplementedError for the first, at backward, as
torch), and bessel_j0/j1/y0/y1 none (their results do not require grad, as torch's)."""
from __future__ import annotations

import math
import numbers

from ..tensors import Tensor, is_float
from ..tensors.tensor import get_default_dtype
from .creation import full_like
from .elementwise import _UNARY_OPS, BINARY_OPS, _tensor_operands, add, convert, lgamma
from .elementwise import digamma, erfcx, i0, i0e, i1, i1e  # noqa: F401  (torch.special's names, re-exported)

__all__ = ["igamma", "igammac", "mvlgamma", "polygamma"]  # (lgamma, digamma, i0: elementwise.__all__)

bessel_j0, bessel_j1 = _UNARY_OPS["bessel_j0"], _UNARY_OPS["bessel_j1"]
bessel_y0, bessel_y1 = _UNARY_OPS["bessel_y0"], _UNARY_OPS["bessel_y1"]


def polygamma(n: int, input: Tensor) -> Tensor:  # noqa: A002 - torch's names
    """The n-th derivative of digamma (n = 0: digamma, 1: trigamma, torch's series; from 2 on
    (-1)^(n+1) n! zeta(n + 1, input))."""
    return _UNARY_OPS["polygamma"](input, n)


def mvlgamma(input: Tensor, p: int) -> Tensor:  # noqa: A002
    """The multivariate log-gamma function of dimension p: sum_{j<p} lgamma(input - j/2) +
    p (p - 1) / 4 log(pi), element-wise, as torch's (which no longer checks input > (p - 1)/2:
    below, the lgammas' values, +inf at their poles)."""
    if isinstance(p, bool) or not isinstance(p, numbers.Integral):
        raise TypeError(f"mvlgamma(): argument 'p' (position 2) must be int, not {type(p).__name__}")
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    if not isinstance(input, Tensor):
        raise TypeError(f"mvlgamma(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}")
    x = input if is_float(input.dtype) else convert(input, get_default_dtype())
    total = None
    for j in range(p - 1, -1, -1):  # torch's order: input - (p-1)/2, ..., input - 1/2, input
        t = lgamma(add(x, -0.5 * j) if j else x)
        total = t if total is None else add(total, t)
    return add(total, p * (p - 1) * math.log(math.pi) / 4)


multigammaln = mvlgamma


def _igamma(name: str, input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    for arg, pos, v in (("input", 1, input), ("other", 2, other)):
        if not isinstance(v, Tensor):
            raise TypeError(f"{name}(): argument '{arg}' (position {pos}) must be Tensor, not {type(v).__name__}")
    if not is_float(input.dtype) and not is_float(other.dtype):
        raise NotImplementedError(f"\"{name}_cpu\" not implemented for 'Long'")
    a, x = _tensor_operands(name, input, other, half=False)
    return BINARY_OPS[name](a, x, upper=int(name == "igammac"))


def igamma(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """The regularised lower incomplete gamma function P(input, other) (broadcasting); its
    gradient in other only."""
    return _igamma("igamma", input, other)


def igammac(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """The regularised upper incomplete gamma function Q(input, other) = 1 - P (broadcasting);
    its gradient in other only."""
    return _igamma("igammac", input, other)


gammainc, gammaincc = igamma, igammac


def zeta(input, other) -> Tensor:  # noqa: A002
    """The Hurwitz zeta function sum_k (other + k) ** -input (broadcasting; a number on either
    side; integer tensors compute in the default float dtype); its gradient in other only."""
    is_number = [isinstance(v, numbers.Real) and not isinstance(v, bool) for v in (input, other)]
    tensors = [isinstance(v, Tensor) for v in (input, other)]
    if not (all(tensors) or (any(tensors) and any(is_number))):
        raise TypeError(f"zeta(): expected (Tensor, Tensor), (Number, Tensor) or (Tensor, Number), got "
                        f"({type(input).__name__}, {type(other).__name__})")
    ins = [v if not isinstance(v, Tensor) or is_float(v.dtype) else convert(v, get_default_dtype())
           for v in (input, other)]
    like = ins[0] if isinstance(ins[0], Tensor) else ins[1]
    s, q = (v if isinstance(v, Tensor) else full_like(like, float(v)) for v in ins)  # a number: like's layout
    return BINARY_OPS["zeta"](*_tensor_operands("zeta", s, q, half=False))
