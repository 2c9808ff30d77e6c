"""torch.linalg's norms over tiletrain's ops (their gradients come from those ops):
``vector_norm``, ``matrix_norm`` (Frobenius) and ``norm``; ``matrix_exp``, ``solve`` and
``householder_product`` for small matrices (tiletrain/ops/matfun.py).  The decompositions and
the spectral and nuclear norms are not here."""
from __future__ import annotations

from .ops.matfun import householder_product, matrix_exp, solve
from .ops.reduce import norm as _norm
from .tensors import Tensor


def vector_norm(x: Tensor, ord=2, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A002
    """The ``ord``-norm of x's elements (over ``dim``, else all of them)."""
    t = x if dtype is None else x.to(dtype)
    if dim is None:
        t = t.reshape(-1)
    return _norm(t, p=ord, dim=dim, keepdim=keepdim)


def matrix_norm(A: Tensor, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None) -> Tensor:
    """The Frobenius norm of the matrices over ``dim``."""
    if ord != "fro":
        raise NotImplementedError(f"linalg.matrix_norm: ord={ord!r} is not supported (only 'fro')")
    return vector_norm(A, 2, tuple(dim), keepdim, dtype=dtype)


def norm(A: Tensor, ord=None, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """torch.linalg.norm: ord None is the 2-norm of the flattened input (dim None) or over
    ``dim``; 'fro' a matrix norm; a number a vector norm over one dim (or of a 1-d input)."""
    if ord is None:
        return vector_norm(A, 2, dim, keepdim, dtype=dtype)
    if ord == "fro" or (isinstance(dim, (tuple, list)) and len(dim) == 2) or (dim is None and A.ndim == 2):
        return matrix_norm(A, ord, (-2, -1) if dim is None else dim, keepdim, dtype=dtype)
    return vector_norm(A, ord, dim, keepdim, dtype=dtype)


__all__ = ["norm", "vector_norm", "matrix_norm", "matrix_exp", "solve", "householder_product"]
