from . import operators as _operators
from .basic import (add, add_broadcast, add_scalar, copy, div, fill_, matmul, max, mul, neg, rdiv_scalar,
                    scale, sub, sum)

_operators.install()

__all__ = ["add", "add_broadcast", "add_scalar", "copy", "div", "fill_", "matmul", "max", "mul", "neg",
           "rdiv_scalar", "scale", "sub", "sum"]
