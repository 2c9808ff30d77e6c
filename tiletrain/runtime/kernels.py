"""The one kernel-call layer: ops call tile kernels by name.

Every kernel of csrc/kernels.def is looked up here by its name in the generated registry
(kernel id ``TT_K_<NAME>`` and argument struct ``tt_args_<name>``); the arguments are
keyword arguments named as in the table.  Three C expanders cover the ops:

  run_map(name, *tensors, **args)        one task per tile of tensors of one shape and tiling
  run_span(name, axis, naxes, full, reduced, reduce=False, **args)
                                         tiles viewed as (m, k, n) around axes [axis, axis+naxes):
                                         `reduced` tensors lack those axes (reductions, broadcasts)
  run_norm(name, full, rows, cols, reduce=0, **args)
                                         row/column kernels over the last axis (layer/rms norm)
  run_batch(name, batch, whole, reduce=False, **args)
                                         one task per batch tile (conv, pools, batch norm)

Nothing above this module names a C type or a kernel id."""
from __future__ import annotations

from .._ffi import check, cstr, ffi, lib

# name -> (kernel id, "tt_args_<name> *")
_KERNELS: dict[str, tuple[int, str]] = {}


def _registry() -> dict[str, tuple[int, str]]:
    if not _KERNELS:
        for k in range(lib.tt_kernel_count()):
            name = cstr(lib.tt_kernel_name(k))
            _KERNELS[name] = (k, f"tt_args_{name} *")
    return _KERNELS


def kernel_names() -> list[str]:
    """Every kernel of csrc/kernels.def, in table order."""
    return list(_registry())


def kernel_id(name: str) -> int:
    return _lookup(name)[0]


def _lookup(name: str) -> tuple[int, str]:
    try:
        return (_KERNELS or _registry())[name]
    except KeyError:
        raise ValueError(f"unknown kernel {name!r} (csrc/kernels.def has no such line)") from None


def _args(name: str, fields: dict):
    kid, ctype = _lookup(name)
    args = ffi.new(ctype)
    for key, value in fields.items():
        try:
            setattr(args, key, value)
        except AttributeError:
            raise TypeError(f"kernel {name!r} has no argument {key!r}") from None
    return kid, args


def _ptrs(tensors):
    return ffi.new("tt_tensor *[]", [t._ptr for t in tensors]) if tensors else ffi.NULL


def run_map(name: str, *tensors, **fields) -> None:
    """One ``name`` task per tile; the tensors share one shape and tiling, in the kernel's
    buffer order (inputs and outputs as its table line lists them)."""
    kid, args = _args(name, fields)
    check(lib.tt_map(kid, args, len(tensors), _ptrs(tensors)))


def run_span(name: str, axis: int, naxes: int, full, reduced=(), reduce: bool = False, **fields) -> None:
    """``name`` over tiles viewed as (m, k, n) around axes [axis, axis + naxes): ``full``
    tensors have one layout, ``reduced`` ones lack those axes.  With ``reduce`` the reduced
    tensors are accumulated along the span (the first tile overwrites)."""
    kid, args = _args(name, fields)
    check(lib.tt_span_map(kid, args, axis, naxes, len(full), _ptrs(full), len(reduced), _ptrs(reduced),
                          int(reduce)))


def run_norm(name: str, full, rows=(), cols=(), reduce: int = 0, **fields) -> None:
    """Row/column kernels over the last axis (csrc/expand_norm.c): ``full`` tensors of one
    layout, ``rows`` (full without the last axis), ``cols`` (the last axis alone)."""
    kid, args = _args(name, fields)
    check(lib.tt_norm_map(kid, args, len(full), _ptrs(full), len(rows), _ptrs(rows), len(cols), _ptrs(cols),
                          reduce))


def run_batch(name: str, batch, whole=(), reduce: bool = False, **fields) -> None:
    """One ``name`` task per batch tile (csrc/expand_conv.c: conv, pools, batch norm):
    ``batch`` tensors are tiled along axis 0 only, ``whole`` ones are single tiles (with
    ``reduce`` the written whole tensors accumulate over the batch tiles in order)."""
    kid, args = _args(name, fields)
    check(lib.tt_batch_map(kid, args, len(batch), _ptrs(batch), len(whole), _ptrs(whole), int(reduce)))


# The expanders with a fixed kernel and a signature of their own.

def run_cast(x, y) -> None:
    """y = x converted to y's dtype, rounded to nearest even (same shape and tiling)."""
    check(lib.tt_cast(x._ptr, y._ptr))


def sum_all(alpha: float, x, beta: float, y) -> None:
    """y (0-d) = alpha * sum(x) + beta * y."""
    check(lib.tt_sum_all(alpha, x._ptr, beta, y._ptr))


def gemm(alpha: float, a, transpose_a: bool, b, transpose_b: bool, beta: float, c) -> None:
    """c = alpha op(a) op(b) + beta c over tiles (csrc/expand.c, tt_gemm)."""
    check(lib.tt_gemm(alpha, a._ptr, int(transpose_a), b._ptr, int(transpose_b), beta, c._ptr))


__all__ = ["gemm", "kernel_id", "kernel_names", "run_batch", "run_cast", "run_map", "run_norm", "run_span",
           "sum_all"]
