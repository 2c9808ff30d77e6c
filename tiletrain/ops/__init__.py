from . import operators as _operators
from .autograd import backward, enable_grad, grad_enabled, no_grad
from .basic import (HALF_OPS, add, add_broadcast, add_scalar, astype, axpy_, broadcast, copy, div, fill_, matmul,
                    matmul_leading, mul, neg, rdiv_scalar, scale, sub)
from .reduce import (amax, amin, argmax, argmin, logsumexp, max, mean, min, norm, return_types, std, sum,  # noqa: A004
                     var)

_operators.install()

__all__ = ["HALF_OPS", "add", "add_broadcast", "add_scalar", "astype", "axpy_", "backward", "broadcast", "copy", "div", "enable_grad",
           "fill_", "grad_enabled", "matmul", "matmul_leading", "max", "mul", "neg", "no_grad", "rdiv_scalar",
           "scale", "sub", "sum",
           # reductions (tiletrain/ops/reduce.py)
           "amax", "amin", "argmax", "argmin", "logsumexp", "mean", "min", "norm", "return_types", "std", "var"]
