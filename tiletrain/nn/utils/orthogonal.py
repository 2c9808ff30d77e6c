"""torch.nn.utils.parametrizations.orthogonal: a matrix (or a batch of them) parametrized as
an orthogonal one (orthonormal columns when it is tall, rows when it is wide), by the
matrix exponential or the Cayley map of a skew-symmetric matrix, or by a product of
Householder reflectors, with torch's dynamic trivialization (the buffer ``base``) by
default.  The forward maps are recorded ops (tiletrain.linalg's matrix_exp, solve,
householder_product: for small matrices); the right inverses (orthogonalising a matrix by
QR with a non-negative diagonal of R, geqrf's reflectors) run on the host with NumPy."""
from __future__ import annotations

from enum import Enum, auto

import numpy as np

from ...linalg import householder_product, matrix_exp, solve
from ...ops import add, cat, mul, no_grad, sub
from ...ops.creation import randn
from ...tensors import Tensor, from_numpy
from ..module import Module
from .parametrize import register_parametrization

__all__ = ["orthogonal"]


class _OrthMaps(Enum):
    matrix_exp = auto()
    cayley = auto()
    householder = auto()


def _host(a: np.ndarray, like: Tensor) -> Tensor:
    return from_numpy(np.ascontiguousarray(a)).to(like.dtype)


def _make_orthogonal(a: np.ndarray) -> np.ndarray:
    """The Q of a = QR (a tall) with R's diagonal made non-negative (torch's sign fix)."""
    q, r = np.linalg.qr(a)
    return q * np.sign(np.diagonal(r, axis1=-2, axis2=-1))[..., None, :]


def _geqrf(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LAPACK's geqrf: R on and above the diagonal, the reflectors' vectors (unit first entry
    implied) below it, and their tau, for each matrix of a (..., m, n), m >= n."""
    a = np.array(a, copy=True)
    m, n = a.shape[-2:]
    flat = a.reshape(-1, m, n)
    taus = np.zeros((flat.shape[0], n), a.dtype)
    for b in range(flat.shape[0]):
        r = flat[b]
        for j in range(n):
            alpha, x = r[j, j], r[j + 1:, j]
            xnorm = np.linalg.norm(x)
            if xnorm == 0.0:
                continue
            beta = -np.copysign(np.hypot(alpha, xnorm), alpha)
            taus[b, j] = (beta - alpha) / beta
            r[j + 1:, j] = x / (alpha - beta)
            r[j, j] = beta
            v = np.concatenate([[1.0], r[j + 1:, j]]).astype(a.dtype)
            r[j:, j + 1:] -= taus[b, j] * np.outer(v, v @ r[j:, j + 1:])
    return flat.reshape(a.shape), taus.reshape(a.shape[:-2] + (n,))


class _Orthogonal(Module):
    def __init__(self, weight: Tensor, orthogonal_map: _OrthMaps, *, use_trivialization: bool = True) -> None:
        super().__init__()
        self.shape = tuple(weight.shape)
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def _skew(self, X: Tensor, n: int, k: int) -> Tensor:
        """X's lower triangle padded to n x n, minus its transpose."""
        X = X.tril()
        if n != k:
            X = cat([X, _host(np.zeros(tuple(X.shape[:-2]) + (n, n - k)), X)], -1)
        return sub(X, X.mT)

    def forward(self, X: Tensor) -> Tensor:
        n, k = X.shape[-2], X.shape[-1]
        transposed = n < k
        if transposed:
            X, n, k = X.mT, k, n
        if self.orthogonal_map in (_OrthMaps.matrix_exp, _OrthMaps.cayley):
            A = self._skew(X, n, k)
            if self.orthogonal_map == _OrthMaps.matrix_exp:
                Q = matrix_exp(A)
            else:
                Id = _host(np.eye(n), A)
                Q = solve(add(Id, A, alpha=-0.5), add(Id, A, alpha=0.5))
            if n != k:
                Q = Q[..., :k]
        else:
            A = X.tril(diagonal=-1)
            tau = 2.0 / ((A * A).sum(dim=-2) + 1.0)
            Q = householder_product(A, tau)
            diag = np.trunc(np.diagonal(X.numpy(force=True), axis1=-2, axis2=-1))  # torch's .int()
            Q = mul(Q, _host(diag[..., None, :], Q))
        if "base" in self._buffers:
            Q = self.base @ Q
        return Q.mT if transposed else Q

    def right_inverse(self, Q: Tensor) -> Tensor:
        with no_grad():
            return self._right_inverse(Q)

    def _right_inverse(self, Q: Tensor) -> Tensor:
        if tuple(Q.shape) != self.shape:
            raise ValueError(f"Expected a matrix or batch of matrices of shape {self.shape}. Got a tensor of shape "
                             f"{tuple(Q.shape)}.")
        Q_init = Q
        n, k = Q.shape[-2], Q.shape[-1]
        if n < k:
            Q, n, k = Q.mT, k, n
        q = Q.numpy(force=True)
        if "base" not in self._buffers:
            if self.orthogonal_map != _OrthMaps.householder:
                raise NotImplementedError("It is not possible to assign to the matrix exponential or the Cayley "
                                          "parametrizations when use_trivialization=False.")
            a, tau = _geqrf(q)
            d = np.sign(np.diagonal(a, axis1=-2, axis2=-1)) * np.where(tau == 0.0, -1.0, 1.0)
            idx = np.arange(k)
            a[..., idx, idx] = d
            A = _host(a, Q)
            return A.mT if Q_init.shape[-2] < Q_init.shape[-1] else A
        if n == k:
            eye, eps = np.eye(k), 10.0 * n * np.finfo(q.dtype).eps
            base = q.copy() if np.allclose(np.swapaxes(q, -1, -2) @ q, eye, rtol=1e-5, atol=eps) else _make_orthogonal(q)
        else:
            N = randn(*(tuple(Q.shape[:-2]) + (n, n - k)), dtype=Q.dtype).numpy(force=True)
            base = _make_orthogonal(np.concatenate([q, N], axis=-1))
        self.base = _host(base, Q)
        neg_id = np.zeros(tuple(Q_init.shape))
        idx = np.arange(min(Q_init.shape[-2:]))
        neg_id[..., idx, idx] = -1.0
        return _host(neg_id, Q)


def orthogonal(module: Module, name: str = "weight", orthogonal_map: str | None = None, *,
               use_trivialization: bool = True) -> Module:
    """torch.nn.utils.parametrizations.orthogonal: ``module.<name>`` (..., m, n) kept
    orthogonal; orthogonal_map "matrix_exp" (the default for a square matrix), "cayley" or
    "householder" (the default otherwise).  Returns the module."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if weight.ndim < 2:
        raise ValueError(f"Expected a matrix or batch of matrices. Got a tensor of {weight.ndim} dimensions.")
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.shape[-2] == weight.shape[-1] else "householder"
    orth_enum = getattr(_OrthMaps, orthogonal_map, None) if isinstance(orthogonal_map, str) else None
    if orth_enum is None:
        raise ValueError('orthogonal_map has to be one of "matrix_exp", "cayley", "householder". '
                         f"Got: {orthogonal_map}")
    register_parametrization(module, name, _Orthogonal(weight, orth_enum, use_trivialization=use_trivialization),
                             unsafe=True)
    return module
