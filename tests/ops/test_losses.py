"""Losses of tiletrain.functional (mse_loss, l1_loss, binary_cross_entropy_with_logits)
against torch.nn.functional: every reduction, forward in float32/float64, gradients of input
and target in float64 to 1e-10 on tile grids with leftover tiles; weight / pos_weight of
input's shape or 1-D over the last axis; large logits stay finite; VJP checks; bad input."""
import numpy as np
import pytest

import tiletrain as tt
import tiletrain.functional as F
from conftest import FLOATS, tol
from tiletrain.testing.gradcheck import vjp_check

import torch
TF = torch.nn.functional

GRIDS = [((6, 5), (6, 5)), ((11, 7), (4, 3)), ((5, 7, 6), (2, 3, 4)), ((7,), (3,))]
REDUCTIONS = ("mean", "sum", "none")


def _pair(rng, shape, name):
    x = rng.standard_normal(shape) * 3
    t = rng.random(shape) if name == "bce" else rng.standard_normal(shape)
    if name == "l1":
        t.flat[::4] = x.flat[::4]       # input == target: gradient 0, as torch
    return x, t


def _call(name, lib, x, t, reduction, **kw):
    fn = {"mse": "mse_loss", "l1": "l1_loss", "bce": "binary_cross_entropy_with_logits"}[name]
    return getattr(lib, fn)(x, t, reduction=reduction, **kw)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,tiles", GRIDS)
def test_losses_match_torch(rng, shape, tiles, dtype):
    for name in ("mse", "l1", "bce"):
        x, t = _pair(rng, shape, name)
        x, t = x.astype(dtype), t.astype(dtype)
        for reduction in REDUCTIONS:
            X, T = tt.from_numpy(x, tiles).requires_grad_(), tt.from_numpy(t, tiles).requires_grad_()
            y = _call(name, F, X, T, reduction)
            tx, ttg = torch.from_numpy(x.astype(np.float64)).requires_grad_(), \
                torch.from_numpy(t.astype(np.float64)).requires_grad_()
            want = _call(name, TF, tx, ttg, reduction)
            assert y.shape == tuple(want.shape) and y.dtype == dtype
            np.testing.assert_allclose(y.detach().numpy(), want.detach().numpy(), **tol(dtype), err_msg=f"{name} {reduction}")
            if dtype != np.float64:
                continue
            g = rng.standard_normal(y.shape)
            y.backward(tt.from_numpy(g, y.tiles))
            want.backward(torch.from_numpy(g))
            np.testing.assert_allclose(X.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-10)
            np.testing.assert_allclose(T.grad.numpy(), ttg.grad.numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("shape,tiles", [((11, 7), (4, 3)), ((5, 7, 6), (2, 3, 4))])
def test_bce_weight_and_pos_weight(rng, shape, tiles):
    x, t = _pair(rng, shape, "bce")
    full, last = rng.random(shape) + 0.5, rng.random(shape[-1]) + 0.5
    for w, pw in ((full, None), (last, None), (None, last), (full, full), (last, last)):
        for reduction in REDUCTIONS:
            kw = {k: tt.from_numpy(v, tiles if v.ndim == len(shape) else tiles[-1:])
                  for k, v in (("weight", w), ("pos_weight", pw)) if v is not None}
            tkw = {k: torch.from_numpy(v) for k, v in (("weight", w), ("pos_weight", pw)) if v is not None}
            X = tt.from_numpy(x, tiles).requires_grad_()
            y = F.binary_cross_entropy_with_logits(X, tt.from_numpy(t, tiles), reduction=reduction, **kw)
            tx = torch.from_numpy(x).requires_grad_()
            want = TF.binary_cross_entropy_with_logits(tx, torch.from_numpy(t), reduction=reduction, **tkw)
            np.testing.assert_allclose(y.detach().numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-12)
            g = rng.standard_normal(y.shape)
            y.backward(tt.from_numpy(g, y.tiles))
            want.backward(torch.from_numpy(g))
            np.testing.assert_allclose(X.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-10)


def test_bce_large_logits_stay_finite():
    x = np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0])
    t = np.array([1.0, 0.0, 0.5, 1.0, 0.0])
    y = F.binary_cross_entropy_with_logits(tt.from_numpy(x), tt.from_numpy(t), reduction="none").numpy()
    want = TF.binary_cross_entropy_with_logits(torch.from_numpy(x), torch.from_numpy(t), reduction="none").numpy()
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y, want, rtol=1e-12)


def test_vjp_losses(rng):
    shape, tiles = (11, 7), (4, 3)
    for name in ("mse", "l1", "bce"):
        x, t = _pair(rng, shape, name)
        t = t + 0.01 if name == "l1" else t      # away from the kink of |x - t|
        for reduction in REDUCTIONS:
            vjp_check(lambda a, b, n=name, r=reduction: _call(n, F, a, b, r), [x, t], [tiles, tiles])


def test_losses_bad_input(rng, nothing_submitted):
    X = tt.from_numpy(rng.standard_normal((4, 6)), (2, 3))
    for fn in (F.mse_loss, F.l1_loss, F.binary_cross_entropy_with_logits):
        with pytest.raises(ValueError, match=r"shape mismatch, input is \(4, 6\) and target is \(4, 5\)"):
            fn(X, tt.from_numpy(np.zeros((4, 5)), (2, 3)))
        # another tiling of target is retiled, not refused (tests/nn/test_torch_surface.py)
        with pytest.raises(ValueError, match="reduction must be one of"):
            fn(X, X, reduction="avg")
        with pytest.raises(TypeError, match="target must be a tiletrain Tensor"):
            fn(X, np.zeros((4, 6)))
        with pytest.raises(TypeError, match="dtype mismatch"):
            fn(X, tt.from_numpy(np.zeros((4, 6), np.float32), (2, 3)))
    with pytest.raises(ValueError, match="weight must have input's shape"):
        F.binary_cross_entropy_with_logits(X, X, weight=tt.from_numpy(np.ones(4), (2,)))
    with pytest.raises(ValueError, match="pos_weight must have input's shape"):
        F.binary_cross_entropy_with_logits(X, X, pos_weight=tt.from_numpy(np.ones(5), (2,)))
