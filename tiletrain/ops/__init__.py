from . import operators as _operators
from .autograd import backward, enable_grad, grad_enabled, no_grad
from .basic import (HALF_OPS, add, add_broadcast, add_scalar, astype, axpy_, broadcast, copy, div, fill_, matmul,
                    matmul_leading, max, mul, neg, rdiv_scalar, scale, sub, sum)

_operators.install()

__all__ = ["HALF_OPS", "add", "add_broadcast", "add_scalar", "astype", "axpy_", "backward", "broadcast", "copy", "div", "enable_grad",
           "fill_", "grad_enabled", "matmul", "matmul_leading", "max", "mul", "neg", "no_grad", "rdiv_scalar",
           "scale", "sub", "sum"]
