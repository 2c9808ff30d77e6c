"""Every op against NumPy over tile grids with one tile, an even grid and a smaller last
tile along every axis, in float32 and float64."""
import numpy as np
import pytest

import torch

import tiletrain as tt
from tiletrain.ops.basic import count_, count_value, new_count
from tiletrain.ops.elementwise import BINARY_OPS
from conftest import FLOATS, GRIDS_2D, GRIDS_ND, tol

GRIDS = GRIDS_2D + GRIDS_ND


def _pair(rng, shape, dtype, positive_b=False):
    a = rng.standard_normal(shape).astype(dtype)
    b = rng.standard_normal(shape).astype(dtype)
    if positive_b:
        b = (np.abs(b) + 0.5).astype(dtype)
    return a, b


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,tiles", GRIDS)
def test_elementwise_binary(rng, shape, tiles, dtype):
    a, b = _pair(rng, shape, dtype, positive_b=True)
    A, B = tt.from_numpy(a, tiles), tt.from_numpy(b, tiles)
    t = tol(dtype)
    np.testing.assert_allclose((A + B).numpy(), a + b, **t)
    np.testing.assert_allclose((A - B).numpy(), a - b, **t)
    np.testing.assert_allclose((A * B).numpy(), a * b, **t)
    np.testing.assert_allclose((A / B).numpy(), a / b, **t)
    np.testing.assert_allclose(tt.add(A, B, alpha=2.0).numpy(), a + 2 * b, **t)   # torch's alpha
    np.testing.assert_allclose(tt.sub(A, B, alpha=3.0).numpy(), a - 3 * b, **t)
    np.testing.assert_allclose(tt.mul(A, B).numpy(), a * b, **t)
    np.testing.assert_allclose(tt.div(A, B).numpy(), a / b, **t)
    # the same-layout ops of the table rows they end in (the kernels' alpha, beta scaling)
    np.testing.assert_allclose(BINARY_OPS["add"](A, B, alpha=2.0, beta=-0.5).numpy(), 2 * a - 0.5 * b, **t)
    np.testing.assert_allclose(BINARY_OPS["sub"](A, B, alpha=1.0, beta=-3.0).numpy(), a - 3 * b, **t)
    np.testing.assert_allclose(BINARY_OPS["mul"](A, B, alpha=-2.0).numpy(), -2 * a * b, **t)
    np.testing.assert_allclose(BINARY_OPS["div"](A, B, alpha=0.5).numpy(), 0.5 * a / b, **t)
    for r in (A + B, A / B):
        assert r.dtype == dtype and r.shape == A.shape and r.tiles == A.tiles


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,tiles", GRIDS)
def test_scalar_ops_and_operators(rng, shape, tiles, dtype):
    a, b = _pair(rng, shape, dtype, positive_b=True)
    A, B = tt.from_numpy(a, tiles), tt.from_numpy(b, tiles)
    t = tol(dtype)
    np.testing.assert_allclose((A + 2).numpy(), a + 2, **t)
    np.testing.assert_allclose((2 + A).numpy(), 2 + a, **t)
    np.testing.assert_allclose((A - 1.5).numpy(), a - 1.5, **t)
    np.testing.assert_allclose((1.5 - A).numpy(), 1.5 - a, **t)
    np.testing.assert_allclose((A * 3).numpy(), a * 3, **t)
    np.testing.assert_allclose((3 * A).numpy(), 3 * a, **t)
    np.testing.assert_allclose((A / 4).numpy(), a / 4, **t)
    np.testing.assert_allclose((2 / B).numpy(), 2 / b, **t)
    np.testing.assert_allclose((-A).numpy(), -a, **t)
    np.testing.assert_allclose(tt.scale(A, 0.25).numpy(), 0.25 * a, **t)
    np.testing.assert_allclose(tt.add_scalar(A, 1.0, alpha=-2.0).numpy(), -2 * a + 1, **t)
    np.testing.assert_allclose(tt.copy(A).numpy(), a, **t)
    C = tt.copy(A)
    tt.fill_(C, 7.0)
    np.testing.assert_array_equal(C.numpy(), np.full(shape, 7.0, dtype))
    np.testing.assert_array_equal(A.numpy(), a)  # copy is independent of its source


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,tiles", GRIDS)
def test_sum_and_max(rng, shape, tiles, dtype):
    a = rng.standard_normal(shape).astype(dtype)
    A = tt.from_numpy(a, tiles)
    t = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else tol(dtype)
    s = tt.sum(A)
    assert s.shape == () and s.ndim == 0
    np.testing.assert_allclose(float(s), a.sum(dtype=np.float64), **t)
    for axis in range(-a.ndim, a.ndim):
        got = tt.sum(A, dim=axis)
        np.testing.assert_allclose(got.numpy(), a.sum(axis=axis), **t)
        assert got.shape == a.sum(axis=axis).shape
        np.testing.assert_array_equal(tt.amax(A, dim=axis).numpy(), a.max(axis=axis))


def test_max_propagates_nan():
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    a[1, 2] = np.nan
    got = tt.amax(tt.from_numpy(a, (2, 3)), dim=1).numpy()
    np.testing.assert_array_equal(got, a.max(axis=1))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,tiles", GRIDS_ND[1:] + GRIDS_2D)
def test_add_broadcast(rng, shape, tiles, dtype):
    a = rng.standard_normal(shape).astype(dtype)
    A = tt.from_numpy(a, tiles)
    for axis in range(a.ndim):
        bshape = shape[:axis] + shape[axis + 1:]
        b = rng.standard_normal(bshape).astype(dtype)
        B = tt.from_numpy(b, tiles[:axis] + tiles[axis + 1:])
        got = tt.add_broadcast(A, B, axis=axis, alpha=2.0, beta=-1.0).numpy()
        np.testing.assert_allclose(got, 2 * a - np.expand_dims(b, axis), **tol(dtype))


MATMUL_CASES = [
    # (M, K, N), (tm, tk, tn)
    ((6, 5, 4), (6, 5, 4)),        # one tile each
    ((8, 6, 4), (4, 3, 2)),        # even grids
    ((11, 9, 7), (4, 3, 3)),       # smaller last tiles everywhere
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("dims,tiles", MATMUL_CASES)
def test_matmul_2d(rng, dims, tiles, ta, tb, dtype):
    (m, k, n), (tm, tk, tn) = dims, tiles
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    A = tt.from_numpy(a, (tk, tm) if ta else (tm, tk))
    B = tt.from_numpy(b, (tn, tk) if tb else (tk, tn))
    C = tt.matmul(A, B, transpose_a=ta, transpose_b=tb, alpha=1.5)
    ref = 1.5 * ((a.T if ta else a) @ (b.T if tb else b))
    assert C.shape == (m, n) and C.tiles == (min(tm, m), min(tn, n))
    np.testing.assert_allclose(C.numpy(), ref, **tol(dtype))
    if not ta and not tb:
        np.testing.assert_allclose((A @ B).numpy(), a @ b, **tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("ta", [False, True])
def test_matmul_batched(rng, ta, tb, dtype):
    bsz, m, k, n = 5, 7, 6, 9
    a = rng.standard_normal((bsz, k, m) if ta else (bsz, m, k)).astype(dtype)
    b = rng.standard_normal((bsz, n, k) if tb else (bsz, k, n)).astype(dtype)
    A = tt.from_numpy(a, (2, 4, 4))
    B = tt.from_numpy(b, (2, 4, 4))
    C = tt.matmul(A, B, transpose_a=ta, transpose_b=tb)
    ref = (np.swapaxes(a, 1, 2) if ta else a) @ (np.swapaxes(b, 1, 2) if tb else b)
    np.testing.assert_allclose(C.numpy(), ref, **tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_nd_by_2d_folds_leading_axes(rng, dtype):
    # (B, T, C) @ (C, N): the linear-layer shape; tiles of x are contiguous (b*t, c) blocks
    x = rng.standard_normal((3, 10, 8)).astype(dtype)
    w = rng.standard_normal((8, 5)).astype(dtype)
    X = tt.from_numpy(x, (2, 4, 3))
    W = tt.from_numpy(w, (3, 2))
    Y = X @ W
    assert Y.shape == (3, 10, 5) and Y.tiles == (2, 4, 2)
    np.testing.assert_allclose(Y.numpy(), x @ w, **tol(dtype))
    np.testing.assert_allclose(tt.matmul(X, tt.from_numpy(w.T.copy(), (2, 3)), transpose_b=True).numpy(),
                               x @ w, **tol(dtype))


def _task_counts(*names):
    from tiletrain._ffi import lib
    from tiletrain.runtime.kernels import kernel_id
    return [lib.tt_kernel_ntasks(kernel_id(k)) for k in names]


@pytest.mark.parametrize("dtype", FLOATS)
def test_split_k_with_fewer_output_tiles_than_workers(rng, dtype):
    """One output tile (2 workers, tests/conftest.py) and 4 tiles along K, big enough (2*m*n*K
    >= 2^24 flops): the chain of 4 gemm tasks is cut in two chains of 2, the second into a
    temporary added by one axpy task; with a bias (the first chain's first task adds it), and
    for matmul_leading (the weight gradient: K over the row tiles).  Results equal NumPy's."""
    from tiletrain._ffi import lib
    from tiletrain.ops.activations import affine
    assert lib.tt_nworkers() == 2
    m, k, n = 128, 512, 128
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    bias = rng.standard_normal(n).astype(dtype)
    A, B = tt.from_numpy(a, (m, 128)), tt.from_numpy(b, (128, n))
    with tt.no_grad():
        before = _task_counts("gemm", "gemm_bias", "axpy")
        C = tt.matmul(A, B, alpha=0.5)
        Y = affine(A, B, tt.from_numpy(bias, (n,)))
        x3 = rng.standard_normal((4, 128, 128)).astype(dtype)  # K = 4 row tiles of 128
        W = tt.matmul_leading(tt.from_numpy(x3, (1, 128, 128)), tt.from_numpy(x3, (1, 128, 128)))
        C.numpy()
        after = _task_counts("gemm", "gemm_bias", "axpy")
    # matmul: 4 gemm + 1 axpy; affine: 1 gemm_bias + 3 gemm + 1 axpy; leading: 4 gemm + 1 axpy
    assert [y - x for x, y in zip(before, after)] == [4 + 3 + 4, 1, 3]
    a64, b64, flat = a.astype(np.float64), b.astype(np.float64), x3.reshape(-1, 128).astype(np.float64)
    close = dict(rtol=1e-5, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-11)  # sums of 512
    np.testing.assert_allclose(C.numpy(), 0.5 * a64 @ b64, **close)
    np.testing.assert_allclose(Y.numpy(), a64 @ b64 + bias, **close)
    np.testing.assert_allclose(W.numpy(), flat.T @ flat, **close)


def test_split_k_only_where_it_pays(rng):
    """No split: as many output tiles as workers, a small product, or one tile along K."""
    cases = [((128, 512, 256), (128, 128, 128)),   # 2 output tiles
             ((64, 512, 64), (64, 128, 64)),       # 2*64*64*512 flops < 2^24
             ((128, 512, 128), (128, 512, 128))]   # one tile along K
    for (m, k, n), (tm, tk, tn) in cases:
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        before = _task_counts("gemm", "axpy")
        C = tt.from_numpy(a, (tm, tk)) @ tt.from_numpy(b, (tk, tn))
        np.testing.assert_allclose(C.numpy(), a @ b, rtol=1e-12, atol=1e-12)
        after = _task_counts("gemm", "axpy")
        ntiles = -(-m // tm) * -(-n // tn)
        assert [y - x for x, y in zip(before, after)] == [ntiles * -(-k // tk), 0], (m, k, n)


def test_results_chain_without_waiting(rng):
    # A long dependent chain submitted without waiting gives the same result as NumPy.  While
    # it is submitted, this thread holds tile 0 of A (write access), so no task reading it can
    # run: had the submission waited for any task (a read, wait()), it would block, and the
    # thread below would not finish.
    import threading

    from tiletrain._ffi import check, ffi, lib
    a = rng.standard_normal((33, 17))
    A = tt.from_numpy(a, (8, 8))
    check(lib.tt_tile_acquire_on_node(A._ptr, 0, 0, 1, ffi.new("void **"), ffi.new("int64_t *")))
    ref, out = a, {}

    def submit():
        x = A
        for i in range(20):
            x = x * 0.5 + A
        out["x"] = x

    th = threading.Thread(target=submit, daemon=True)
    th.start()
    th.join(60)
    submitted_without_waiting, pending = not th.is_alive(), lib.tt_pending()
    check(lib.tt_tile_release_on_node(A._ptr, 0, 0))
    th.join()
    assert submitted_without_waiting, "submitting the chain waited for its tasks"
    assert pending > 0  # the tasks that read tile 0 of A were still held back
    for i in range(20):
        ref = ref * 0.5 + a
    np.testing.assert_allclose(out["x"].numpy(), ref, rtol=1e-12)


def test_counts_are_counted_in_place_and_known_on_the_host():
    """ops.basic.count_ (BatchNorm's num_batches_tracked, the optimizers' step): torch's
    ``t += 1`` on a 0-d tensor; a count written another way is read again."""
    c = new_count(0, np.int64)
    assert c.dtype == np.int64 and c.shape == () and [count_(c), count_(c)] == [1, 2] and c.item() == 2
    assert isinstance(count_value(c), int) and c.value_range == (2, 2)
    c.fill_(7)                                       # an in-place op: the host's value is dropped
    assert c.value_range is None and count_(c) == 8 and c.item() == 8
    big, ref = new_count(2 ** 24, np.float32), torch.tensor(2.0 ** 24)
    ref += 1
    assert count_(big) == float(ref) == 2.0 ** 24 and big.item() == 2.0 ** 24   # float32 rounding, as torch's
    with pytest.raises(TypeError, match="0-d"):
        count_(tt.zeros(2))
    with pytest.raises(TypeError, match="int64, float32 or float64"):
        new_count(0, np.bool_)
