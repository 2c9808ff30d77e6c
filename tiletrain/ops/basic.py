"""First tensor operations (forward only).  Each op validates its operands in Python,
then makes one C call that expands into one task per tile."""
from __future__ import annotations

import numbers


from .._ffi import check, ffi, lib
from ..tensor import Tensor, TensorTraits, from_value_


def _tensor(x, what: str, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{what}: {name} must be a tiletrain Tensor, got {type(x).__name__}")
    x._handle(what)
    return x


def _float_tensor(x, what: str, name: str) -> Tensor:
    x = _tensor(x, what, name)
    if x.dtype.kind != "f":
        raise TypeError(f"{what}: {name} has dtype {x.dtype}; this op supports float32 and float64")
    return x


def _scalar(v, what: str, name: str) -> float:
    if not isinstance(v, numbers.Real) or isinstance(v, bool):
        raise TypeError(f"{what}: {name} must be a real number, got {type(v).__name__}")
    return float(v)


def _same(what: str, a: Tensor, b: Tensor, names=("a", "b")) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{what}: shape mismatch, {names[0]} is {a.shape} and {names[1]} is {b.shape}")
    if a.tiles != b.tiles:
        raise ValueError(f"{what}: tile mismatch, {names[0]} has tiles {a.tiles} and {names[1]} has {b.tiles}")
    if a.dtype != b.dtype:
        raise TypeError(f"{what}: dtype mismatch, {names[0]} is {a.dtype} and {names[1]} is {b.dtype}")


def _map(kernel: int, ctype: str, fields: dict, *tensors: Tensor) -> None:
    args = ffi.new(ctype)
    for k, v in fields.items():
        setattr(args, k, v)
    arr = ffi.new("tt_tensor *[]", [t._ptr for t in tensors])
    check(lib.tt_map(kernel, args, len(tensors), arr))


def _like(x: Tensor) -> Tensor:
    return Tensor(x.traits, x.dtype)


def fill_(x: Tensor, value: float) -> Tensor:
    """Set every element of x to value, in place."""
    _tensor(x, "fill_", "x")
    return from_value_(x, _scalar(value, "fill_", "value"))


def copy(x: Tensor) -> Tensor:
    _tensor(x, "copy", "x")
    y = _like(x)
    _map(lib.TT_K_COPY, "tt_args_copy *", {}, x, y)
    return y


def scale(x: Tensor, alpha: float) -> Tensor:
    """alpha * x"""
    _float_tensor(x, "scale", "x")
    y = _like(x)
    _map(lib.TT_K_SCALE, "tt_args_scale *", {"alpha": _scalar(alpha, "scale", "alpha")}, x, y)
    return y


def neg(x: Tensor) -> Tensor:
    return scale(x, -1.0)


def add_scalar(x: Tensor, s: float, alpha: float = 1.0) -> Tensor:
    """alpha * x + s"""
    _float_tensor(x, "add_scalar", "x")
    y = _like(x)
    _map(lib.TT_K_ADD_SCALAR, "tt_args_add_scalar *",
         {"alpha": _scalar(alpha, "add_scalar", "alpha"), "s": _scalar(s, "add_scalar", "s")}, x, y)
    return y


def rdiv_scalar(s: float, x: Tensor) -> Tensor:
    """s / x"""
    _float_tensor(x, "rdiv_scalar", "x")
    y = _like(x)
    _map(lib.TT_K_RDIV_SCALAR, "tt_args_rdiv_scalar *", {"s": _scalar(s, "rdiv_scalar", "s")}, x, y)
    return y


def _binary(what: str, kernel: int, ctype: str, fields: dict, a: Tensor, b: Tensor) -> Tensor:
    _float_tensor(a, what, "a")
    _float_tensor(b, what, "b")
    _same(what, a, b)
    c = _like(a)
    _map(kernel, ctype, fields, a, b, c)
    return c


def add(a: Tensor, b: Tensor, alpha: float = 1.0, beta: float = 1.0) -> Tensor:
    """alpha * a + beta * b"""
    return _binary("add", lib.TT_K_ADD, "tt_args_add *",
                   {"alpha": _scalar(alpha, "add", "alpha"), "beta": _scalar(beta, "add", "beta")}, a, b)


def sub(a: Tensor, b: Tensor, alpha: float = 1.0) -> Tensor:
    """a - alpha * b"""
    return add(a, b, 1.0, -_scalar(alpha, "sub", "alpha"))


def mul(a: Tensor, b: Tensor, alpha: float = 1.0) -> Tensor:
    """alpha * a * b (element-wise)"""
    return _binary("mul", lib.TT_K_MUL, "tt_args_mul *", {"alpha": _scalar(alpha, "mul", "alpha")}, a, b)


def div(a: Tensor, b: Tensor, alpha: float = 1.0) -> Tensor:
    """alpha * a / b (element-wise)"""
    return _binary("div", lib.TT_K_DIV, "tt_args_div *", {"alpha": _scalar(alpha, "div", "alpha")}, a, b)


def add_broadcast(x: Tensor, b: Tensor, axis: int, alpha: float = 1.0, beta: float = 1.0) -> Tensor:
    """alpha * x + beta * b, with b broadcast along ``axis`` of x (b has x's shape without axis)."""
    what = "add_broadcast"
    _float_tensor(x, what, "x")
    _float_tensor(b, what, "b")
    axis = x.traits.normalize_axis(axis)
    expect = x.traits.drop_axis(axis)
    if b.shape != expect.shape or b.tiles != expect.tiles:
        raise ValueError(f"{what}: b must have shape {expect.shape} and tiles {expect.tiles} "
                         f"(x without axis {axis}), got shape {b.shape} and tiles {b.tiles}")
    if b.dtype != x.dtype:
        raise TypeError(f"{what}: dtype mismatch, x is {x.dtype} and b is {b.dtype}")
    y = _like(x)
    check(lib.tt_add_bcast(_scalar(alpha, what, "alpha"), x._ptr, _scalar(beta, what, "beta"), b._ptr, axis, y._ptr))
    return y


def sum(x: Tensor, axis: int | None = None) -> Tensor:  # noqa: A001 - mirrors numpy/torch
    """Sum of all elements (a 0-d tensor) or along one axis (that axis removed)."""
    _float_tensor(x, "sum", "x")
    if axis is None:
        y = Tensor(TensorTraits(()), x.dtype)
        check(lib.tt_sum_all(1.0, x._ptr, 0.0, y._ptr))
        return y
    axis = x.traits.normalize_axis(axis)
    y = Tensor(x.traits.drop_axis(axis), x.dtype)
    check(lib.tt_sum_axis(1.0, x._ptr, axis, 0.0, y._ptr))
    return y


def max(x: Tensor, axis: int) -> Tensor:  # noqa: A001
    """Maximum along one axis (that axis removed); NaN propagates as in NumPy."""
    _float_tensor(x, "max", "x")
    if axis is None:
        raise ValueError("max: axis is required (max along an axis)")
    axis = x.traits.normalize_axis(axis)
    y = Tensor(x.traits.drop_axis(axis), x.dtype)
    check(lib.tt_max_axis(x._ptr, axis, y._ptr))
    return y


def matmul(a: Tensor, b: Tensor, transpose_a: bool = False, transpose_b: bool = False,
           alpha: float = 1.0) -> Tensor:
    """alpha * op(a) @ op(b).

    a is (..., M, K) (or (..., K, M) with transpose_a), b is (K, N) (or (N, K)) or batched
    (..., K, N) with the same batch shape and tiles as a.  The contracted axis must have the
    same tile size in both operands.  The result is tiled like a's rows and b's columns."""
    what = "matmul"
    _float_tensor(a, what, "a")
    _float_tensor(b, what, "b")
    if a.dtype != b.dtype:
        raise TypeError(f"{what}: dtype mismatch, a is {a.dtype} and b is {b.dtype}")
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"{what}: operands need rank >= 2, got shapes {a.shape} and {b.shape}")
    nd = a.ndim
    batched = b.ndim > 2
    if batched:
        if b.ndim != nd:
            raise ValueError(f"{what}: batched b must have a's rank {nd}, got shape {b.shape}")
        if a.shape[:-2] != b.shape[:-2] or a.tiles[:-2] != b.tiles[:-2]:
            raise ValueError(f"{what}: batch dimensions differ: a {a.shape[:-2]} tiles {a.tiles[:-2]}, "
                             f"b {b.shape[:-2]} tiles {b.tiles[:-2]}")
    elif nd > 2 and transpose_a:
        raise ValueError(f"{what}: transpose_a needs a 2-D a when b is 2-D (a has shape {a.shape})")
    am, ak = (nd - 1, nd - 2) if transpose_a else (nd - 2, nd - 1)
    bo = b.ndim - 2
    bk, bn = (bo + 1, bo) if transpose_b else (bo, bo + 1)
    if a.shape[ak] != b.shape[bk]:
        raise ValueError(f"{what}: inner dimensions differ: a {a.shape} (transpose_a={transpose_a}) "
                         f"and b {b.shape} (transpose_b={transpose_b}) contract {a.shape[ak]} with {b.shape[bk]}")
    if a.tiles[ak] != b.tiles[bk]:
        raise ValueError(f"{what}: the contracted axis is tiled differently: {a.tiles[ak]} in a, "
                         f"{b.tiles[bk]} in b")
    shape = a.shape[:-2] + (a.shape[am], b.shape[bn])
    tiles = a.tiles[:-2] + (a.tiles[am], b.tiles[bn])
    c = Tensor(TensorTraits(shape, tiles), a.dtype)
    check(lib.tt_gemm(_scalar(alpha, what, "alpha"), a._ptr, int(bool(transpose_a)), b._ptr,
                      int(bool(transpose_b)), 0.0, c._ptr))
    return c


__all__ = ["fill_", "copy", "scale", "neg", "add_scalar", "rdiv_scalar", "add", "sub", "mul", "div",
           "add_broadcast", "sum", "max", "matmul"]
