"""tiletrain.Tensor: the user-facing tensor.

The Tensor core (tiletrain/tensors/tensor.py: the C tensor and its tiles, geometry, data in
and out, autograd's fields) with torch's methods and operators, each calling the tiletrain op
of the same name.  It sits above the ops in the layer order (docs/architecture.md; the ops
make tensors with the core's class) and registers itself with the core when imported, so
that every tensor made from then on -- by the ops too -- is a tiletrain.Tensor."""
from __future__ import annotations

import numbers

import numpy as np

from .. import ops
from ..ops.softmax import log_softmax, softmax
from .cupy_interop import to_cupy
from .device import device as _device, parse_to
from .tensor import TensorBase, as_dtype, bfloat16, float16, set_tensor_class


def _operand(v) -> bool:
    """A tensor or a real number: what the operators take (others get NotImplemented)."""
    return isinstance(v, TensorBase) or (isinstance(v, numbers.Real) and not isinstance(v, bool))


class Tensor(TensorBase):
    """A tensor split into tiles; every tile is one StarPU data handle.

    Operations submit tile tasks and return at once; ``.numpy()`` waits for the tasks
    that write the tensor and gathers its tiles.  Methods and operators are torch's: each
    calls the tiletrain function of the same name (``x.exp()`` is ``tiletrain.exp(x)``)."""

    __slots__ = ()

    # -- operators ------------------------------------------------------------------------
    def __add__(self, other):
        return ops.add(self, other) if _operand(other) else NotImplemented

    def __radd__(self, other):
        return ops.add(other, self) if _operand(other) else NotImplemented

    def __sub__(self, other):
        return ops.sub(self, other) if _operand(other) else NotImplemented

    def __rsub__(self, other):
        return ops.sub(other, self) if _operand(other) else NotImplemented

    def __mul__(self, other):
        return ops.mul(self, other) if _operand(other) else NotImplemented

    def __rmul__(self, other):
        return ops.mul(other, self) if _operand(other) else NotImplemented

    def __truediv__(self, other):
        return ops.div(self, other) if _operand(other) else NotImplemented

    def __rtruediv__(self, other):
        return ops.div(other, self) if _operand(other) else NotImplemented

    def __pow__(self, other):
        return ops.pow(self, other) if _operand(other) else NotImplemented

    def __rpow__(self, other):
        return ops.pow(other, self) if _operand(other) else NotImplemented

    def __matmul__(self, other):
        return ops.matmul(self, other) if isinstance(other, TensorBase) else NotImplemented

    def __neg__(self):
        return ops.neg(self)

    def __abs__(self):
        return ops.abs(self)

    def __eq__(self, other):  # element-wise, as torch; hash stays identity
        return ops.eq(self, other) if _operand(other) else NotImplemented

    def __ne__(self, other):
        return ops.ne(self, other) if _operand(other) else NotImplemented

    def __lt__(self, other):
        return ops.lt(self, other) if _operand(other) else NotImplemented

    def __le__(self, other):
        return ops.le(self, other) if _operand(other) else NotImplemented

    def __gt__(self, other):
        return ops.gt(self, other) if _operand(other) else NotImplemented

    def __ge__(self, other):
        return ops.ge(self, other) if _operand(other) else NotImplemented

    __hash__ = TensorBase.__hash__

    def __and__(self, other):  # bool tensors
        return ops.logical_and(self, other) if isinstance(other, TensorBase) else NotImplemented

    def __or__(self, other):
        return ops.logical_or(self, other) if isinstance(other, TensorBase) else NotImplemented

    def __xor__(self, other):
        return ops.logical_xor(self, other) if isinstance(other, TensorBase) else NotImplemented

    def __invert__(self):
        return ops.logical_not(self)

    def __getitem__(self, index):
        return ops.index_get(self, index)

    def __setitem__(self, index, value):
        """x[index] = value (ints, slices, None, ..., a bool mask, an index list/tensor): the
        result is computed out of place and this tensor then holds it (tensors that shared its
        tiles before -- views, its base -- keep the old values)."""
        ops.assign_(self, ops.index_put(self, index, value))

    # -- autograd, dtype, copies ------------------------------------------------------------
    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Submit the backward pass from this tensor (no waiting).  A seed gradient of this
        shape but another tiling is retiled first.  ``retain_graph`` (default ``create_graph``)
        keeps the graph for another pass; ``create_graph``: ``.grad`` gets a graph (double
        backward, tiletrain.autograd); ``inputs`` (a tensor or a sequence of them, as torch):
        only their ``.grad`` accumulates, through the part of the graph that leads to them."""
        if (isinstance(gradient, TensorBase) and gradient.shape == self.shape and gradient.tiles != self.tiles
                and gradient.dtype == self.dtype):
            gradient = ops.retile(gradient, self.tiles)
        ops.backward(self, gradient, retain_graph=retain_graph, create_graph=create_graph, inputs=inputs)

    def astype(self, dtype):
        return ops.astype(self, dtype)

    def to(self, *args, **kwargs):
        """torch's Tensor.to(dtype), to(device, dtype=None), to(other): a cast to the dtype
        (the tensor itself when it has it already); the device is checked and kept (tiles
        live wherever StarPU's workers need them)."""
        dtype = parse_to("to", args, kwargs, self)
        return self if dtype is None or as_dtype(dtype) == self.dtype else ops.elementwise.convert(self, dtype)

    @property
    def device(self):
        """torch.device("cpu"): StarPU moves tiles to the worker (CPU or GPU) running each task."""
        return _device("cpu")

    @property
    def is_cuda(self) -> bool:
        return False

    def cpu(self):
        return self

    def contiguous(self, memory_format=None):
        """The tensor itself: tiles have no strides to make contiguous."""
        return self

    def type_as(self, other):
        return self.to(other.dtype)

    def long(self):
        return self.to(np.int64)

    def bool(self):
        return self.to(np.bool_)

    def zero_(self):
        ops.assign_(self, ops.zeros_like(self))
        return self

    def fill_(self, value):
        ops.assign_(self, ops.full_like(self, value))
        return self

    def copy_(self, src):
        ops.assign_(self, ops.index_put(self, Ellipsis, src))
        return self

    def float(self):
        return self.to(np.float32)

    def double(self):
        return self.to(np.float64)

    def half(self):
        return self.to(float16)

    def bfloat16(self):
        return self.to(bfloat16)

    def clone(self):
        return ops.copy(self)

    def to_cupy(self):
        """The tensor as a new cupy array on the GPU (tiles acquired on the GPU's memory node;
        needs cupy and a CUDA worker: tiletrain/tensors/cupy_interop.py)."""
        return to_cupy(self)

    def matmul(self, other):
        return ops.matmul(self, other)

    @property
    def T(self):
        return ops.permute(self, *reversed(range(self.ndim)))

    @property
    def mT(self):
        return ops.transpose(self, -2, -1)

    def expand_as(self, other):
        return ops.expand(self, *other.shape)

    def view_as(self, other):
        return ops.reshape(self, other.shape)

    reshape_as = view_as

    # -- torch's methods that pass every argument on to the tiletrain function of the same name
    # element-wise

    def add(self, *args, **kwargs):
        """tiletrain.add(self, ...)"""
        return ops.add(self, *args, **kwargs)

    def sub(self, *args, **kwargs):
        """tiletrain.sub(self, ...)"""
        return ops.sub(self, *args, **kwargs)

    def mul(self, *args, **kwargs):
        """tiletrain.mul(self, ...)"""
        return ops.mul(self, *args, **kwargs)

    def div(self, *args, **kwargs):
        """tiletrain.div(self, ...)"""
        return ops.div(self, *args, **kwargs)

    def pow(self, *args, **kwargs):
        """tiletrain.pow(self, ...)"""
        return ops.pow(self, *args, **kwargs)

    def maximum(self, *args, **kwargs):
        """tiletrain.maximum(self, ...)"""
        return ops.maximum(self, *args, **kwargs)

    def minimum(self, *args, **kwargs):
        """tiletrain.minimum(self, ...)"""
        return ops.minimum(self, *args, **kwargs)

    def neg(self, *args, **kwargs):
        """tiletrain.neg(self, ...)"""
        return ops.neg(self, *args, **kwargs)

    def abs(self, *args, **kwargs):
        """tiletrain.abs(self, ...)"""
        return ops.abs(self, *args, **kwargs)

    def exp(self, *args, **kwargs):
        """tiletrain.exp(self, ...)"""
        return ops.exp(self, *args, **kwargs)

    def log(self, *args, **kwargs):
        """tiletrain.log(self, ...)"""
        return ops.log(self, *args, **kwargs)

    def sqrt(self, *args, **kwargs):
        """tiletrain.sqrt(self, ...)"""
        return ops.sqrt(self, *args, **kwargs)

    def rsqrt(self, *args, **kwargs):
        """tiletrain.rsqrt(self, ...)"""
        return ops.rsqrt(self, *args, **kwargs)

    def sign(self, *args, **kwargs):
        """tiletrain.sign(self, ...)"""
        return ops.sign(self, *args, **kwargs)

    def sin(self, *args, **kwargs):
        """tiletrain.sin(self, ...)"""
        return ops.sin(self, *args, **kwargs)

    def cos(self, *args, **kwargs):
        """tiletrain.cos(self, ...)"""
        return ops.cos(self, *args, **kwargs)

    def tanh(self, *args, **kwargs):
        """tiletrain.tanh(self, ...)"""
        return ops.tanh(self, *args, **kwargs)

    def sigmoid(self, *args, **kwargs):
        """tiletrain.sigmoid(self, ...)"""
        return ops.sigmoid(self, *args, **kwargs)

    def relu(self, *args, **kwargs):
        """tiletrain.relu(self, ...)"""
        return ops.relu(self, *args, **kwargs)

    def reciprocal(self, *args, **kwargs):
        """tiletrain.reciprocal(self, ...)"""
        return ops.reciprocal(self, *args, **kwargs)

    def clamp(self, *args, **kwargs):
        """tiletrain.clamp(self, ...)"""
        return ops.clamp(self, *args, **kwargs)

    def clip(self, *args, **kwargs):
        """tiletrain.clip(self, ...)"""
        return ops.clip(self, *args, **kwargs)

    def eq(self, *args, **kwargs):
        """tiletrain.eq(self, ...)"""
        return ops.eq(self, *args, **kwargs)

    def ne(self, *args, **kwargs):
        """tiletrain.ne(self, ...)"""
        return ops.ne(self, *args, **kwargs)

    def lt(self, *args, **kwargs):
        """tiletrain.lt(self, ...)"""
        return ops.lt(self, *args, **kwargs)

    def le(self, *args, **kwargs):
        """tiletrain.le(self, ...)"""
        return ops.le(self, *args, **kwargs)

    def gt(self, *args, **kwargs):
        """tiletrain.gt(self, ...)"""
        return ops.gt(self, *args, **kwargs)

    def ge(self, *args, **kwargs):
        """tiletrain.ge(self, ...)"""
        return ops.ge(self, *args, **kwargs)

    def where(self, *args, **kwargs):
        """tiletrain.where(self, ...)"""
        return ops.where(self, *args, **kwargs)

    def masked_fill(self, *args, **kwargs):
        """tiletrain.masked_fill(self, ...)"""
        return ops.masked_fill(self, *args, **kwargs)

    def masked_fill_(self, mask, value):
        ops.assign_(self, ops.masked_fill(self, mask, value))
        return self

    def tril(self, diagonal=0):
        return ops.tril(self, diagonal)

    def triu(self, diagonal=0):
        return ops.triu(self, diagonal)

    def outer(self, vec2):
        return ops.outer(self, vec2)

    def topk(self, *args, **kwargs):
        return ops.topk(self, *args, **kwargs)

    def multinomial(self, *args, **kwargs):
        return ops.multinomial(self, *args, **kwargs)

    # reductions
    def sum(self, *args, **kwargs):
        """tiletrain.sum(self, ...)"""
        return ops.sum(self, *args, **kwargs)

    def mean(self, *args, **kwargs):
        """tiletrain.mean(self, ...)"""
        return ops.mean(self, *args, **kwargs)

    def var(self, *args, **kwargs):
        """tiletrain.var(self, ...)"""
        return ops.var(self, *args, **kwargs)

    def std(self, *args, **kwargs):
        """tiletrain.std(self, ...)"""
        return ops.std(self, *args, **kwargs)

    def amax(self, *args, **kwargs):
        """tiletrain.amax(self, ...)"""
        return ops.amax(self, *args, **kwargs)

    def amin(self, *args, **kwargs):
        """tiletrain.amin(self, ...)"""
        return ops.amin(self, *args, **kwargs)

    def max(self, *args, **kwargs):
        """tiletrain.max(self, ...)"""
        return ops.max(self, *args, **kwargs)

    def min(self, *args, **kwargs):
        """tiletrain.min(self, ...)"""
        return ops.min(self, *args, **kwargs)

    def argmax(self, *args, **kwargs):
        """tiletrain.argmax(self, ...)"""
        return ops.argmax(self, *args, **kwargs)

    def argmin(self, *args, **kwargs):
        """tiletrain.argmin(self, ...)"""
        return ops.argmin(self, *args, **kwargs)

    def logsumexp(self, *args, **kwargs):
        """tiletrain.logsumexp(self, ...)"""
        return ops.logsumexp(self, *args, **kwargs)

    def norm(self, *args, **kwargs):
        """tiletrain.norm(self, ...)"""
        return ops.reduce.norm(self, *args, **kwargs)  # (ops.norm is the norm-layer module)

    # softmax
    def softmax(self, *args, **kwargs):
        """tiletrain.softmax(self, ...)"""
        return softmax(self, *args, **kwargs)

    def log_softmax(self, *args, **kwargs):
        """tiletrain.log_softmax(self, ...)"""
        return log_softmax(self, *args, **kwargs)

    # shape
    # index and scatter ops (tiletrain/ops/index.py)
    def index_select(self, *args, **kwargs):
        return ops.index_select(self, *args, **kwargs)

    def gather(self, *args, **kwargs):
        return ops.gather(self, *args, **kwargs)

    def scatter(self, *args, **kwargs):
        return ops.scatter(self, *args, **kwargs)

    def scatter_add(self, *args, **kwargs):
        return ops.scatter_add(self, *args, **kwargs)

    def index_add(self, *args, **kwargs):
        return ops.index_add(self, *args, **kwargs)

    def scatter_reduce(self, *args, **kwargs):
        return ops.scatter_reduce(self, *args, **kwargs)

    def to_sparse_csr(self, *args, **kwargs):
        return ops.sparse.to_sparse_csr(self, *args, **kwargs)

    def to_dense(self):
        return self

    def reshape(self, *args, **kwargs):
        """tiletrain.reshape(self, ...)"""
        return ops.reshape(self, *args, **kwargs)

    def view(self, *args, **kwargs):
        """tiletrain.view(self, ...)"""
        return ops.view(self, *args, **kwargs)

    def flatten(self, *args, **kwargs):
        """tiletrain.flatten(self, ...)"""
        return ops.flatten(self, *args, **kwargs)

    def unsqueeze(self, *args, **kwargs):
        """tiletrain.unsqueeze(self, ...)"""
        return ops.unsqueeze(self, *args, **kwargs)

    def squeeze(self, *args, **kwargs):
        """tiletrain.squeeze(self, ...)"""
        return ops.squeeze(self, *args, **kwargs)

    def permute(self, *args, **kwargs):
        """tiletrain.permute(self, ...)"""
        return ops.permute(self, *args, **kwargs)

    def transpose(self, *args, **kwargs):
        """tiletrain.transpose(self, ...)"""
        return ops.transpose(self, *args, **kwargs)

    def t(self, *args, **kwargs):
        """tiletrain.t(self, ...)"""
        return ops.t(self, *args, **kwargs)

    def expand(self, *args, **kwargs):
        """tiletrain.expand(self, ...)"""
        return ops.expand(self, *args, **kwargs)

    def split(self, *args, **kwargs):
        """tiletrain.split(self, ...)"""
        return ops.split(self, *args, **kwargs)

    def chunk(self, *args, **kwargs):
        """tiletrain.chunk(self, ...)"""
        return ops.chunk(self, *args, **kwargs)


set_tensor_class(Tensor)

__all__ = ["Tensor"]
