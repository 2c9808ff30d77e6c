"""gemm tiles with one row (m == 1) or one column (n == 1) take the matrix-vector path, and
float32 tiles of 2..16 rows times a transposed (n, k) weight the rows-dot path
(csrc/kernels/cpu/gemm.c): every transpose combination, beta 0 over a tile holding NaN
(it must not leak) and beta != 0, float32 and float64, against NumPy."""
import itertools

import numpy as np
import pytest

from tiletrain._ffi import cstr, lib
from tiletrain.runtime import _cpu_flags
from tiletrain.testing.references import REFERENCES, run_cpu_kernel

CODE = {np.float32: lib.TT_F32, np.float64: lib.TT_F64}
# the rows-dot body needs AVX2 and FMA (checked at run time); elsewhere BLAS takes its shapes
ROWS_DOT = {"avx2", "fma"} <= _cpu_flags()


def path(dtype_code, m, n, k, ta, tb, alpha=0.7):
    return cstr(lib.tt_gemm_cpu_path(dtype_code, m, n, k, ta, tb, alpha))


def test_gemm_path_names_the_body_each_shape_takes():
    assert path(lib.TT_F32, 1, 7, 5, 0, 0) == path(lib.TT_F64, 6, 1, 5, 1, 1) == "gemv"
    assert path(lib.TT_F32, 8, 64, 384, 0, 1, alpha=0.0) == "alpha0"
    assert path(lib.TT_F32, 8, 64, 384, 0, 1) == ("rows_dot" if ROWS_DOT else "blas")
    for m, ta, tb, k in ((17, 0, 1, 384), (8, 1, 1, 384), (8, 0, 0, 384), (8, 0, 1, 15)):
        assert path(lib.TT_F32, m, 64, k, ta, tb) == "blas", (m, ta, tb, k)
    assert path(lib.TT_F64, 8, 64, 384, 0, 1) == "blas"  # rows-dot is float32 only
    assert path(lib.TT_F16, 8, 64, 384, 0, 1) == path(lib.TT_F32, 8, 64, 384, 0, 1)  # half: float32 copies


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, n", [(1, 7), (6, 1), (1, 1)])
def test_gemm_vector_shapes(dtype, m, n):
    rng = np.random.default_rng(3)
    batch, k = 3, 5
    for ta, tb, beta in itertools.product((0, 1), (0, 1), (0.0, 0.3)):
        a = rng.standard_normal((batch, *((k, m) if ta else (m, k)))).astype(dtype)
        b = rng.standard_normal((batch, *((n, k) if tb else (k, n)))).astype(dtype)
        c = np.full((batch, m, n), np.nan, dtype) if beta == 0 else rng.standard_normal((batch, m, n)).astype(dtype)
        fields = dict(batch=batch, m=m, n=n, k=k, ta=ta, tb=tb, cacc=0, alpha=0.7, beta=beta)
        expected = REFERENCES["gemm"].ref(fields, a, b, np.nan_to_num(c))[2]
        run_cpu_kernel("gemm", fields, [a, b, c], CODE[dtype])
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(c, expected, rtol=tol, atol=tol, err_msg=f"m={m} n={n} ta={ta} tb={tb} beta={beta}")


@pytest.mark.parametrize("m", [2, 3, 5, 8, 16, 17])
@pytest.mark.parametrize("n, k", [(7, 16), (64, 384), (33, 101), (2, 24), (3, 1000)])
def test_gemm_few_rows_times_transposed_weight(m, n, k):
    """The decode shape (a few rows, x @ W^T): odd n (a last single weight row), k not a
    multiple of 8 (a scalar tail), m = 17 past the path's limit (BLAS), alpha and beta."""
    expected_path = "rows_dot" if ROWS_DOT and m <= 16 and k >= 16 else "blas"
    assert path(lib.TT_F32, m, n, k, 0, 1) == expected_path
    rng = np.random.default_rng(m * 1000 + n + k)
    batch = 2
    for beta in (0.0, 1.0, 0.3):
        a = rng.standard_normal((batch, m, k)).astype(np.float32)
        b = rng.standard_normal((batch, n, k)).astype(np.float32)
        c = np.full((batch, m, n), np.nan, np.float32) if beta == 0 else \
            rng.standard_normal((batch, m, n)).astype(np.float32)
        expected = 0.7 * (a.astype(np.float64) @ b.astype(np.float64).transpose(0, 2, 1)) + \
            (0 if beta == 0 else beta * c.astype(np.float64))
        fields = dict(batch=batch, m=m, n=n, k=k, ta=0, tb=1, cacc=0, alpha=0.7, beta=beta)
        run_cpu_kernel("gemm", fields, [a, b, c], lib.TT_F32)
        np.testing.assert_allclose(c, expected, rtol=2e-5, atol=2e-5 * np.sqrt(k), err_msg=f"beta={beta}")
    # alpha 0: A and B are not read (BLAS's rule), so a NaN in them does not reach C
    a[0, 0, 0] = np.nan
    c = rng.standard_normal((batch, m, n)).astype(np.float32)
    want = 0.5 * c
    run_cpu_kernel("gemm", dict(batch=batch, m=m, n=n, k=k, ta=0, tb=1, cacc=0, alpha=0.0, beta=0.5), [a, b, c],
                   lib.TT_F32)
    np.testing.assert_allclose(c, want, rtol=1e-6)
