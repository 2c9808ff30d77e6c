"""Tensor ops with autograd.  Element-wise ops come from one table (elementwise.py), shape
ops from one region-copy expander (shape.py), reductions from span expanders (reduce.py);
the torch-shaped functions (broadcasting, scalars, dtype promotion, any tiling) are the
public ones, and basic.py holds the same-layout kernel ops they end in."""
from . import elementwise, reduce, shape
from .autograd import backward, enable_grad, grad_enabled, no_grad
from .basic import (HALF_OPS, add_broadcast, add_scalar, astype, axpy_, broadcast, copy, fill_, matmul,
                    matmul_leading, rdiv_scalar, scale)
from .elementwise import *  # noqa: F401,F403
from .reduce import *  # noqa: F401,F403
from .shape import *  # noqa: F401,F403

__all__ = (["HALF_OPS", "add_broadcast", "add_scalar", "astype", "axpy_", "backward", "broadcast", "copy",
            "enable_grad", "fill_", "grad_enabled", "matmul", "matmul_leading", "no_grad", "rdiv_scalar", "scale"]
           + elementwise.__all__ + reduce.__all__ + shape.__all__)
