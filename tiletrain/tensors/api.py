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
from ..ops.autograd import rename
from ..ops.creation import (bernoulli_values, exponential_values, full, full_like, normal_values, ones, rand, randint, randn,
                            uniform_values, zeros, zeros_like)
from ..ops.softmax import log_softmax, softmax
from .cupy_interop import to_cupy
from .device import device as _device, parse_to
from .tensor import TensorBase, as_dtype, bfloat16, float16, set_tensor_class


_NUMPY_REQUIRES_GRAD = "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead."


def _operand(v) -> bool:
    """A tensor or a real number: what the operators take (others get NotImplemented)."""
    return isinstance(v, TensorBase) or (isinstance(v, numbers.Real) and not isinstance(v, bool))


def _needs_graph(x, operands) -> bool:
    return ops.grad_enabled() and (x.requires_grad or any(isinstance(o, TensorBase) and o.requires_grad
                                                          for o in operands))


def _inplace(x, fn, *operands):
    """x takes the value fn(x, *operands).  Outside the autograd graph the result is written
    into x's own tiles (views of x see it).  In the graph, x becomes the result's tensor (its
    node included) and the graph keeps x's old value under a tensor of its own: the recorded
    ops that read x before (and x's own node, whose rule may read its output) name that one
    instead, so their backward uses the value they read (outside the graph, they get a copy of
    it when x is written).  A leaf that requires grad is refused, as torch refuses it."""
    refs = getattr(x, "_read", None) or ()
    readers = [n for n in (ref() for ref in refs) if n is not None and not n.released]
    if not _needs_graph(x, operands):
        if readers:
            with ops.no_grad():
                kept = x.detach().clone()
            for node in readers:
                rename(node, x, kept)
        return ops.assign_(x, fn(x, *operands))
    if x.requires_grad and x._node is None:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
    old = x._hand_over()
    try:
        r = fn(old, *operands)
        if tuple(r.shape) != tuple(old.shape):
            raise RuntimeError(f"output with shape {list(old.shape)} doesn't match the broadcast shape {list(r.shape)}")
        if r.dtype != old.dtype:
            r = ops.elementwise.convert(r, old.dtype)
        if r.tiles != old.tiles:
            r = ops.retile(r, old.tiles)
    except BaseException:
        x._take(old)
        raise
    for node in readers + ([old._node] if old._node is not None else []):
        rename(node, x, old)   # (fn's own node read old already)
    node = r._node
    x._take(r)
    if node is not None:  # the node's references to its output now name x
        rename(node, r, x)
    return x


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
        """x[index] = value (ints, slices, None, ..., a bool mask, an index list/tensor), by the
        in-place rules of ``_inplace`` (in the autograd graph too, as torch: the gradient flows to
        value and to the elements of x not assigned)."""
        operands = (value,) if isinstance(value, TensorBase) else ()
        _inplace(self, lambda a, *_: ops.index_put(a, index, value), *operands)


    # -- in place (torch's trailing underscore; x += y and the other augmented assignments) -----
    def add_(self, other, *, alpha=1):
        return _inplace(self, lambda a, b: ops.add(a, b, alpha=alpha), other)

    def sub_(self, other, *, alpha=1):
        return _inplace(self, lambda a, b: ops.sub(a, b, alpha=alpha), other)

    def mul_(self, other):
        return _inplace(self, ops.mul, other)

    def div_(self, other, *, rounding_mode=None):
        return _inplace(self, lambda a, b: ops.div(a, b, rounding_mode=rounding_mode), other)

    def pow_(self, exponent):
        return _inplace(self, ops.pow, exponent)

    def clamp_(self, min=None, max=None):  # noqa: A002
        return _inplace(self, lambda a: ops.clamp(a, min, max))

    clip_ = clamp_

    def clamp_min(self, min):  # noqa: A002
        return ops.clamp(self, min=min)

    def clamp_max(self, max):  # noqa: A002
        return ops.clamp(self, max=max)

    def clamp_min_(self, min):  # noqa: A002
        return _inplace(self, lambda a: ops.clamp(a, min=min))

    def clamp_max_(self, max):  # noqa: A002
        return _inplace(self, lambda a: ops.clamp(a, max=max))

    def lerp_(self, end, weight):
        return _inplace(self, lambda a, b: a.lerp(b, weight), end)

    def addcmul_(self, tensor1, tensor2, *, value=1):
        return _inplace(self, lambda a, b, c: ops.add(a, ops.mul(b, c), alpha=value), tensor1, tensor2)

    def addcdiv_(self, tensor1, tensor2, *, value=1):
        return _inplace(self, lambda a, b, c: ops.add(a, ops.div(b, c), alpha=value), tensor1, tensor2)

    def normal_(self, mean=0.0, std=1.0, *, generator=None):
        return _inplace(self, lambda a: normal_values(a, mean, std, generator))

    def uniform_(self, a=0.0, b=1.0, *, generator=None):  # torch names them from, to
        return _inplace(self, lambda x: uniform_values(x, a, b, generator))

    def random_(self, from_=None, to=None, *, generator=None):
        """torch's random_(to) and random_(from, to): integers in [0, to) or [from, to)."""
        if from_ is None:
            raise NotImplementedError("random_() without a range is not supported: give random_(to) or random_(from, to)")
        lo, hi = (0, from_) if to is None else (from_, to)
        return _inplace(self, lambda x: randint(lo, hi, x.shape, generator=generator, dtype=x.dtype, tiles=x.tiles))

    def exponential_(self, lambd=1.0, *, generator=None):
        return _inplace(self, lambda x: exponential_values(x, lambd, generator))

    def bernoulli_(self, p=0.5, *, generator=None):
        return _inplace(self, lambda x: bernoulli_values(x, p, generator))

    def __iadd__(self, other):
        return _inplace(self, ops.add, other) if _operand(other) else NotImplemented

    def __isub__(self, other):
        return _inplace(self, ops.sub, other) if _operand(other) else NotImplemented

    def __imul__(self, other):
        return _inplace(self, ops.mul, other) if _operand(other) else NotImplemented

    def __itruediv__(self, other):
        return _inplace(self, ops.div, other) if _operand(other) else NotImplemented

    def __ipow__(self, other):
        return _inplace(self, ops.pow, other) if _operand(other) else NotImplemented

    def __ifloordiv__(self, other):
        return _inplace(self, ops.floor_divide, other) if _operand(other) else NotImplemented

    def __imod__(self, other):
        return _inplace(self, ops.remainder, other) if _operand(other) else NotImplemented

    def __floordiv__(self, other):
        return ops.floor_divide(self, other) if _operand(other) else NotImplemented

    def __rfloordiv__(self, other):
        return ops.floor_divide(other, self) if _operand(other) else NotImplemented

    def __mod__(self, other):
        return ops.remainder(self, other) if _operand(other) else NotImplemented

    def __rmod__(self, other):
        return ops.remainder(other, self) if _operand(other) else NotImplemented

    def retain_grad(self):
        """This tensor (an op's output) gets its .grad in the next backward passes (a leaf has
        it already)."""
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self._node is not None:
            from ..ops.autograd import retain_grad
            retain_grad(self)

    def register_hook(self, hook):
        raise NotImplementedError("Tensor.register_hook is not supported: tiletrain's backward runs as tile tasks; "
                                  "use tiletrain.autograd.grad to read or change a gradient")

    def __format__(self, spec):
        """A 0-d tensor formats as its value (f"{loss:.4f}"), as torch's."""
        if self.ndim == 0:
            return self.item().__format__(spec)
        return object.__format__(self, spec)

    def __pos__(self):
        return self

    def __index__(self):
        if self.numel() != 1 or self.dtype not in (np.int64, np.bool_):
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __int__(self):
        return int(self.item())

    def __deepcopy__(self, memo):
        """A copy with tiles of its own (copy.deepcopy of a module copies its parameters);
        the class (Parameter) and requires_grad are kept, as torch's."""
        if self._node is not None:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                               "protocol at the moment.")
        with ops.no_grad():
            c = ops.copy(self)
        new = type(self).__new__(type(self))
        new._take(c)
        new.requires_grad = self.requires_grad
        memo[id(self)] = new
        if self.grad is not None:
            import copy
            new.grad = copy.deepcopy(self.grad, memo)
        for k, v in getattr(self, "__dict__", {}).items():  # subclasses' own attributes
            setattr(new, k, v)
        return new

    @property
    def data(self):
        """The same tiles, cut from the autograd graph (torch's ``.data``); assigning
        ``x.data = t`` writes t's values into x (same shape)."""
        return self.detach()

    @data.setter
    def data(self, value):
        if not isinstance(value, TensorBase):
            raise TypeError(f"data must be a Tensor, got {type(value).__name__}")
        if value._ptr == self._ptr:  # x.data op= y: already written into x's tiles
            return
        if tuple(value.shape) != tuple(self.shape):
            raise NotImplementedError(f".data = tensor of another shape ({tuple(value.shape)} for "
                                      f"{tuple(self.shape)}) is not supported")
        with ops.no_grad():
            ops.assign_(self, value)

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

    def numpy(self, *, force: bool = False, out: np.ndarray | None = None) -> np.ndarray:
        """torch's Tensor.numpy(): the values as a new C-contiguous NumPy array (waits for the
        tasks writing them; collective under MPI).  As torch, a tensor that requires grad is
        refused while grad mode is on, unless ``force=True``.  ``out``: an array of this shape
        and dtype (C-contiguous, writable) to read into instead of a new one."""
        if not force and self.requires_grad and ops.grad_enabled():
            raise RuntimeError(_NUMPY_REQUIRES_GRAD)
        return self._to_numpy(out)

    def __array__(self, dtype=None, copy=None):
        """np.asarray(t): the values as numpy() gives them (refused as numpy() refuses)."""
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

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
        return _inplace(self, zeros_like)

    def fill_(self, value):
        return _inplace(self, lambda a: full_like(a, value))

    def copy_(self, src):
        return _inplace(self, lambda a, s: ops.index_put(a, Ellipsis, s), src)

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
        return _inplace(self, lambda a: ops.masked_fill(a, mask, value))

    def tril(self, diagonal=0):
        return ops.tril(self, diagonal)

    def triu(self, diagonal=0):
        return ops.triu(self, diagonal)

    def outer(self, vec2):
        return ops.outer(self, vec2)

    def matrix_exp(self):
        return ops.matrix_exp(self)

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

    def scatter_(self, dim, index, src=None, *, value=None, reduce=None):
        """In place; a number as ``src`` is the value (x.scatter_(1, idx, 1.0), as torch)."""
        if src is not None and not isinstance(src, Tensor):
            src, value = None, src
        return _inplace(self, lambda a: ops.scatter(a, dim, index, src, value=value, reduce=reduce))

    def scatter_add(self, *args, **kwargs):
        return ops.scatter_add(self, *args, **kwargs)

    def scatter_add_(self, dim, index, src):
        return _inplace(self, lambda a: ops.scatter_add(a, dim, index, src))

    def repeat_interleave(self, repeats, dim=None, *, output_size=None):
        return ops.repeat_interleave(self, repeats, dim, output_size=output_size)

    def unfold(self, dimension, size, step):
        return ops.unfold(self, dimension, size, step)

    def cumprod(self, dim, *, dtype=None):
        return ops.cumprod(self, dim, dtype=dtype)

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


    # -- more of torch's methods (tiletrain/ops/composite.py and the element-wise table) ------
    def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
        from ..tensors import tensor
        return tensor(data, dtype=self.dtype if dtype is None else dtype, requires_grad=requires_grad)

    def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False):
        return full(tuple(size), fill_value, dtype=self.dtype if dtype is None else dtype,
                        requires_grad=requires_grad)

    def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
        size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
        return zeros(*size, dtype=self.dtype if dtype is None else dtype, requires_grad=requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
        size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
        return ones(*size, dtype=self.dtype if dtype is None else dtype, requires_grad=requires_grad)

    new_empty = new_zeros

    def type(self, dtype=None, non_blocking=False, **kwargs):
        """Without dtype: torch's type string ('torch.FloatTensor' ...); with one: a cast."""
        if dtype is None:
            names = {np.dtype(np.float32): "Float", np.dtype(np.float64): "Double", np.dtype(np.int64): "Long",
                     np.dtype(np.bool_): "Bool"}
            return f"torch.{names.get(np.dtype(self.dtype), 'Half' if self.dtype == float16 else 'BFloat16')}Tensor"
        return self.to(dtype)

    def int(self):
        """int64 (tiletrain's one integer dtype; torch's int() gives int32)."""
        return self.to(np.int64)

    def is_floating_point(self) -> bool:
        return np.dtype(self.dtype).kind == "f" or self.dtype in (float16, bfloat16)

    def element_size(self) -> int:
        return 2 if self.dtype in (float16, bfloat16) else np.dtype(self.dtype).itemsize

    def nelement(self) -> int:
        return self.numel()

    def ndimension(self) -> int:
        return self.ndim

    def is_contiguous(self, memory_format=None) -> bool:
        return True

    def stride(self, dim=None):
        """The strides of a C-contiguous tensor of this shape (what .numpy() gives)."""
        st, acc = [], 1
        for n in reversed(self.shape):
            st.append(acc)
            acc *= n
        st = tuple(reversed(st))
        return st if dim is None else st[dim]

    def equal(self, other) -> bool:
        return ops.equal(self, other)

    def allclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
        return ops.allclose(self, other, rtol, atol, equal_nan)

    def isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
        return ops.isclose(self, other, rtol, atol, equal_nan)

    def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
        return ops.nan_to_num(self, nan, posinf, neginf)

    def nan_to_num_(self, nan=0.0, posinf=None, neginf=None):
        return _inplace(self, lambda a: ops.nan_to_num(a, nan, posinf, neginf))

    def index_put(self, indices, values, accumulate=False):
        return ops.index_put(self, indices, values, accumulate)

    def index_put_(self, indices, values, accumulate=False):
        operands = (values,) if isinstance(values, TensorBase) else ()
        return _inplace(self, lambda a, *_: ops.index_put(a, indices, values, accumulate), *operands)

    def index_fill(self, dim, index, value):
        return ops.index_fill(self, dim, index, value)

    def index_fill_(self, dim, index, value):
        return _inplace(self, lambda a: ops.index_fill(a, dim, index, value))

    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        return ops.addmm(self, mat1, mat2, beta=beta, alpha=alpha)

    def diag(self, diagonal=0):
        return ops.diag(self, diagonal)

    def trace(self):
        """The sum of the main diagonal of a 2-d tensor (torch.trace; tiletrain.trace, the
        task-trace package, is also callable as it)."""
        if self.ndim != 2:
            raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {self.ndim}")
        return ops.diag(self).sum()

    def argwhere(self):
        return ops.argwhere(self)

    def repeat(self, *sizes):
        return ops.repeat(self, *sizes)

    def flip(self, *dims):
        return ops.flip(self, dims[0] if len(dims) == 1 and not isinstance(dims[0], int) else dims)

    def roll(self, shifts, dims=None):
        return ops.roll(self, shifts, dims)

    def unbind(self, dim=0):
        return ops.unbind(self, dim)

    def narrow(self, dim, start, length):
        return ops.narrow(self, dim, start, length)

    def movedim(self, source, destination):
        return ops.movedim(self, source, destination)

    def swapaxes(self, axis0, axis1):
        return ops.transpose(self, axis0, axis1)

    swapdims = swapaxes

    def unflatten(self, dim, sizes):
        return ops.unflatten(self, dim, sizes)

    def mm(self, mat2):
        return ops.mm(self, mat2)

    def bmm(self, mat2):
        return ops.bmm(self, mat2)

    def mv(self, vec):
        return ops.mv(self, vec)

    def dot(self, other):
        return ops.dot(self, other)

    def prod(self, dim=None, keepdim=False, *, dtype=None):
        return ops.prod(self, dim, keepdim, dtype=dtype)

    def cumsum(self, dim, *, dtype=None):
        return ops.cumsum(self, dim, dtype=dtype)

    def sort(self, dim=-1, descending=False, stable=False):
        return ops.sort(self, dim, descending, stable)

    def argsort(self, dim=-1, descending=False, stable=False):
        return ops.argsort(self, dim, descending, stable)

    def unique(self, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
        return ops.unique(self, sorted, return_inverse, return_counts, dim)

    def bincount(self, weights=None, minlength=0):
        return ops.bincount(self, weights, minlength)

    def nonzero(self, *, as_tuple=False):
        return ops.nonzero(self, as_tuple=as_tuple)

    def masked_select(self, mask):
        return ops.masked_select(self, mask)

    def any(self, dim=None, keepdim=False):
        return ops.any(self, dim, keepdim)

    def all(self, dim=None, keepdim=False):
        return ops.all(self, dim, keepdim)

    def count_nonzero(self, dim=None):
        return ops.count_nonzero(self, dim)

    def isnan(self):
        return ops.isnan(self)

    def isinf(self):
        return ops.isinf(self)

    def isfinite(self):
        return ops.isfinite(self)

    def square(self):
        return ops.square(self)

    def log2(self):
        return ops.log2(self)

    def log10(self):
        return ops.log10(self)

    def log1p(self):
        return ops.log1p(self)

    def expm1(self):
        return ops.expm1(self)

    def erf(self):
        return ops.erf(self)

    def floor(self):
        return ops.floor(self)

    def ceil(self):
        return ops.ceil(self)

    def round(self, decimals=0):
        return ops.round(self, decimals)

    def trunc(self):
        return ops.trunc(self)

    def fmod(self, other):
        return ops.fmod(self, other)

    def remainder(self, other):
        return ops.remainder(self, other)

    def floor_divide(self, other):
        return ops.floor_divide(self, other)

    def logical_not(self):
        return ops.logical_not(self)

    def logical_and(self, other):
        return ops.logical_and(self, other)

    def logical_or(self, other):
        return ops.logical_or(self, other)

    def logical_xor(self, other):
        return ops.logical_xor(self, other)

    def lerp(self, end, weight):
        return ops.lerp(self, end, weight)

    def exp_(self):
        return _inplace(self, ops.exp)

    def log_(self):
        return _inplace(self, ops.log)

    def sqrt_(self):
        return _inplace(self, ops.sqrt)

    def rsqrt_(self):
        return _inplace(self, ops.rsqrt)

    def abs_(self):
        return _inplace(self, ops.abs)

    def neg_(self):
        return _inplace(self, ops.neg)

    def sigmoid_(self):
        return _inplace(self, ops.sigmoid)

    def tanh_(self):
        return _inplace(self, ops.tanh)

    def relu_(self):
        return _inplace(self, ops.relu)

    def sin_(self):
        return _inplace(self, ops.sin)

    def cos_(self):
        return _inplace(self, ops.cos)

    def floor_(self):
        return _inplace(self, ops.floor)

    def ceil_(self):
        return _inplace(self, ops.ceil)

    def round_(self):
        return _inplace(self, ops.round)

    def trunc_(self):
        return _inplace(self, ops.trunc)

    def reciprocal_(self):
        return _inplace(self, ops.reciprocal)

    def polygamma(self, n):
        """tiletrain.polygamma(n, self) (torch's method: the order first)."""
        return ops.polygamma(n, self)

    def polygamma_(self, n):
        return _inplace(self, lambda a: ops.polygamma(n, a))




def _forward(name):
    def method(self, *args, **kwargs):
        return getattr(ops, name)(self, *args, **kwargs)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"tiletrain.{name}(self, ...)"
    return method


# torch's Tensor methods that are the tiletrain function of the same name with self first
for _name in ("acos", "acosh", "addbmm", "addcdiv", "addcmul", "aminmax", "arccos", "arcsin", "arctan", "arctan2",
              "asin", "asinh", "atan", "atan2", "atanh", "copysign", "cosh", "cross",
              "cummax", "cummin", "deg2rad", "diag_embed", "diagflat", "diagonal", "digamma", "kthvalue",
              "matrix_power", "median", "diff", "erfc", "erfinv", "exp2", "float_power", "fliplr", "flipud", "fmax",
              "fmin", "frac", "heaviside", "hsplit", "hypot", "i0", "igamma", "igammac", "inner", "kron", "lgamma",
              "logaddexp", "logit", "msort", "mvlgamma", "nanmean",
              "nansum", "rad2deg", "rot90", "sgn", "signbit", "sinh", "take_along_dim", "tensor_split", "tile",
              "vdot", "vsplit", "xlogy"):
    setattr(Tensor, _name, _forward(_name))


def _forward_inplace(name):
    def method(self, *args, **kwargs):
        operands = tuple(a for a in args if isinstance(a, TensorBase))  # (for the graph test only)
        return _inplace(self, lambda a, *_: getattr(ops, name)(a, *args, **kwargs), *operands)
    method.__name__ = method.__qualname__ = name + "_"
    method.__doc__ = f"self takes the value tiletrain.{name}(self, ...)"
    return method


for _name in ("acos", "acosh", "arccos", "arcsin", "arctan", "arctan2", "asin", "asinh", "atan", "atan2", "atanh",
              "copysign", "cosh", "deg2rad", "digamma", "erfc", "erfinv", "exp2", "frac", "heaviside", "hypot", "i0",
              "igamma", "igammac", "lgamma", "logit", "mvlgamma", "rad2deg", "sgn", "sinh", "xlogy"):
    setattr(Tensor, _name + "_", _forward_inplace(_name))
del _name

set_tensor_class(Tensor)

__all__ = ["Tensor"]
