"""The flash-attention kernel bodies on tiles larger than their query row block (64 rows),
so the causal skipping of masked keys per row block, blocks that see no key, and a smaller
last row block are all exercised against the NumPy references (no StarPU involved)."""
import numpy as np
import pytest

from tiletrain._ffi import lib
from tiletrain.testing.references import REFERENCES, run_cpu_kernel

DTYPE_CODE = {np.float32: lib.TT_F32, np.float64: lib.TT_F64}
# (causal, qoff, koff, tq, tk): diagonal tile, query tile past the keys, a query tile whose
# first row blocks see no key of the tile, keys ending inside the tile, no mask
BLOCKS = [(1, 0, 0, 150, 150), (1, 300, 100, 130, 90), (1, 0, 70, 150, 90), (1, 64, 0, 128, 256),
          (0, 0, 0, 70, 50)]


def _run(name, fields, buffers, dtype):
    run_cpu_kernel(name, fields, buffers, DTYPE_CODE[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("init", [0, 1])
def test_attn_fwd_bwd_large_tiles(block, init, dtype):
    rng = np.random.default_rng(3)
    causal, qoff, koff, tq, tk = block
    bh, hd = 2, 8
    r = lambda *s: rng.standard_normal(s).astype(dtype)  # noqa: E731
    q, k, v, do = r(bh, tq, hd), r(bh, tk, hd), r(bh, tk, hd), r(bh, tq, hd)
    tol = 1e-4 if dtype == np.float32 else 1e-12  # float32: sums over up to 256 keys
    mask = (koff + np.arange(tk))[None, :] <= (qoff + np.arange(tq))[:, None] if causal else np.ones((tq, tk), bool)
    empty = ~mask.any(axis=1)  # query rows that see no key of this tile

    if init:
        o, m, l = np.full((bh, tq, hd), np.nan, dtype), np.full((bh, tq), np.nan, dtype), np.full((bh, tq), np.nan, dtype)
    else:
        o, m, l = r(bh, tq, hd), r(bh, tq), (rng.random((bh, tq)) + 0.5).astype(dtype)
    f = dict(bh=bh, tq=tq, tk=tk, hd=hd, qoff=qoff, koff=koff, causal=causal, init=init, scale=0.4)
    bufs = [q, k, v, o, m, l]
    exp = REFERENCES["attn_fwd"].ref(f, *[b.copy() for b in bufs])
    if init:  # the reference leaves NaN in rows that see nothing; the kernel writes 0, -inf, 0
        exp[3][:, empty], exp[4][:, empty], exp[5][:, empty] = 0.0, -np.inf, 0.0
    _run("attn_fwd", f, bufs, dtype)
    for i, e in exp.items():
        np.testing.assert_allclose(bufs[i], np.asarray(e, dtype=dtype), rtol=tol, atol=tol, err_msg=f"attn_fwd {i}")

    st = np.stack([r(bh, tq) + 2.0, r(bh, tq)], axis=2)
    dq, dk, dv = r(bh, tq, hd), r(bh, tk, hd), r(bh, tk, hd)
    if init:
        dq[:] = dk[:] = dv[:] = np.nan
    f = dict(bh=bh, tq=tq, tk=tk, hd=hd, qoff=qoff, koff=koff, causal=causal, initq=init, initkv=init, scale=0.4)
    bufs = [q, k, v, do, st, dq, dk, dv]
    exp = REFERENCES["attn_bwd"].ref(f, *[b.copy() for b in bufs])
    _run("attn_bwd", f, bufs, dtype)
    for i, e in exp.items():
        np.testing.assert_allclose(bufs[i], np.asarray(e, dtype=dtype), rtol=tol, atol=tol, err_msg=f"attn_bwd {i}")
