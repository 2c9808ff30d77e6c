"""Activations, dropout and linear: forward against NumPy over tile grids, VJP checks."""
import numpy as np
import pytest

import tiletrain as tt
import tiletrain.functional as F
from conftest import FLOATS, GRIDS_2D, GRIDS_ND, tol
from tiletrain.testing.gradcheck import vjp_check
from tiletrain.testing.references_activations import dropout_mask, gelu_ref


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,tiles", GRIDS_2D + GRIDS_ND)
def test_activation_forward(rng, shape, tiles, dtype):
    a = (rng.standard_normal(shape) * 3).astype(dtype)
    x = tt.from_numpy(a, tiles)
    t = tol(dtype)
    np.testing.assert_allclose(F.gelu(x).numpy(), gelu_ref(a, 0), **t)
    np.testing.assert_allclose(F.gelu(x, approximate="tanh").numpy(), gelu_ref(a, 1), **t)
    np.testing.assert_allclose(F.relu(x).numpy(), np.maximum(a, 0), **t)
    np.testing.assert_allclose(F.silu(x).numpy(), a * _sigmoid(a.astype(np.float64)), **t)


def test_activation_vjp(rng):
    a = rng.standard_normal((7, 5)) * 2
    a[np.abs(a) < 1e-3] = 0.5  # keep relu's kink away from the finite-difference step
    for fn in (F.gelu, lambda x: F.gelu(x, approximate="tanh"), F.relu, F.silu):
        vjp_check(fn, [a], [(3, 2)])


def test_gelu_matches_torch_conventions():
    # known values: gelu(1) = 0.8413447460685429 (erf), tanh form 0.8411919906082768
    x = tt.from_numpy(np.array([1.0, -1.0, 0.0]))
    np.testing.assert_allclose(F.gelu(x).numpy(), [0.8413447460685429, -0.15865525393145707, 0.0], rtol=1e-14)
    np.testing.assert_allclose(F.gelu(x, approximate="tanh").numpy()[0], 0.8411919906082768, rtol=1e-14)
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh'"):
        F.gelu(x, approximate="fast")


def test_dropout(rng):
    a = rng.standard_normal((40, 30))
    x = tt.from_numpy(a, (16, 16))
    assert F.dropout(x, 0.0) is x and F.dropout(x, 0.5, training=False) is x
    y1 = F.dropout(x, 0.25, seed=1234).numpy()
    y2 = F.dropout(x, 0.25, seed=1234).numpy()
    np.testing.assert_array_equal(y1, y2)                       # reproducible
    assert not np.array_equal(y1, F.dropout(x, 0.25, seed=99).numpy())
    kept = y1 != 0
    assert 0.65 < kept.mean() < 0.85                            # about 1 - p kept
    np.testing.assert_allclose(y1[kept], a[kept] / 0.75, rtol=1e-14)
    # the mask is the documented counter-based generator, tile by tile
    tr = x.traits
    for lin, idx in enumerate(tr.tile_indices()):
        sl = tuple(slice(o, o + s) for o, s in zip(tr.tile_offset(idx), tr.tile_shape_at(idx)))
        m = dropout_mask(1234, lin, int(np.prod(tr.tile_shape_at(idx))), 0.25).reshape(tr.tile_shape_at(idx))
        np.testing.assert_array_equal(kept[sl], m)
    tt.ops.activations.manual_seed(7)
    z1 = F.dropout(x, 0.5).numpy()
    tt.ops.activations.manual_seed(7)
    np.testing.assert_array_equal(z1, F.dropout(x, 0.5).numpy())
    vjp_check(lambda t: F.dropout(t, 0.3, seed=5), [a[:9, :7]], [(4, 4)])
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\]"):
        F.dropout(x, 1.5)


@pytest.mark.parametrize("dtype", FLOATS)
def test_linear(rng, dtype):
    """torch's layout: weight (out, in), y = x @ w^T + b; against torch, any tilings."""
    import torch
    x = rng.standard_normal((3, 7, 6)).astype(dtype)
    w = rng.standard_normal((5, 6)).astype(dtype)
    b = rng.standard_normal(5).astype(dtype)
    X, W, B = tt.from_numpy(x, (2, 3, 4)), tt.from_numpy(w, (2, 4)), tt.from_numpy(b, 2)
    want = torch.nn.functional.linear(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)).numpy()
    np.testing.assert_allclose(F.linear(X, W, B).numpy(), want, **tol(dtype))
    np.testing.assert_allclose(F.linear(X, W).numpy(), x @ w.T, **tol(dtype))
    if dtype == np.float64:
        vjp_check(F.linear, [x, w, b], [(2, 3, 4), (2, 4), (2,)])
        vjp_check(lambda a, v: tt.ops.activations.affine(a, v), [x, w.T.copy()], [(2, 3, 4), (4, 2)])
    with pytest.raises(ValueError, match="bias must have shape"):
        F.linear(X, W, tt.from_numpy(b[:4].copy()))
    with pytest.raises(ValueError, match="must equal weight's in_features"):
        F.linear(X, tt.from_numpy(w.T.copy()))
    # one sample, (in_features,) -> (out_features,), as torch; its gradients too
    tx, tw, tb = (torch.tensor(v, requires_grad=True) for v in (x[0, 0], w, b))
    torch.nn.functional.linear(tx, tw, tb).pow(2).sum().backward()
    v, V, Bv = (tt.tensor(a, requires_grad=True) for a in (x[0, 0], w, b))
    y = F.linear(v, V, Bv)
    assert y.shape == (5,)
    y.pow(2).sum().backward()
    for mine, theirs in ((v, tx), (V, tw), (Bv, tb)):
        np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), **tol(dtype))
    with pytest.raises(ValueError, match="got a 0-d tensor"):
        F.linear(tt.tensor(dtype(1.0)), W)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("xshape, xtiles", [((3, 7, 6), (2, 3, 4)), ((7, 6), (3, 6)), ((1, 1, 6), (1, 1, 6))])
def test_affine_bias_in_gemm(rng, dtype, xshape, xtiles):
    """GPT-2's layout, weight (in, out), y = x @ w + b: the bias is added by the first gemm task
    of each output tile (gemm_bias), also when `in` spans several tiles (a chain of gemms after
    it, here 4 + 2) and for one row (the decode step's gemv); against NumPy, the backward in fp64."""
    x = rng.standard_normal(xshape).astype(dtype)
    w = rng.standard_normal((6, 5)).astype(dtype)
    b = rng.standard_normal(5).astype(dtype)
    X, W, B = tt.from_numpy(x, xtiles), tt.from_numpy(w, (4, 2)), tt.from_numpy(b, 2)
    y = tt.ops.activations.affine(X, W, B)
    assert y.tiles == xtiles[:-1] + (2,)
    np.testing.assert_allclose(y.numpy(), x @ w + b, **tol(dtype))
    if dtype == np.float64:
        vjp_check(lambda a, v, c: tt.ops.activations.affine(a, v, c), [x, w, b], [xtiles, (4, 2), (2,)])
        # the transposed (torch) layout with a bias whose tiles differ from the weight's (re-tiled)
        vjp_check(lambda a, v, c: F.linear(a, v, c), [x, w.T.copy(), b], [xtiles, (2, 4), (3,)])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("xshape, xtiles, wtiles", [
    ((3, 7, 6), (2, 3, 6), (6, 2)),    # one task per output tile (gemm_gelu adds the bias too)
    ((3, 7, 6), (2, 3, 4), (4, 2)),    # a chain of 2 along `in` (4 + 2): gemm_bias, then gemm_gelu
    ((2, 5, 12), (1, 5, 4), (4, 3)),   # a chain of 3: gemm_bias, gemm, gemm_gelu
    ((1, 1, 6), (1, 1, 6), (6, 5)),    # one row (gemv)
])
def test_affine_gelu_epilogue_against_torch(rng, approximate, xshape, xtiles, wtiles):
    """gelu(x @ w + b) with the GELU applied by the last gemm task of each output tile
    (gemm_gelu): output and every gradient against torch's F.gelu(x @ w + b) in float64, and
    the backward through the gelu'(pre-activation) the epilogue left in place of it."""
    import torch
    from tiletrain._ffi import lib
    x = rng.standard_normal(xshape) * 2
    w = rng.standard_normal((xshape[-1], 5))
    b = rng.standard_normal(5)
    g = rng.standard_normal(xshape[:-1] + (5,))
    X, W, B = (tt.from_numpy(v, t).requires_grad_() for v, t in ((x, xtiles), (w, wtiles), (b, wtiles[1:])))
    before = {k: lib.tt_kernel_ntasks(k) for k in (lib.TT_K_GEMM_GELU, lib.TT_K_GELU)}
    y = tt.ops.activations.affine(X, W, B, gelu=approximate)
    n_out = len(range(0, 5, wtiles[1])) * int(np.prod([len(range(0, s, t)) for s, t in zip(xshape[:-1], xtiles)]))
    assert lib.tt_kernel_ntasks(lib.TT_K_GEMM_GELU) - before[lib.TT_K_GEMM_GELU] == n_out
    assert lib.tt_kernel_ntasks(lib.TT_K_GELU) == before[lib.TT_K_GELU]  # no separate gelu task
    nbwd = lib.tt_kernel_ntasks(lib.TT_K_GELU_BACKWARD)
    y.backward(tt.from_numpy(g, y.tiles))
    assert lib.tt_kernel_ntasks(lib.TT_K_GELU_BACKWARD) == nbwd  # a mul by the saved gelu'(h) instead
    tx, tw, tb = (torch.tensor(v, requires_grad=True) for v in (x, w, b))
    ty = torch.nn.functional.gelu(tx @ tw + tb, approximate=approximate)
    ty.backward(torch.tensor(g))
    t = dict(rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), **t)
    np.testing.assert_allclose(X.grad.numpy(), tx.grad.numpy(), **t)
    np.testing.assert_allclose(W.grad.numpy(), tw.grad.numpy(), **t)
    np.testing.assert_allclose(B.grad.numpy(), tb.grad.numpy(), **t)


@pytest.mark.parametrize("dtype", FLOATS)
def test_affine_gelu_float32_and_unfused_paths(rng, dtype):
    """float32 against the reference; without a bias (nothing to fuse) the result is F.gelu of
    the product; Conv1D's gelu argument; a bad `approximate` is refused."""
    x = rng.standard_normal((4, 6)).astype(dtype)
    w = rng.standard_normal((6, 5)).astype(dtype)
    b = rng.standard_normal(5).astype(dtype)
    X, W, B = tt.from_numpy(x, (3, 4)), tt.from_numpy(w, (4, 2)), tt.from_numpy(b, 2)
    y = tt.ops.activations.affine(X, W, B, gelu="tanh")
    np.testing.assert_allclose(y.numpy(), gelu_ref(x.astype(np.float64) @ w + b, 1), **tol(dtype))
    y0 = tt.ops.activations.affine(X, W, gelu="none")
    np.testing.assert_allclose(y0.numpy(), gelu_ref(x.astype(np.float64) @ w, 0), **tol(dtype))
    m = tt.nn.Conv1D(5, 6, dtype=dtype)
    ref = gelu_ref(x.astype(np.float64) @ m.weight.detach().numpy() + m.bias.detach().numpy(), 1)
    np.testing.assert_allclose(m(X, gelu="tanh").detach().numpy(), ref, **tol(dtype))
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh'"):
        tt.ops.activations.affine(X, W, B, gelu="fast")
