"""Functions of small matrices: ``matrix_exp`` (torch.matrix_exp / torch.linalg.matrix_exp),
``solve`` (torch.linalg.solve) and ``householder_product`` (torch.linalg.householder_product),
over batches (..., n, n).

matrix_exp and householder_product are composed of recorded ops (matmuls, sums, products), so
their gradients, double backward included, come from those ops: matrix_exp is a Taylor
polynomial of degree 18 of A / 2^s (s chosen from the 1-norm, read on the host, so that the
scaled norm is at most 1/2) squared s times, accurate to the rounding of the products.
solve factorises on the host (NumPy's LAPACK): for small systems; its backward is another
solve and a matmul (torch's formulas), recorded, so it has a double backward too."""
from __future__ import annotations

import math

import numpy as np

from ..tensors import Tensor, from_numpy, is_float
from .autograd import backward_rule, record
from .composite import eye
from .contract import tril
from .elementwise import add, mul, sub
from .linalg import matmul
from .shape import getitem, reshape, transpose, unsqueeze

__all__ = ["matrix_exp"]

_TAYLOR_DEGREE = 18


def _square_float(A, what: str) -> Tensor:
    if not isinstance(A, Tensor):
        raise TypeError(f"{what}: expected a tiletrain Tensor, got {type(A).__name__}")
    if not is_float(A.dtype):
        raise TypeError(f"{what}: expected a floating point tensor, got {A.dtype}")
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"{what}: The input tensor A must be a batch of square matrices, got shape {A.shape}")
    return A


def matrix_exp(A: Tensor) -> Tensor:
    """torch.matrix_exp: exp(A) = sum A^k / k! for each matrix of A (..., n, n), by scaling
    and squaring with a Taylor polynomial (recorded ops: differentiable)."""
    A = _square_float(A, "linalg.matrix_exp")
    n = A.shape[-1]
    if n == 0 or A.numel() == 0:
        return A.detach().clone() if not A.requires_grad else mul(A, 0.0)
    norm1 = float(np.abs(A.numpy(force=True)).sum(axis=-2).max(initial=0.0))
    s = max(0, math.ceil(math.log2(norm1)) + 1) if norm1 > 0 else 0
    X = mul(A, 1.0 / 2 ** s) if s else A
    ident = eye(n, dtype=A.dtype)
    P = add(ident, mul(X, 1.0 / _TAYLOR_DEGREE))  # Horner: I + X/k (I + X/(k+1) (...))
    for k in range(_TAYLOR_DEGREE - 1, 0, -1):
        P = add(ident, mul(matmul(X, P), 1.0 / k))
    for _ in range(s):
        P = matmul(P, P)
    return P


def _solve_host(a: np.ndarray, b: np.ndarray, vector: bool) -> np.ndarray:
    try:
        return np.linalg.solve(a, b[..., None])[..., 0] if vector else np.linalg.solve(a, b)
    except np.linalg.LinAlgError:
        raise RuntimeError("linalg.solve: The solver failed because the input matrix is singular.") from None


def solve(A: Tensor, B: Tensor, *, left: bool = True, out=None) -> Tensor:
    """torch.linalg.solve: X with A X = B for A (..., n, n) and B (..., n, k) of the same
    batch shape, or B a vector (n,) / (..., n) (batch of vectors); left=False: X A = B."""
    what = "linalg.solve"
    A = _square_float(A, what)
    if out is not None:
        raise NotImplementedError(f"{what}: out= is not supported; use the return value")
    if not isinstance(B, Tensor) or B.dtype != A.dtype:
        raise TypeError(f"{what}: B must be a tiletrain Tensor of A's dtype {A.dtype}, got "
                        f"{getattr(B, 'dtype', type(B).__name__)}")
    if not left:
        return transpose(solve(transpose(A, -2, -1), transpose(B, -2, -1)), -2, -1)
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))
    if vector and B.ndim == 1 and A.ndim > 2:
        raise NotImplementedError(f"{what}: a vector B with a batch of matrices A (broadcasting) is not supported")
    if not vector and (B.ndim != A.ndim or B.shape[:-2] != A.shape[:-2] or B.shape[-2] != A.shape[-1]):
        raise RuntimeError(f"{what}: Incompatible shapes of A and B for the equation AX = B ({A.shape} and "
                           f"{B.shape}); batch shapes that broadcast are not supported")
    if vector and B.shape[-1] != A.shape[-1]:
        raise RuntimeError(f"{what}: Incompatible shapes of A and B for the equation AX = B ({A.shape} and {B.shape})")
    X = from_numpy(np.ascontiguousarray(_solve_host(A.numpy(force=True), B.numpy(force=True), vector)))
    return record("linalg_solve", X, (A, B), saved=(A, X), vector=vector)


@backward_rule("linalg_solve", differentiable=True)
def _solve_bwd(node, g):
    """gB = A^-T g, gA = -gB X^T (an outer product for vectors)."""
    A, X = node.saved
    gB = solve(transpose(A, -2, -1), g)
    gA = None
    if node.inputs[0] is not None:
        if node.ctx["vector"]:
            gA = mul(matmul(unsqueeze(gB, -1), unsqueeze(X, -2)), -1.0)
        else:
            gA = mul(matmul(gB, transpose(X, -2, -1)), -1.0)
    return gA, gB if node.inputs[1] is not None else None


def householder_product(A: Tensor, tau: Tensor, *, out=None) -> Tensor:
    """torch.linalg.householder_product: the first n columns of H_1 ... H_k for A (..., m, n)
    and tau (..., k), H_i = I - tau_i v_i v_i^T, v_i the i-th column of A below the diagonal
    with a 1 on it (what is above and on the diagonal is not read).  Recorded ops."""
    what = "linalg.householder_product"
    if out is not None:
        raise NotImplementedError(f"{what}: out= is not supported; use the return value")
    if not isinstance(A, Tensor) or not isinstance(tau, Tensor) or not is_float(A.dtype) or tau.dtype != A.dtype:
        raise TypeError(f"{what}: A and tau must be floating point tiletrain Tensors of one dtype")
    if A.ndim < 2 or A.shape[-2] < A.shape[-1]:
        raise RuntimeError(f"{what}: input.shape[-2] must be greater than or equal to input.shape[-1], got {A.shape}")
    m, n = A.shape[-2:]
    k = tau.shape[-1] if tau.ndim else -1
    if tau.ndim != A.ndim - 1 or tau.shape[:-1] != A.shape[:-2] or k > n:
        raise RuntimeError(f"{what}: tau of shape {tau.shape} does not fit input of shape {A.shape} (expected "
                           f"{tuple(A.shape[:-2]) + ('k <= ' + str(n),)})")
    V = add(tril(A, -1), eye(m, n, dtype=A.dtype))
    Q = eye(m, n, dtype=A.dtype)
    batch = (slice(None),) * (A.ndim - 2)
    for i in range(k - 1, -1, -1):
        v = getitem(V, batch + (slice(None), slice(i, i + 1)))                  # (..., m, 1)
        t = reshape(getitem(tau, batch + (slice(i, i + 1),)), tuple(A.shape[:-2]) + (1, 1))
        w = matmul(transpose(v, -2, -1), Q)                                      # (..., 1, n)
        Q = sub(Q, mul(t, matmul(v, w)))
    return Q
