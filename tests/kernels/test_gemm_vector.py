"""gemm tiles with one row (m == 1) or one column (n == 1) take the matrix-vector path
(csrc/kernels/cpu/gemm.c): every transpose combination, beta 0 over a tile holding NaN
(it must not leak) and beta != 0, float32 and float64, against NumPy."""
import itertools

import numpy as np
import pytest

from tiletrain._ffi import lib
from tiletrain.testing.references import REFERENCES, run_cpu_kernel

CODE = {np.float32: lib.TT_F32, np.float64: lib.TT_F64}


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
