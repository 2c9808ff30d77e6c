"""CSR sparse tensors (tiletrain/ops/sparse.py) against torch: sparse_csr_tensor, to_dense,
Tensor.to_sparse_csr, tt.sparse.mm(A, X) and A @ X with gradients for X and for A's values
(float64 to 1e-12, float32 forward), on block grids with smaller last blocks, empty rows
and empty blocks; bad input rejected before any task."""
import numpy as np
import pytest
import torch

import tiletrain as tt
from conftest import FLOATS, submits_nothing, tol

# torch says its CSR support is beta and its invariant checks are off: not about tiletrain
pytestmark = pytest.mark.filterwarnings("ignore:Sparse:UserWarning")


def _random_csr(rng, N, M, density, empty_rows=()):
    d = (rng.random((N, M)) < density) * rng.standard_normal((N, M))
    d[list(empty_rows)] = 0
    t = torch.from_numpy(d).to_sparse_csr()
    return d, t.crow_indices().numpy(), t.col_indices().numpy(), t.values().numpy()


# (N, M, F, blocks, X tiles)
CASES = [
    (6, 5, 3, (6, 5), (5, 3)),           # one block
    (8, 6, 4, (4, 3), (3, 2)),           # even block grid, X tiled like A's columns
    (11, 7, 5, (4, 3), (4, 2)),          # smaller last blocks; X retiled
    (13, 13, 6, (5, 4), (13, 6)),        # square (a graph), X one tile
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("N,M,F,blocks,xt", CASES)
def test_sparse_mm_forward(rng, N, M, F, blocks, xt, dtype):
    d, crow, col, val = _random_csr(rng, N, M, 0.3, empty_rows=(1, N - 1))
    A = tt.sparse_csr_tensor(tt.from_numpy(crow), tt.from_numpy(col), tt.from_numpy(val.astype(dtype)), (N, M),
                             blocks=blocks)
    x = rng.standard_normal((M, F)).astype(dtype)
    X = tt.from_numpy(x, xt)
    ref = d @ x.astype(np.float64)
    np.testing.assert_allclose(tt.sparse.mm(A, X).numpy(), ref, **tol(dtype))
    np.testing.assert_allclose((A @ X).numpy(), ref, **tol(dtype))
    np.testing.assert_allclose(A.to_dense().numpy(), d, **tol(dtype))
    assert A.shape == (N, M) and A.layout == "sparse_csr"
    np.testing.assert_array_equal(A.crow_indices().numpy(), crow)
    np.testing.assert_array_equal(A.col_indices().numpy(), col)


@pytest.mark.parametrize("N,M,F,blocks,xt", CASES)
def test_sparse_mm_backward(rng, N, M, F, blocks, xt):
    d, crow, col, val = _random_csr(rng, N, M, 0.3, empty_rows=(0,))
    x, g = rng.standard_normal((M, F)), rng.standard_normal((N, F))
    V = tt.from_numpy(val).requires_grad_()
    A = tt.sparse_csr_tensor(crow, col, V, (N, M), blocks=blocks)
    X = tt.from_numpy(x, xt).requires_grad_()
    Y = A @ X
    (Y * tt.from_numpy(g, Y.tiles)).sum().backward()
    vt = torch.from_numpy(val.copy()).requires_grad_()
    At = torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(col), vt, (N, M))
    xt_ = torch.from_numpy(x.copy()).requires_grad_()
    (torch.sparse.mm(At, xt_) * torch.from_numpy(g)).sum().backward()
    np.testing.assert_allclose(X.grad.numpy(), xt_.grad.numpy(), rtol=1e-12, atol=1e-12)
    # torch gives the values' gradient as a sparse tensor of A's pattern
    vgrad = vt.grad.values().numpy() if vt.grad.layout != torch.strided else vt.grad.numpy()
    np.testing.assert_allclose(V.grad.numpy(), vgrad, rtol=1e-12, atol=1e-12)


def test_to_sparse_csr_round_trip_and_gradient(rng):
    d = (rng.random((9, 7)) < 0.4) * rng.standard_normal((9, 7))
    D = tt.from_numpy(d, (4, 3)).requires_grad_()
    A = D.to_sparse_csr()
    t = torch.from_numpy(d).to_sparse_csr()
    np.testing.assert_array_equal(A.crow_indices().numpy(), t.crow_indices().numpy())
    np.testing.assert_array_equal(A.col_indices().numpy(), t.col_indices().numpy())
    np.testing.assert_array_equal(A.values().detach().numpy(), t.values().numpy())
    assert A.blocks == (4, 3)
    np.testing.assert_array_equal(A.to_dense().detach().numpy(), d)
    x = rng.standard_normal((7, 2))
    (A @ tt.from_numpy(x)).sum().backward()
    dt = torch.from_numpy(d).requires_grad_()
    torch.sparse.mm(dt.to_sparse_csr(), torch.from_numpy(x)).sum().backward()
    np.testing.assert_allclose(D.grad.numpy(), dt.grad.to_dense().numpy(), rtol=1e-12, atol=1e-12)


def test_empty_matrix_and_empty_blocks(rng):
    A = tt.sparse_csr_tensor(np.zeros(5, np.int64), np.zeros(0, np.int64), np.zeros(0), (4, 6), blocks=(2, 4))
    np.testing.assert_array_equal((A @ tt.from_numpy(rng.standard_normal((6, 3)))).numpy(), np.zeros((4, 3)))
    np.testing.assert_array_equal(A.to_dense().numpy(), np.zeros((4, 6)))


def test_bad_input_is_rejected_before_any_task(rng):
    crow, col, val = np.array([0, 1, 3]), np.array([0, 2, 1]), tt.from_numpy(np.ones(3))
    A = tt.sparse_csr_tensor(crow, col, val, (2, 3))
    X = tt.from_numpy(np.ones((4, 2)))
    X32 = tt.from_numpy(np.ones((3, 2), np.float32))
    tt.wait()
    with submits_nothing():
        with pytest.raises(IndexError, match="col_indices"):
            tt.sparse_csr_tensor(crow, np.array([0, 3, 1]), val, (2, 3))
        with pytest.raises(IndexError, match="col_indices"):
            tt.sparse_csr_tensor(crow, np.array([0, -1, 1]), val, (2, 3))
        with pytest.raises(ValueError, match="nnz"):
            tt.sparse_csr_tensor(np.array([0, 1, 2]), col, val, (2, 3))
        with pytest.raises(ValueError, match="never decrease"):
            tt.sparse_csr_tensor(np.array([0, 2, 1, 3]), col, val, (3, 3))
        with pytest.raises(TypeError, match="integers"):
            tt.sparse_csr_tensor(crow.astype(float), col, val, (2, 3))
        with pytest.raises(ValueError, match=r"X must be \(3, F\)"):
            tt.sparse.mm(A, X)
        with pytest.raises(TypeError, match="must match"):
            A @ X32
        with pytest.raises(TypeError, match="sparse CSR"):
            tt.sparse.mm(X, X)


def test_feature_dimension_tiling_one_task_per_block_and_column_tile(rng):
    """X tiled along the features: one csr_mm task per non-empty adjacency block and feature
    column tile (each reads one block and one column block), the same product as row tiling."""
    from tiletrain._ffi import lib
    d, crow, col, val = _random_csr(rng, 12, 12, 0.3, empty_rows=(3,))
    d[:, 6:][:6] = 0  # block (0, 1) empty
    t = torch.from_numpy(d).to_sparse_csr()
    A = tt.sparse_csr_tensor(t.crow_indices().numpy(), t.col_indices().numpy(), t.values().numpy(), (12, 12),
                             blocks=(6, 6))
    x = rng.standard_normal((12, 8))
    nonempty = sum(bool(d[i:i + 6, k:k + 6].any()) for i in (0, 6) for k in (0, 6))
    for ft, gf in ((8, 1), (2, 4), (3, 3)):
        X = tt.from_numpy(x, (6, ft))
        tt.wait()
        before = lib.tt_kernel_ntasks(lib.TT_K_CSR_MM)
        Y = A @ X
        assert lib.tt_kernel_ntasks(lib.TT_K_CSR_MM) - before == nonempty * gf
        assert Y.tiles == (6, ft)
        np.testing.assert_allclose(Y.numpy(), d @ x, rtol=1e-12, atol=1e-12)


def test_coo_to_csr_orders_like_lexsort(rng):
    """The C counting sort orders entries by row, then column, then input order (NumPy's
    lexsort((col, row))) and gives bincount's row pointers; out-of-range indices are refused."""
    from tiletrain.runtime.host import coo_to_csr
    for nrows, ncols, n in ((1, 1, 10), (7, 3, 1000), (70_000, 5, 5000), (3, 70_000, 2000), (5, 5, 0)):
        row, col = rng.integers(0, nrows, n), rng.integers(0, ncols, n)
        crow, perm = coo_to_csr(row, col, nrows, ncols)
        np.testing.assert_array_equal(perm, np.lexsort((col, row)))
        np.testing.assert_array_equal(crow, np.concatenate([[0], np.cumsum(np.bincount(row, minlength=nrows))]))
    with pytest.raises(ValueError, match="row index 5 of entry 1 is out of range for 5 rows"):
        coo_to_csr(np.array([0, 5]), np.array([0, 0]), 5, 5)
    with pytest.raises(ValueError, match="column index -1 of entry 0"):
        coo_to_csr(np.array([0]), np.array([-1]), 5, 5)


def _block_layout_reference(crow, col, shape, blocks):
    """The blocked layout in NumPy: entries per block by row, then in CSR order."""
    (N, M), (rb, cb) = shape, blocks
    gr, gc = max(1, -(-N // rb)), max(1, -(-M // cb))
    rows = np.repeat(np.arange(N), np.diff(crow))
    blk = (rows // rb) * gc + col // cb
    counts = np.bincount(blk, minlength=gr * gc)
    L = max(1, int(counts.max()) if len(col) else 1)
    perm, cols = np.zeros((gr * gc, L), np.int64), np.zeros((gr * gc, L), np.int64)
    rowptr = np.zeros((gr * gc, rb + 1), np.int64)
    for b in range(gr * gc):
        ks = np.flatnonzero(blk == b)  # CSR order is by row
        perm[b, :len(ks)], cols[b, :len(ks)] = ks, col[ks] % cb
        rowptr[b, 1:] = np.cumsum(np.bincount(rows[ks] % rb, minlength=rb))
    return counts, L, perm, cols, rowptr


def test_block_layout_equals_the_numpy_reference(rng):
    """csrc/layout.c's blocked layout of a CSR matrix (counts, L, slots, local columns and row
    pointers) equals a NumPy reference, for even and leftover blocks, one block, empty rows and
    columns and no entries at all; a bad CSR is refused."""
    from tiletrain.runtime.host import csr_block_layout as _block_layout
    for (N, M), (rb, cb), n in (((12, 9), (4, 3), 40), ((13, 10), (5, 4), 60), ((6, 6), (6, 6), 20),
                                ((50, 7), (8, 7), 0), ((9, 70_000), (4, 30_000), 200)):
        row, col = rng.integers(0, N, n), rng.integers(0, M, n)
        order = np.lexsort((col, row))
        crow = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=N))])
        grid = (max(1, -(-N // rb)), max(1, -(-M // cb)))
        got = _block_layout(crow, col[order], (N, M), (rb, cb), grid)
        want = _block_layout_reference(crow, col[order], (N, M), (rb, cb))
        assert got[1] == want[1]
        for g, w in zip(got[:1] + got[2:], want[:1] + want[2:]):
            np.testing.assert_array_equal(g, w)
    with pytest.raises(ValueError, match=r"col_indices\[1\] = 9 is out of range for 9 columns"):
        _block_layout(np.array([0, 2]), np.array([0, 9]), (1, 9), (1, 3), (1, 3))
    with pytest.raises(ValueError, match="crow_indices decrease at row 1"):
        _block_layout(np.array([0, 2, 1]), np.array([0, 1]), (2, 9), (1, 3), (2, 3))
    with pytest.raises(ValueError, match=r"crow_indices\[2\] = 3 is past the 2 entries"):
        _block_layout(np.array([0, 2, 3]), np.array([0, 1]), (2, 9), (1, 3), (2, 3))
    with pytest.raises(ValueError, match="3 crow_indices for 1 rows"):
        _block_layout(np.array([0, 2, 2]), np.array([0, 1]), (1, 9), (1, 3), (1, 3))


def test_csr_from_coo_equals_the_checked_construction(rng):
    """csr_from_coo (geometric's adjacency: CSR order, blocked layout and blocked values in C
    from a COO list) gives what coo_to_csr + sparse_csr_tensor give -- the same CSR arrays,
    layout and blocked values bit for bit, the same products -- with duplicates, empty rows and
    columns, leftover and single blocks, float32 and float64; bad indices are refused."""
    from tiletrain.ops.sparse import csr_from_coo
    from tiletrain.runtime.host import coo_to_csr
    for (N, M), blocks, n in (((37, 29), (8, 8), 200), ((12, 9), (4, 3), 40), ((6, 6), (16, 16), 30),
                              ((50, 7), (8, 7), 0), ((9, 70_000), (4, 30_000), 120)):
        row, col = rng.integers(0, N, n), rng.integers(0, M, n)
        q = n // 4
        row[:q], col[:q] = row[q:2 * q], col[q:2 * q]  # duplicate entries
        vals = rng.standard_normal(n)
        for dtype in (np.float32, np.float64):
            A = csr_from_coo(row, col, vals, (N, M), blocks, dtype)
            crow, perm = coo_to_csr(row, col, N, M)
            B = tt.sparse_csr_tensor(crow, col[perm], vals[perm].astype(dtype), (N, M), blocks=blocks)
            np.testing.assert_array_equal(A._crow, crow)
            np.testing.assert_array_equal(A._col, col[perm])
            assert (A.L, A.blocks, A.grid, A.dtype) == (B.L, B.blocks, B.grid, B.dtype)
            np.testing.assert_array_equal(A.block_nnz, B.block_nnz)
            for a, b in ((A._rowptr, B._rowptr), (A._cols, B._cols)):
                np.testing.assert_array_equal(a.numpy(), b.numpy())
            filled = np.arange(A.L) < A.block_nnz[:, None]  # padding slots: never read
            np.testing.assert_array_equal(A.blocked_values().numpy()[filled], B.blocked_values().numpy()[filled])
            if n:
                np.testing.assert_array_equal(A.values().numpy(), B.values().numpy())
            else:
                assert A.values() is None and B.values() is None
            X = tt.from_numpy(rng.standard_normal((M, 3)).astype(dtype), (min(M, 8), 3))
            np.testing.assert_array_equal((A @ X).numpy(), (B @ X).numpy())
    with pytest.raises(ValueError, match="coo_block_counts: row index 5 of entry 1 is out of range for 5 rows"):
        csr_from_coo(np.array([0, 5]), np.array([0, 1]), np.ones(2), (5, 4), (2, 2), np.float64)
    with pytest.raises(ValueError, match="column index -1 of entry 0 is out of range for 4 columns"):
        csr_from_coo(np.array([0, 1]), np.array([-1, 1]), np.ones(2), (5, 4), (2, 2), np.float64)
    with pytest.raises(ValueError, match="one each per entry"):
        csr_from_coo(np.array([0, 1]), np.array([0, 1]), np.ones(3), (5, 4), (2, 2), np.float64)


def test_numpy_values_are_copied_and_uploaded_when_first_needed(rng):
    """NumPy values stay on the host until something needs them as a tensor (values(), a
    product without host-laid-out blocked values, to_dense); they are copied at construction
    as torch copies them, so writing the caller's array afterwards changes nothing."""
    N, M = 19, 23
    dense = rng.standard_normal((N, M)) * (rng.random((N, M)) < 0.3)
    rows, cols = np.nonzero(dense)
    crow = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=N))]).astype(np.int64)
    vals = dense[rows, cols].copy()
    A = tt.sparse_csr_tensor(crow, cols.astype(np.int64), vals, (N, M), blocks=(8, 8))
    vals[:] = 7.0  # the caller's array, written after construction
    X = tt.from_numpy(rng.standard_normal((M, 4)), (8, 4))
    np.testing.assert_allclose((A @ X).numpy(), dense @ X.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(A.values().numpy(), dense[rows, cols])
    assert A.values() is A.values()  # one tensor, made once
    np.testing.assert_array_equal(A.to_dense().numpy(), dense)
    # requires_grad: the values are a tensor from the start, and get their gradient
    B = tt.sparse_csr_tensor(crow, cols.astype(np.int64), dense[rows, cols], (N, M), blocks=(8, 8),
                             requires_grad=True)
    (B @ X).sum().backward()
    np.testing.assert_allclose(B.values().grad.numpy(), X.numpy().sum(1)[cols], rtol=1e-12, atol=1e-12)
