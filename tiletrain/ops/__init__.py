"""Tensor ops with autograd.  Element-wise ops come from one table (elementwise.py); the
torch-shaped functions (broadcasting, scalars, dtype promotion) are the public ones, and
basic.py holds the same-layout kernel ops they end in."""
from .autograd import backward, enable_grad, grad_enabled, no_grad
from .basic import (HALF_OPS, add_broadcast, add_scalar, astype, axpy_, broadcast, copy, fill_, matmul,
                    matmul_leading, max, rdiv_scalar, scale, sum)
from .shape import (broadcast_to, cat, chunk, expand, flatten, getitem, permute, reshape, retile, split, squeeze,
                    stack, t, transpose, unsqueeze, view)
from .elementwise import (abs, add, clamp, clip, cos, div, divide, exp, gelu, log, maximum, minimum, mul, multiply,
                          neg, negative, pow, reciprocal, relu, rsqrt, sigmoid, sign, silu, sin, sqrt, sub, subtract,
                          tanh, true_divide, eq, ne, lt, le, gt, ge, greater, greater_equal, less, less_equal,
                          not_equal, where, masked_fill, logical_and, logical_not, logical_or,
                          logical_xor)

__all__ = ["HALF_OPS", "abs", "add", "add_broadcast", "add_scalar", "astype", "axpy_", "backward", "broadcast", "clamp",
           "clip", "copy", "cos", "div", "divide", "enable_grad", "exp", "fill_", "gelu", "grad_enabled", "log",
           "matmul", "matmul_leading", "max", "maximum", "minimum", "mul", "multiply", "neg", "negative", "no_grad",
           "pow", "rdiv_scalar", "reciprocal", "relu", "rsqrt", "scale", "sigmoid", "sign", "silu", "sin", "sqrt",
           "sub", "subtract", "sum", "tanh", "true_divide", "broadcast_to", "cat", "chunk", "expand", "flatten",
           "getitem", "permute", "reshape", "retile", "split", "squeeze", "stack", "t", "transpose", "unsqueeze",
           "view", "eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less", "less_equal",
           "not_equal", "where", "masked_fill", "logical_and", "logical_not", "logical_or", "logical_xor"]
