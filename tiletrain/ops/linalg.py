"""Matrix products: matmul (torch's, batched or not) and matmul_leading (the weight gradient
of a linear layer), over the tiled gemm expander (csrc/expand.c), with their backward rules.
Operands are re-tiled (copy tasks) where their tilings do not line up."""
from __future__ import annotations

import math

import numpy as np

from ..runtime.kernels import gemm
from ..tensors import Tensor, TensorTraits, is_half
from .autograd import backward_rule, record
from .basic import _any_float_tensor, _cast, _scalar
from .shape import expand, reshape, retile


def matmul(a: Tensor, b: Tensor, transpose_a: bool = False, transpose_b: bool = False,
           alpha: float = 1.0) -> Tensor:
    """alpha * op(a) @ op(b).

    a is (..., M, K) (or (..., K, M) with transpose_a), b is (K, N) (or (N, K)) or batched
    (..., K, N) with the same batch shape as a.  Without transposes, torch.matmul's other
    cases too: 1-D operands, batch axes that broadcast (copies of the broadcast operand).  b is re-tiled (copy tasks) when its batch or
    contracted axes are tiled otherwise than a's.  The result is tiled like a's rows and b's
    columns.
    float16/bfloat16 operands: float32 products and sums, one rounding of the result."""
    what = "matmul"
    _any_float_tensor(a, what, "a")
    _any_float_tensor(b, what, "b")
    if a.dtype != b.dtype:
        raise TypeError(f"{what}: dtype mismatch, a is {a.dtype} and b is {b.dtype}")
    if not (transpose_a or transpose_b) and (a.ndim == 1 or b.ndim == 1 or (b.ndim > 2 and a.shape[:-2] != b.shape[:-2])):
        return _torch_matmul(a, b, alpha)
    (ash, ati), (bsh, bti) = (a.traits.shape, a.traits.tiles), (b.traits.shape, b.traits.tiles)
    nd, bnd = len(ash), len(bsh)
    if nd < 2 or bnd < 2:
        raise ValueError(f"{what}: operands need rank >= 2, got shapes {ash} and {bsh}")
    batched = bnd > 2
    if batched:
        if bnd != nd:
            raise ValueError(f"{what}: batched b must have a's rank {nd}, got shape {bsh}")
        if ash[:-2] != bsh[:-2]:
            raise ValueError(f"{what}: batch dimensions differ: a {ash[:-2]}, b {bsh[:-2]}")
    elif nd > 2 and transpose_a:
        raise ValueError(f"{what}: transpose_a needs a 2-D a when b is 2-D (a has shape {ash})")
    am, ak = (nd - 1, nd - 2) if transpose_a else (nd - 2, nd - 1)
    bo = bnd - 2
    bk, bn = (bo + 1, bo) if transpose_b else (bo, bo + 1)
    if ash[ak] != bsh[bk]:
        raise ValueError(f"{what}: inner dimensions differ: a {ash} (transpose_a={transpose_a}) "
                         f"and b {bsh} (transpose_b={transpose_b}) contract {ash[ak]} with {bsh[bk]}")
    want = (ati[:-2] if batched else bti[:-2]) + ((ati[ak], bti[-1]) if bk == bo else (bti[-2], ati[ak]))
    if bti != want:  # b re-tiled like a along the batch and contracted axes (copy tasks)
        b = retile(b, want)
        bti = b.traits.tiles
    shape = ash[:-2] + (ash[am], bsh[bn])
    tiles = ati[:-2] + (ati[am], bti[bn])
    alpha = alpha if type(alpha) is float else _scalar(alpha, what, "alpha")
    ta, tb = bool(transpose_a), bool(transpose_b)
    c = _gemm(alpha, a, ta, b, tb, TensorTraits(shape, tiles), chain=a.grid[ak] > 1)
    return record("matmul", c, (a, b), saved=(a, b), alpha=alpha, ta=ta, tb=tb, folded=not batched and nd > 2)


def _torch_matmul(a: Tensor, b: Tensor, alpha: float) -> Tensor:
    """torch.matmul's other cases, reduced to the ones above: a 1-D operand gets a unit axis
    (removed from the result), batch axes broadcast (expand, whose backward sums)."""
    k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if a.shape[-1] != k_b:  # (checked before any task)
        raise ValueError(f"matmul: inner dimensions differ: a {a.shape} and b {b.shape} contract {a.shape[-1]} "
                         f"with {k_b}")
    try:
        batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except ValueError:
        raise ValueError(f"matmul: batch dimensions differ: a {a.shape} and b {b.shape} do not "
                         "broadcast") from None
    if a.ndim == 1 or b.ndim == 1:
        if a.ndim == 1 and b.ndim == 1:
            return reshape(_torch_matmul(reshape(a, (1, a.shape[0])), reshape(b, (b.shape[0], 1)), alpha), ())
        a2 = reshape(a, (1, a.shape[0])) if a.ndim == 1 else a
        b2 = reshape(b, (b.shape[0], 1)) if b.ndim == 1 else b
        y = matmul(a2, b2, alpha=alpha)
        return reshape(y, y.shape[:-2] + ((y.shape[-1],) if a.ndim == 1 else (y.shape[-2],)))
    a = a if a.shape[:-2] == batch else expand(a, *(batch + a.shape[-2:]))
    b = b if b.shape[:-2] == batch else expand(b, *(batch + b.shape[-2:]))
    return matmul(a, b, alpha=alpha)


def matmul_leading(a: Tensor, b: Tensor, alpha: float = 1.0) -> Tensor:
    """alpha * A^T B where A, B are a, b with every axis but the last flattened: a is
    (..., P), b is (..., N) with the same leading shape and tiles; the result is (P, N).
    (The weight gradient of a linear layer: x^T dy over all batch and time tiles.)"""
    what = "matmul_leading"
    _any_float_tensor(a, what, "a")
    _any_float_tensor(b, what, "b")
    if a.dtype != b.dtype:
        raise TypeError(f"{what}: dtype mismatch, a is {a.dtype} and b is {b.dtype}")
    if a.ndim < 2 or a.shape[:-1] != b.shape[:-1] or a.tiles[:-1] != b.tiles[:-1]:
        raise ValueError(f"{what}: a {a.shape} tiles {a.tiles} and b {b.shape} tiles {b.tiles} must share "
                         "every axis but the last, shape and tiles")
    alpha = _scalar(alpha, what, "alpha")
    c = _gemm(alpha, a, True, b, False, TensorTraits((a.shape[-1], b.shape[-1]), (a.tiles[-1], b.tiles[-1])),
              chain=math.prod(a.grid[:-1]) > 1)
    return record("matmul_leading", c, (a, b), saved=(a, b), alpha=alpha)


def _gemm(alpha: float, a: Tensor, ta: bool, b: Tensor, tb: bool, traits: TensorTraits, chain: bool) -> Tensor:
    """c = alpha op(a) op(b) into a new tensor of a's dtype.  Half a and b with several tiles
    along the contracted axis (``chain``) accumulate into a float32 c, cast once at the end,
    so the result is rounded once however the operands are tiled."""
    acc = chain and is_half(a.dtype)
    c = Tensor(traits, np.float32 if acc else a.dtype)
    gemm(alpha, a, ta, b, tb, 0.0, c)
    return _cast(c, a.dtype) if acc else c


@backward_rule("matmul_leading", differentiable=True)
def _matmul_leading_bwd(node, g):
    a, b = node.saved
    al = node.ctx["alpha"]
    # C = A^T B: dA = B dC^T, dB = A dC (flattened leading axes)
    return (matmul(b, g, transpose_b=True, alpha=al) if node.inputs[0] is not None else None,
            matmul(a, g, alpha=al) if node.inputs[1] is not None else None)


@backward_rule("matmul", differentiable=True)
def _matmul_bwd(node, g):
    a, b = node.saved
    c = node.ctx
    al, ta, tb = c["alpha"], c["ta"], c["tb"]
    need_a, need_b = node.inputs[0] is not None, node.inputs[1] is not None
    da = db = None
    if c["folded"]:  # a (..., M, K) @ b (K, N) or b^T: weight gradients contract every leading axis
        if need_a:
            da = matmul(g, b, transpose_b=not tb, alpha=al)
        if need_b:
            db = matmul_leading(g, a, alpha=al) if tb else matmul_leading(a, g, alpha=al)
        return da, db
    if not ta and not tb:      # C = A B
        da = matmul(g, b, transpose_b=True, alpha=al) if need_a else None
        db = matmul(a, g, transpose_a=True, alpha=al) if need_b else None
    elif not ta and tb:        # C = A B^T
        da = matmul(g, b, alpha=al) if need_a else None
        db = matmul(g, a, transpose_a=True, alpha=al) if need_b else None
    elif ta and not tb:        # C = A^T B
        da = matmul(b, g, transpose_b=True, alpha=al) if need_a else None
        db = matmul(a, g, alpha=al) if need_b else None
    else:                      # C = A^T B^T
        da = matmul(b, g, transpose_a=True, transpose_b=True, alpha=al) if need_a else None
        db = matmul(g, a, transpose_a=True, transpose_b=True, alpha=al) if need_b else None
    return da, db


__all__ = ["matmul", "matmul_leading"]
