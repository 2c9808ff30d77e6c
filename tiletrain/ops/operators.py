"""Python operators on Tensor (+ - * / @ and unary -), bound here so that tensor/ does not
import ops/ (imports point one way: ops -> tensor)."""
from __future__ import annotations

import numbers

from ..tensors import Tensor
from . import autograd, basic


def _is_scalar(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _add(self, other):
    if isinstance(other, Tensor):
        return basic.add(self, other)
    if _is_scalar(other):
        return basic.add_scalar(self, other)
    return NotImplemented


def _sub(self, other):
    if isinstance(other, Tensor):
        return basic.sub(self, other)
    if _is_scalar(other):
        return basic.add_scalar(self, -float(other))
    return NotImplemented


def _rsub(self, other):
    if _is_scalar(other):
        return basic.add_scalar(self, other, alpha=-1.0)
    return NotImplemented


def _mul(self, other):
    if isinstance(other, Tensor):
        return basic.mul(self, other)
    if _is_scalar(other):
        return basic.scale(self, other)
    return NotImplemented


def _truediv(self, other):
    if isinstance(other, Tensor):
        return basic.div(self, other)
    if _is_scalar(other):
        return basic.scale(self, 1.0 / float(other))
    return NotImplemented


def _rtruediv(self, other):
    if _is_scalar(other):
        return basic.rdiv_scalar(other, self)
    return NotImplemented


def _matmul(self, other):
    if isinstance(other, Tensor):
        return basic.matmul(self, other)
    return NotImplemented


def install() -> None:
    Tensor.__add__ = _add
    Tensor.__radd__ = _add
    Tensor.__sub__ = _sub
    Tensor.__rsub__ = _rsub
    Tensor.__mul__ = _mul
    Tensor.__rmul__ = _mul
    Tensor.__truediv__ = _truediv
    Tensor.__rtruediv__ = _rtruediv
    Tensor.__matmul__ = _matmul
    Tensor.__neg__ = basic.neg
    Tensor.astype = basic.astype
    Tensor.backward = autograd.backward
