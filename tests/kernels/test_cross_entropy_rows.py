"""The cross-entropy kernel bodies on contiguous rows (n = 1, the op's layout) long enough
for their vectorised float32 paths (16-wide lanes plus a remainder), against the NumPy
references; rows with -inf, NaN or +inf logits must behave as the generic code does."""
import numpy as np
import pytest

from tiletrain._ffi import lib
from tiletrain.testing.references import REFERENCES, run_cpu_kernel

DTYPE_CODE = {np.float32: lib.TT_F32, np.float64: lib.TT_F64}


def _run(name, fields, buffers, dtype):
    run_cpu_kernel(name, fields, buffers, DTYPE_CODE[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k,ncols,t", [(100, 100, 0), (37, 80, 1), (64, 128, 1), (64, 192, 0)])
@pytest.mark.parametrize("first", [0, 1])
def test_cross_entropy_long_rows(k, ncols, t, first, dtype):
    rng = np.random.default_rng(11)
    m = 6
    vgrid = -(-ncols // k)
    tile = 2 * vgrid + t
    col0 = t * k
    kk = min(k, ncols - col0)
    x = (3 * rng.standard_normal((m, kk, 1))).astype(dtype)
    x[1, ::3, 0] = -np.inf                      # masked logits
    tgt = np.array([col0 + 1, col0 + kk - 1, -100, (col0 + kk) % ncols, col0, ncols + 2],
                   np.int64).reshape(m, 1)
    mx = rng.standard_normal((m, 1)).astype(dtype)
    s = (rng.random((m, 1)) + 0.5).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    f = dict(m=m, k=kk, n=1, first=first, tile=tile, vtile=k, ncols=ncols, ignore_index=-100)
    bufs = [x, tgt, mx, s, rng.standard_normal((m, 1)).astype(dtype), np.zeros((m, 1), dtype)]
    exp = REFERENCES["cross_entropy_fwd"].ref(f, *[b.copy() for b in bufs])
    _run("cross_entropy_fwd", f, bufs, dtype)
    for i, e in exp.items():
        np.testing.assert_allclose(bufs[i], np.asarray(e, dtype=dtype).reshape(bufs[i].shape), rtol=tol, atol=tol,
                                   err_msg=f"cross_entropy_fwd buffer {i}")

    f = dict(m=m, k=kk, n=1, tile=tile, vtile=k, ncols=ncols, ignore_index=-100)
    mx = x.max(axis=1) + rng.random((m, 1)).astype(dtype)
    bufs = [x, np.full_like(x, np.nan), tgt, mx.astype(dtype), s, rng.standard_normal((m, 1)).astype(dtype)]
    exp = REFERENCES["cross_entropy_bwd"].ref(f, *[b.copy() for b in bufs])
    _run("cross_entropy_bwd", f, bufs, dtype)
    np.testing.assert_allclose(bufs[1], np.asarray(exp[1], dtype=dtype).reshape(x.shape), rtol=tol, atol=tol)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_cross_entropy_rows_with_nan_or_inf_take_the_generic_path(bad):
    """The float32 row code falls back to the generic loop: a NaN (or +inf) in a row gives
    the same statistics as in float64."""
    rng = np.random.default_rng(5)
    m, k = 2, 40
    out = {}
    for dtype in (np.float32, np.float64):
        x = rng.standard_normal((m, k, 1)).astype(dtype)
        x[0, 7, 0] = bad
        f = dict(m=m, k=k, n=1, first=1, tile=0, vtile=k, ncols=k, ignore_index=-100)
        bufs = [x, np.zeros((m, 1), np.int64), np.zeros((m, 1), dtype), np.zeros((m, 1), dtype),
                np.zeros((m, 1), dtype), np.zeros((m, 1), dtype)]
        _run("cross_entropy_fwd", f, bufs, dtype)
        out[dtype] = (bufs[2].astype(np.float64), bufs[3].astype(np.float64))
        rng = np.random.default_rng(5)
    for a, b in zip(out[np.float32], out[np.float64]):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_array_equal(np.isinf(a), np.isinf(b))
