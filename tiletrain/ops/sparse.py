"""CSR sparse matrices on tiles: ``tt.sparse_csr_tensor(crow_indices, col_indices, values,
size)``, ``Tensor.to_sparse_csr()``, ``.to_dense()`` and ``tt.sparse.mm(A, X)`` / ``A @ X``
with gradients for X and for A's values (torch's names and meaning).

A (N, M) is tiled by row blocks x column blocks, each tile a CSR block of its own (row
pointers from 0, column indices within the block): three tiled tensors with one tile per
block, ``rowptr`` (nblocks, rb + 1), ``cols`` and the blocked values (nblocks, L), L the
largest block's entry count (smaller blocks padded; the kernels read the true count from
rowptr).  The blocked values are ``index_select(values, 0, perm)`` of the user's values, so
their gradient reaches ``values`` through index_select's backward; ``csr_from_coo`` (a new
matrix every step: geometric's adjacency) lays them out on the host instead.  The products are task
lists (csrc/expand_tasks.c): y tile (i, j) = sum over the non-empty blocks (i, k) of
A_ik x_kj, in k order (deterministic); dX = A^T dY likewise; d(values) per block (SDDMM)."""
from __future__ import annotations

import numbers

import numpy as np

from ..runtime.host import coo_block_layout as host_coo_block_layout
from ..runtime.host import csr_block_layout
from ..runtime.kernels import run_tasks
from ..tensors import Tensor, TensorTraits, from_numpy
from .autograd import backward_rule, double_backward_rule, record
from .basic import _float_tensor
from .creation import zeros
from .index import _Index, index_add, index_select
from .shape import reshape, retile

DEFAULT_BLOCK = 4096  # rows (and columns) per CSR block unless the caller says otherwise


def _ints(a, what: str, name: str) -> np.ndarray:
    if isinstance(a, Tensor):
        if a.dtype != np.int64:
            raise TypeError(f"{what}: {name} must be int64, got {a.dtype}")
        a = a.numpy(force=True)
    elif isinstance(a, np.ndarray):
        if a.dtype.kind not in "iu":
            raise TypeError(f"{what}: {name} must hold integers, got {a.dtype}")
        a = a.astype(np.int64)
    else:
        raise TypeError(f"{what}: {name} must be an int64 Tensor or NumPy array, got {type(a).__name__}")
    if a.ndim != 1:
        raise ValueError(f"{what}: {name} must be 1-D, got shape {a.shape}")
    return a


def block_grid(shape, blocks) -> tuple[tuple[int, int], tuple[int, int]]:
    """The blocks (rb, cb) of an (N, M) matrix, each at most its axis (at least 1), and the
    grid of blocks they make (at least one per axis)."""
    (N, M), (rb, cb) = shape, (max(1, min(int(b), max(s, 1))) for b, s in zip(blocks, shape))
    return (rb, cb), (max(1, -(-N // rb)), max(1, -(-M // cb)))


class SparseCSRTensor:
    """A (N, M) CSR matrix tiled by row blocks x column blocks (``blocks`` = (rb, cb))."""

    layout = "sparse_csr"

    def __init__(self, crow: np.ndarray, col: np.ndarray, values: Tensor | np.ndarray | None, size, blocks,
                 dtype=None, layout=None):
        """``values``: a tiletrain Tensor, or a NumPy array uploaded as one (in ``dtype``) when
        first needed (``values()``, a gradient, a product without host-laid-out blocked
        values); None: no entries.  ``dtype``: the matrix's type (default: the values').
        ``layout``: csr_block_layout's result when the caller has it already."""
        self.shape = tuple(int(s) for s in size)
        self.dtype = np.dtype(dtype) if dtype is not None else np.dtype(values.dtype)
        self._crow, self._col = crow, col
        self._host_values = values if isinstance(values, np.ndarray) else None
        self._values_t = None if isinstance(values, np.ndarray) else values
        self.blocks, self.grid = block_grid(self.shape, blocks)
        self.block_nnz, self.L, perm, cols, rowptr = layout or csr_block_layout(crow, col, self.shape, self.blocks,
                                                                                  self.grid)
        self._rowptr = from_numpy(rowptr, (1, self.blocks[0] + 1))
        self._cols = from_numpy(cols, (1, self.L))
        # the blocked values' index into the user's (padding slots: 0); its tensor made when first used
        self._perm_a = perm.reshape(-1) if len(col) else None
        self._perm_t = None
        self._bv = None  # the blocked values, kept while the values need no gradient
        self._plans = {}  # the products' task tables by source width (_chain_tasks)

    @property
    def _values(self) -> Tensor | None:
        if self._values_t is None and self._host_values is not None:
            self._values_t = from_numpy(self._host_values.astype(self.dtype, copy=False))
        return self._values_t

    @property
    def _perm(self) -> _Index | None:
        if self._perm_t is None and self._perm_a is not None:
            self._perm_t = _Index(from_numpy(self._perm_a, (self.L,)), self._perm_a)  # given its values: read once
        return self._perm_t

    def _values_need_grad(self) -> bool:
        return self._values_t is not None and self._values_t.requires_grad

    # -- torch's accessors ----------------------------------------------------------------
    def crow_indices(self) -> Tensor:
        return from_numpy(self._crow)

    def col_indices(self) -> Tensor:
        return from_numpy(self._col)

    def values(self) -> Tensor:
        return self._values

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return 2

    @property
    def ndim(self) -> int:
        return 2

    def _nnz(self) -> int:
        return len(self._col)

    def __repr__(self) -> str:
        return (f"tiletrain.sparse_csr_tensor(size={self.shape}, nnz={self._nnz()}, dtype={self.dtype}, "
                f"blocks={self.blocks})")

    # -- conversions and products -------------------------------------------------------------
    def to_dense(self) -> Tensor:
        """The dense (N, M) matrix (differentiable in the values)."""
        N, M = self.shape
        flat = zeros((N * M,), dtype=self.dtype)
        if self._nnz():
            rows = np.repeat(np.arange(N, dtype=np.int64), np.diff(self._crow))
            flat = index_add(flat, 0, from_numpy(rows * M + self._col), self._values)
        return reshape(flat, N, M)

    def blocked_values(self) -> Tensor:
        """The values in the blocked layout (nblocks, L), tiled (1, L)."""
        gr, gc = self.grid
        if self._perm_a is None:
            return zeros((gr * gc, self.L), dtype=self.dtype, tiles=(1, self.L))
        if self._bv is not None and not self._values_need_grad():
            return self._bv
        bv = reshape(index_select(self._values, 0, self._perm), gr * gc, self.L)
        self._bv = None if self._values_need_grad() else bv
        return bv

    def __matmul__(self, other):
        return mm(self, other) if isinstance(other, Tensor) else NotImplemented

    def matmul(self, other):
        return mm(self, other)


def sparse_csr_tensor(crow_indices, col_indices, values, size=None, *, dtype=None, blocks=None,
                      requires_grad: bool = False) -> SparseCSRTensor:
    """torch.sparse_csr_tensor: a (N, M) CSR matrix from its row pointers (N + 1), column
    indices and values (nnz each).  ``size`` defaults to (N, largest column + 1); ``blocks``
    (rb, cb) sets the tiling (default: up to 4096 x 4096 per block)."""
    what = "sparse_csr_tensor"
    crow, col = _ints(crow_indices, what, "crow_indices"), _ints(col_indices, what, "col_indices")
    empty_dtype = None
    if isinstance(values, np.ndarray):
        values = values.astype(dtype if dtype is not None else values.dtype)  # a copy: torch copies too
        if values.dtype not in (np.float32, np.float64):
            raise TypeError(f"{what}: values must be float32 or float64, got {values.dtype}")
        if values.size == 0:  # no entries (tiletrain tensors have no empty axes): no values tensor
            empty_dtype, values = values.dtype, None
        elif requires_grad:
            values = from_numpy(values)
        # else kept on the host: uploaded when first needed (SparseCSRTensor._values)
    elif values is not None:
        _float_tensor(values, what, "values")
    if values is not None:
        if values.ndim != 1:
            raise ValueError(f"{what}: values must be 1-D (nnz,), got shape {values.shape}")
    nvals = values.shape[0] if values is not None else 0
    if len(crow) < 1 or crow[0] != 0 or (np.diff(crow) < 0).any():
        raise ValueError(f"{what}: crow_indices must start at 0 and never decrease")
    if crow[-1] != len(col) or len(col) != nvals:
        raise ValueError(f"{what}: crow_indices[-1] = {int(crow[-1])}, {len(col)} col_indices and "
                         f"{nvals} values: all three must equal nnz")
    N = len(crow) - 1
    if size is None:
        size = (N, int(col.max()) + 1 if len(col) else 0)
    size = tuple(size)
    if len(size) != 2 or not all(isinstance(s, numbers.Integral) and s >= 0 for s in size):
        raise ValueError(f"{what}: size must be (rows, columns), got {size}")
    if size[0] != N:
        raise ValueError(f"{what}: size has {size[0]} rows, crow_indices describes {N}")
    if len(col) and (col.min() < 0 or col.max() >= size[1]):
        k = int(np.argmax((col < 0) | (col >= size[1])))
        raise IndexError(f"{what}: col_indices[{k}] = {int(col[k])} is out of range for {size[1]} columns")
    if requires_grad and values is not None:
        values.requires_grad_()
    blocks = blocks if blocks is not None else (DEFAULT_BLOCK, DEFAULT_BLOCK)
    return SparseCSRTensor(crow, col, values, size, blocks, dtype=empty_dtype)


def csr_from_coo(row, col, values: np.ndarray, size, blocks, dtype) -> SparseCSRTensor:
    """The (N, M) CSR matrix of a COO list: entry values[k] at (row[k], col[k]), duplicates
    summed by the products, tiled ``blocks``.  Its CSR order (by row, column, then input
    order), blocked layout and blocked values are laid out on the host by C in two calls
    (runtime.host.coo_block_layout, which checks the indices), with no task: for builders of
    a new matrix every step (geometric.nn.adjacency).  ``values`` (NumPy) stay on the host
    until something needs them as a tensor."""
    shape = tuple(int(s) for s in size)
    dtype = np.dtype(dtype)
    (rb, cb), grid = block_grid(shape, blocks)
    crow, ccol, cvals, layout, bv = host_coo_block_layout(row, col, np.asarray(values), shape, (rb, cb), grid, dtype)
    A = SparseCSRTensor(crow, ccol, cvals if len(ccol) else None, shape, (rb, cb), dtype=dtype, layout=layout)
    if len(ccol):
        A._bv = from_numpy(bv, (1, A.L))
    return A


def to_sparse_csr(x: Tensor, blocks=None) -> SparseCSRTensor:
    """Tensor.to_sparse_csr: the nonzeros of a 2-D tensor as a CSR matrix (values
    differentiable), blocked like x's tiles unless ``blocks`` is given."""
    what = "to_sparse_csr"
    _float_tensor(x, what, "x")
    if x.ndim != 2:
        raise ValueError(f"{what}: x must be 2-D, got shape {x.shape}")
    a = x.numpy(force=True)
    rows, cols = np.nonzero(a)
    N, M = x.shape
    crow = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=N))]).astype(np.int64)
    flat = (rows * M + cols).astype(np.int64)
    values = index_select(reshape(x, N * M), 0, from_numpy(flat)) if len(flat) else None
    return SparseCSRTensor(crow, cols.astype(np.int64), values, (N, M), blocks or x.tiles, dtype=x.dtype)


# ---- the product --------------------------------------------------------------------------

def _chains(mask: np.ndarray):
    """For a (G, K) bool mask of non-empty blocks: (g, k, first) for every chain g over its
    non-empty k in order (k = 0 for a g with none: it only writes zeros)."""
    mask = mask.copy()
    mask[~mask.any(axis=1), 0] = True
    g, k = np.nonzero(mask)
    first = np.ones(len(g), bool)
    first[1:] = g[1:] != g[:-1]
    return g, k, first


def _sizes(n: int, t: int, grid: int) -> np.ndarray:
    return np.minimum(t, n - np.arange(grid) * t)


def mm(A: SparseCSRTensor, X: Tensor) -> Tensor:
    """torch.sparse.mm: A (N, M) CSR @ X (M, F) dense -> (N, F), tiled (A's row block, X's
    column tile); gradients for X and for A's values."""
    what = "sparse.mm"
    if not isinstance(A, SparseCSRTensor):
        raise TypeError(f"{what}: A must be a sparse CSR tensor (tiletrain.sparse_csr_tensor), got "
                        f"{type(A).__name__}")
    _float_tensor(X, what, "X")
    if X.ndim != 2 or X.shape[0] != A.shape[1]:
        raise ValueError(f"{what}: X must be ({A.shape[1]}, F) for A of shape {A.shape}, got {X.shape}")
    if X.dtype != A.dtype:
        raise TypeError(f"{what}: A is {A.dtype}, X {X.dtype}: they must match")
    rb, cb = A.blocks
    tf = X.tiles[1]
    Xa = retile(X, (min(cb, max(X.shape[0], 1)), tf)) if X.tiles[0] != cb else X
    bv = A.blocked_values()
    N, F = A.shape[0], X.shape[1]
    Y = Tensor(TensorTraits((N, F), (min(rb, max(N, 1)), tf)), X.dtype)
    if N and F:
        _mm_tasks(A, bv.detach() if bv.requires_grad else bv, Xa.detach() if Xa.requires_grad else Xa, Y)
    else:
        Y = zeros((N, F), dtype=X.dtype)
    return record("sparse_mm", Y, (bv, Xa), saved=(bv, Xa), A=A)


def _mm_tasks(A, bv, x, y) -> None:
    """y = A x: per row block i, chains over the column blocks k."""
    _chain_tasks("csr_mm", A, bv, x, y, transpose=False)


def _mm_t_tasks(A, bv, g, dx) -> None:
    """dx = A^T g: per column block k, chains over the row blocks i."""
    _chain_tasks("csr_mm_t", A, bv, g, dx, transpose=True)


def _chain_tasks(kernel: str, A, bv, src, dst, transpose: bool) -> None:
    """One task per (non-empty block, column tile j of src), chained per destination tile:
    A's row block i and column block k, src tile (k, j) into dst tile (i, j) -- (i, j) into
    (k, j) when transposed; each chain's first task writes, the others accumulate."""
    gf = -(-src.shape[1] // src.tiles[1])
    key = (transpose, gf, src.tiles[1], src.shape[1])
    plan = A._plans.get(key)
    if plan is None:  # the same for every product with A of this width: the layers of a GNN share it
        plan = A._plans[key] = _chain_plan(A, transpose, gf, src.shape[1], src.tiles[1])
    tiles, args = plan
    run_tasks(kernel, [A._rowptr, A._cols, bv, src, dst], tiles, alpha=1.0, **args)


def _chain_plan(A, transpose: bool, gf: int, width: int, tile: int):
    """_chain_tasks' tile table and per-task arguments for A and a source of ``gf`` column
    tiles of ``tile`` (``width`` columns in all)."""
    gr, gc = A.grid
    N, M = A.shape
    mask = A.block_nnz.reshape(gr, gc) > 0
    out, inner, _ = _chains(mask.T if transpose else mask)
    out, inner = (np.repeat(a, gf) for a in (out, inner))
    j = np.tile(np.arange(gf), len(out) // gf)
    order = np.lexsort((inner, j, out))  # each destination tile's chain together, in order
    out, inner, j = out[order], inner[order], j[order]
    first = np.ones(len(out), bool)
    first[1:] = (out[1:] != out[:-1]) | (j[1:] != j[:-1])
    i, k = (inner, out) if transpose else (out, inner)
    blk = i * gc + k
    s_tile, d_tile = (i * gf + j, k * gf + j) if transpose else (k * gf + j, i * gf + j)
    return np.stack([blk, blk, blk, s_tile, d_tile], axis=1), dict(
        wmask=first.astype(np.int64) << 4, mr=_sizes(N, A.blocks[0], gr)[i], nc=_sizes(M, A.blocks[1], gc)[k],
        nx=_sizes(width, tile, gf)[j], first=first.astype(np.int64), nnz=A.block_nnz[blk].astype(np.float64))


def _sddmm_tasks(A, g, x, dbv) -> None:
    """d(values) = (g x^T) at A's entries, per block: chains over the column tiles of g and x."""
    gr, gc = A.grid
    N, M = A.shape
    gf = -(-g.shape[1] // g.tiles[1])
    blk = np.repeat(np.arange(gr * gc), gf)
    j = np.tile(np.arange(gf), gr * gc)
    i, k = blk // gc, blk % gc
    run_tasks("csr_sddmm", [A._rowptr, A._cols, g, x, dbv],
              np.stack([blk, blk, i * gf + j, k * gf + j, blk], axis=1), wmask=(j == 0).astype(np.int64) << 4,
              mr=_sizes(N, A.blocks[0], gr)[i], nc=_sizes(M, A.blocks[1], gc)[k],
              nx=_sizes(g.shape[1], g.tiles[1], gf)[j], nv=A.L, first=(j == 0).astype(np.int64),
              nnz=A.block_nnz[blk].astype(np.float64))


@backward_rule("sparse_mm")
def _sparse_mm_bwd(node, g):
    bv, x = node.saved
    A = node.ctx["A"]
    dbv = dx = None
    if node.inputs[1] is not None:
        dx = Tensor(x.traits, g.dtype)
        _mm_t_tasks(A, bv, g, dx)
    if node.inputs[0] is not None:
        dbv = Tensor(bv.traits, g.dtype)
        _sddmm_tasks(A, g, x, dbv)
    return (dbv, dx)


# Double backward.  Y = A(values) X is bilinear; its gradients A^T g (sparse_mm_t) and the
# SDDMM (sparse_sddmm) are bilinear too, and the three are each other's adjoints: each one's
# gradients are recorded calls of the other two.
def _rec(op: str, out: Tensor, a: Tensor, b: Tensor, A) -> Tensor:
    return record(op, out, (a, b), saved=(a, b), A=A)


def _mm_rec(A, bv, x, traits) -> Tensor:
    y = Tensor(traits, x.dtype)
    _mm_tasks(A, bv, x, y)
    return _rec("sparse_mm", y, bv, x, A)


def _mm_t_rec(A, bv, g, traits) -> Tensor:
    dx = Tensor(traits, g.dtype)
    _mm_t_tasks(A, bv, g, dx)
    return _rec("sparse_mm_t", dx, bv, g, A)


def _sddmm_rec(A, g, x, traits) -> Tensor:
    dbv = Tensor(traits, g.dtype)
    _sddmm_tasks(A, g, x, dbv)
    return _rec("sparse_sddmm", dbv, g, x, A)


@double_backward_rule("sparse_mm")
def _sparse_mm_double(node, g):
    (bv, x), A = node.saved, node.ctx["A"]
    return (_sddmm_rec(A, g, x, bv.traits) if node.inputs[0] is not None else None,
            _mm_t_rec(A, bv, g, x.traits) if node.inputs[1] is not None else None)


@backward_rule("sparse_mm_t", differentiable=True)
def _sparse_mm_t_bwd(node, h):
    (bv, g), A = node.saved, node.ctx["A"]
    return (_sddmm_rec(A, g, h, bv.traits) if node.inputs[0] is not None else None,
            _mm_rec(A, bv, h, g.traits) if node.inputs[1] is not None else None)


@backward_rule("sparse_sddmm", differentiable=True)
def _sparse_sddmm_bwd(node, h):
    (g, x), A = node.saved, node.ctx["A"]
    return (_mm_rec(A, h, x, g.traits) if node.inputs[0] is not None else None,
            _mm_t_rec(A, h, g, x.traits) if node.inputs[1] is not None else None)


__all__ = ["SparseCSRTensor", "mm", "sparse_csr_tensor", "to_sparse_csr"]
