"""Basic tensor operations on operands of one layout, and the operand checks every op uses.
Each op validates its operands in Python, then makes one C call that expands into one task
per tile, and records its autograd node; its backward rule follows it.  The torch-shaped
element-wise ops (add, sub, mul, div with broadcasting and numbers) are the rows of
elementwise.py's table; matmul is linalg.py's.

float16 and bfloat16 tensors (storage types: float32 arithmetic and accumulation, one
rounding per result) are taken by the ops in HALF_OPS; every other op raises a TypeError
for them, naming the op and the dtypes it supports."""
from __future__ import annotations

import functools

import math
import numbers

import numpy as np

from ..runtime.kernels import run_cast, run_map, run_span, sum_all
from ..tensors import Tensor, TensorTraits, as_dtype, is_float, is_half
from ..tensors.tensor import forget_value_range
from .autograd import backward_rule, double_backward_rule, record

# The ops that take float16/bfloat16 tensors (besides float32/float64).
HALF_OPS = ("astype", "copy", "fill_", "scale", "neg", "add_scalar", "add", "sub", "mul", "axpy_", "broadcast",
            "sum", "matmul", "matmul_leading")


def _tensor(x, what: str, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{what}: {name} must be a tiletrain Tensor, got {type(x).__name__}")
    x._handle(what)
    return x


_F32_F64 = frozenset((np.dtype(np.float32), np.dtype(np.float64)))


def _float_tensor(x, what: str, name: str) -> Tensor:
    """x, checked to be a float32 or float64 tensor (the ops without half-precision bodies)."""
    x = _tensor(x, what, name)
    if x.dtype not in _F32_F64:
        extra = (f" (float16/bfloat16 tensors work with {', '.join(HALF_OPS)}; cast with astype)"
                 if is_half(x.dtype) else "")
        raise TypeError(f"{what}: {name} has dtype {x.dtype}; this op supports float32 and float64{extra}")
    return x


def _any_float_tensor(x, what: str, name: str) -> Tensor:
    """x, checked to be float32, float64, float16 or bfloat16 (ops in HALF_OPS)."""
    x = _tensor(x, what, name)
    if not is_float(x.dtype):
        raise TypeError(f"{what}: {name} has dtype {x.dtype}; this op supports float32, float64, float16 and "
                        "bfloat16")
    return x


def _scalar(v, what: str, name: str) -> float:
    if type(v) is float:  # the common case, without the numbers.Real (ABC) check
        return v
    if not isinstance(v, numbers.Real) or isinstance(v, bool):
        raise TypeError(f"{what}: {name} must be a real number, got {type(v).__name__}")
    return float(v)


def dim_alias(fn):
    """torch's ``axis=`` keyword as an alias of ``dim=`` (x.sum(axis=0) is x.sum(dim=0))."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if "axis" in kwargs:
            if "dim" in kwargs:
                raise TypeError(f"{fn.__name__}() got both dim= and its alias axis=")
            kwargs["dim"] = kwargs.pop("axis")
        return fn(*args, **kwargs)
    return wrapper


def _same(what: str, a: Tensor, b: Tensor, names=("a", "b")) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{what}: shape mismatch, {names[0]} is {a.shape} and {names[1]} is {b.shape}")
    if a.tiles != b.tiles:
        raise ValueError(f"{what}: tile mismatch, {names[0]} has tiles {a.tiles} and {names[1]} has {b.tiles}")
    if a.dtype != b.dtype:
        raise TypeError(f"{what}: dtype mismatch, {names[0]} is {a.dtype} and {names[1]} is {b.dtype}")


def _like(x: Tensor) -> Tensor:
    return Tensor(x.traits, x.dtype)


def fill_(x: Tensor, value: float) -> Tensor:
    """Set every element of x to value, in place (one fill task per tile)."""
    _tensor(x, "fill_", "x")
    value = _scalar(value, "fill_", "value")
    forget_value_range(x)
    run_map("fill", x, value=value)
    return x


# -- counts: 0-d tensors counted up in place whose value the host knows ------------------

def new_count(value, dtype) -> Tensor:
    """A 0-d tensor holding the count ``value`` (rounded to ``dtype``: int64, float32 or
    float64), its value known on the host (see count_)."""
    dt = as_dtype(dtype)
    if dt not in (np.dtype(np.int64), np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"new_count: a count is int64, float32 or float64, not {dt}")
    v = dt.type(value).item()
    t = fill_(Tensor(TensorTraits(()), dt), v)
    t.value_range = (int(v), int(v))
    return t


def count_value(t: Tensor):
    """The value of 0-d count ``t`` (an int for int64, a float otherwise): from the host when
    new_count or count_ wrote it last (``value_range``), else read (waits for its writers)."""
    r = t.value_range
    if r is not None and r[0] == r[1]:
        return t.dtype.type(r[0]).item()
    return t.item()


def count_(t: Tensor):
    """torch's ``t += 1`` for a 0-d count (BatchNorm's num_batches_tracked, an optimizer's
    step), as one fill task: returns the new value without waiting, the count's value being
    known on the host.  A count written some other way since (an in-place op,
    load_state_dict: they forget the value range) is read once.  A float count rounds as the
    tensor does (a float32 count stops at 2**24, as torch's)."""
    if not isinstance(t, Tensor) or t.ndim != 0:
        raise TypeError(f"count_: a count is a 0-d tiletrain Tensor, got {type(t).__name__}")
    v = t.dtype.type(count_value(t) + 1).item()
    fill_(t, v)
    t.value_range = (int(v), int(v))
    return v


def copy(x: Tensor) -> Tensor:
    _tensor(x, "copy", "x")
    y = _like(x)
    run_map("copy", x, y)
    return record("copy", y, (x,))


@backward_rule("copy", differentiable=True)
def _copy_bwd(node, g):
    return (g,)


def _cast(x: Tensor, dtype) -> Tensor:
    y = Tensor(x.traits, dtype)
    run_cast(x, y)
    return y


def astype(x: Tensor, dtype) -> Tensor:
    """x converted to ``dtype`` (a new tensor, same tiles): any pair of float32, float64,
    float16 and bfloat16, rounded to nearest even (float64 to a half type rounds once).  The
    gradient is cast back to x's dtype."""
    what = "astype"
    _any_float_tensor(x, what, "x")
    dt = as_dtype(dtype)
    if not is_float(dt):
        raise TypeError(f"{what}: casts between float32, float64, float16 and bfloat16, not to {dt}")
    return record("astype", _cast(x, dt), (x,), dtype=x.dtype)


@backward_rule("astype")
def _astype_bwd(node, g):
    return (_cast(g, node.ctx["dtype"]),)


@double_backward_rule("astype")
def _astype_double(node, g):
    return (astype(g, node.ctx["dtype"]),)


def scale(x: Tensor, alpha: float) -> Tensor:
    """alpha * x"""
    _any_float_tensor(x, "scale", "x")
    y = _like(x)
    alpha = _scalar(alpha, "scale", "alpha")
    run_map("scale", x, y, alpha=alpha)
    return record("scale", y, (x,), alpha=alpha)


def _scaled(g: Tensor, alpha: float) -> Tensor:
    return g if alpha == 1.0 else scale(g, alpha)


@backward_rule("scale", differentiable=True)
def _scale_bwd(node, g):
    return (_scaled(g, node.ctx["alpha"]),)


def add_scalar(x: Tensor, s: float, alpha: float = 1.0) -> Tensor:
    """alpha * x + s"""
    _any_float_tensor(x, "add_scalar", "x")
    y = _like(x)
    alpha = _scalar(alpha, "add_scalar", "alpha")
    run_map("add_scalar", x, y, alpha=alpha, s=_scalar(s, "add_scalar", "s"))
    return record("scale", y, (x,), alpha=alpha)  # d(alpha x + s)/dx = alpha: scale's rule


def div_scalar(x: Tensor, s: float) -> Tensor:
    """x / s.  Division by zero gives inf or nan, as IEEE arithmetic does."""
    _any_float_tensor(x, "div", "x")
    s = _scalar(s, "div", "other")
    if is_half(x.dtype):  # float32 arithmetic, one rounding: x * (1 / s) is within it
        return scale(x, math.copysign(float("inf"), s) if s == 0.0 else 1.0 / s)
    y = _like(x)
    run_map("div_scalar", x, y, s=s)
    return record("div_scalar", y, (x,), s=s)


@backward_rule("div_scalar", differentiable=True)
def _div_scalar_bwd(node, g):
    return (div_scalar(g, node.ctx["s"]),)


def add_broadcast(x: Tensor, b: Tensor, axis, alpha: float = 1.0, beta: float = 1.0) -> Tensor:
    """alpha * x + beta * b, with b broadcast along ``axis`` of x (an int, or a tuple of
    consecutive axes); b has x's shape and tiles without those axes."""
    what = "add_broadcast"
    _float_tensor(x, what, "x")
    _float_tensor(b, what, "b")
    start, naxes = x.traits.axis_span(axis)
    expect = x.traits.drop_axis(start, naxes)
    if b.shape != expect.shape or b.tiles != expect.tiles:
        raise ValueError(f"{what}: b must have shape {expect.shape} and tiles {expect.tiles} "
                         f"(x without axis {axis}), got shape {b.shape} and tiles {b.tiles}")
    if b.dtype != x.dtype:
        raise TypeError(f"{what}: dtype mismatch, x is {x.dtype} and b is {b.dtype}")
    y = _like(x)
    alpha, beta = _scalar(alpha, what, "alpha"), _scalar(beta, what, "beta")
    run_span("add_bcast", start, naxes, [x, y], [b], reduce=False, alpha=alpha, beta=beta)
    return record("add_broadcast", y, (x, b), alpha=alpha, beta=beta, start=start, naxes=naxes)


@backward_rule("add_broadcast", differentiable=True)
def _add_broadcast_bwd(node, g):
    x, b = node.inputs
    c = node.ctx
    return (_scaled(g, c["alpha"]) if x is not None else None,
            _sum_axes(g, c["start"], c["naxes"], alpha=c["beta"]) if b is not None else None)


def broadcast(b: Tensor, traits: TensorTraits, axis, alpha: float = 1.0) -> Tensor:
    """alpha * b repeated along ``axis`` (an int or consecutive axes) of ``traits``' layout;
    b has that layout without those axes."""
    what = "broadcast"
    _any_float_tensor(b, what, "b")
    start, naxes = traits.axis_span(axis)
    expect, keep = traits.drop_axis(start, naxes), traits.keep_axis(start, naxes)
    if (b.shape, b.tiles) not in ((expect.shape, expect.tiles), (keep.shape, keep.tiles)):
        raise ValueError(f"{what}: b must have shape {expect.shape} and tiles {expect.tiles} (or {keep.shape} "
                         f"and {keep.tiles}), got shape {b.shape} and tiles {b.tiles}")
    alpha = _scalar(alpha, what, "alpha")
    y = Tensor(traits, b.dtype)
    run_span("bcast", start, naxes, [y], [b], reduce=False, alpha=alpha)
    return record("broadcast", y, (b,), alpha=alpha, start=start, naxes=naxes, btraits=b.traits)


@backward_rule("broadcast", differentiable=True)
def _broadcast_bwd(node, g):
    c = node.ctx  # (b may have the broadcast axes, of size 1)
    return (_sum_axes(g, c["start"], c["naxes"], alpha=c["alpha"], out=c["btraits"]),)


def _sum_axes(x: Tensor, start=None, naxes: int = 0, alpha: float = 1.0, out=None) -> Tensor:
    """alpha * the sum of all elements (start None: a 0-d tensor), or along axes [start, start +
    naxes) into ``out`` traits (default: those axes removed; tiletrain/ops/reduce.py also passes
    them kept with size 1).  The one sum used inside tiletrain (tiletrain.sum is
    tiletrain.ops.reduce.sum, torch-shaped).  The result has x's dtype; float16/bfloat16 inputs
    are summed into a float32 accumulator, rounded once at the end."""
    _any_float_tensor(x, "sum", "x")
    alpha = _scalar(alpha, "sum", "alpha")
    acc_dtype = np.float32 if is_half(x.dtype) else x.dtype
    if start is None:
        start, naxes = 0, x.ndim
        y = Tensor(TensorTraits(()), acc_dtype)
        sum_all(alpha, x, 0.0, y)
    else:
        y = Tensor(out if out is not None else x.traits.drop_axis(start, naxes), acc_dtype)
        run_span("sum_axis", start, naxes, [x], [y], reduce=True, alpha=alpha)
    if y.dtype != x.dtype:
        y = _cast(y, x.dtype)
    return record("sum", y, (x,), alpha=alpha, start=start, naxes=naxes, traits=x.traits)


@backward_rule("sum", differentiable=True)
def _sum_bwd(node, g):
    c = node.ctx
    if c["naxes"] == 0:  # sum of a 0-d tensor
        return (_scaled(g, c["alpha"]),)
    return (broadcast(g, c["traits"], tuple(range(c["start"], c["start"] + c["naxes"])), alpha=c["alpha"]),)


def zero_grads(params, set_to_none: bool = True) -> None:
    """torch's zero_grad over ``params`` (Module.zero_grad, Optimizer.zero_grad): each gradient
    dropped (the next backward creates a fresh one), or with set_to_none=False filled with 0."""
    for p in params:
        if p.grad is None:
            continue
        if set_to_none:
            p.grad = None
        else:
            fill_(p.grad, 0.0)


def axpy_(y: Tensor, x: Tensor, alpha: float = 1.0, beta: float = 1.0) -> Tensor:
    """In place: y = alpha * x + beta * y (gradient accumulation)."""
    _any_float_tensor(y, "axpy_", "y")
    _any_float_tensor(x, "axpy_", "x")
    _same("axpy_", x, y, names=("x", "y"))
    run_map("axpy", x, y, alpha=_scalar(alpha, "axpy_", "alpha"), beta=_scalar(beta, "axpy_", "beta"))
    return y


__all__ = ["fill_", "copy", "astype", "scale", "add_scalar", "div_scalar", "add_broadcast", "broadcast", "axpy_"]
