"""add_layer_norm / add_rms_norm (a residual add and the next norm, decode steps): bitwise
equal to add then layer_norm / rms_norm, one task per tile when rows are whole tiles under
no_grad, the plain ops (with gradients) otherwise; bad input."""
import numpy as np
import pytest

import tiletrain as tt
import tiletrain.functional as F
from conftest import total_tasks


def _pair(rng, shape, tiles, dtype):
    x = rng.standard_normal(shape).astype(dtype) + 1.5
    r = rng.standard_normal(shape).astype(dtype)
    return tt.from_numpy(x, tiles), tt.from_numpy(r, tiles)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,tiles", [((2, 3, 8), (1, 2, 8)), ((5, 6), (2, 6)), ((4, 6), (4, 4))])
@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_equals_add_then_norm_bitwise(rng, dtype, shape, tiles, kind):
    X, R = _pair(rng, shape, tiles, dtype)
    C, tc = shape[-1], tiles[-1]
    w = tt.from_numpy(rng.standard_normal(C).astype(dtype), (tc,))
    b = tt.from_numpy(rng.standard_normal(C).astype(dtype), (tc,))
    with tt.no_grad():
        tt.wait()
        before = total_tasks()
        if kind == "layer":
            s, y = F.add_layer_norm(X, R, w, b, 1e-5)
        else:
            s, y = F.add_rms_norm(X, R, w, 1e-6)
        tt.wait()
        ntasks = total_tasks() - before
        s0 = X + R
        y0 = F.layer_norm(s0, (C,), w, b, 1e-5) if kind == "layer" else F.rms_norm(s0, (C,), w, 1e-6)
    np.testing.assert_array_equal(s.numpy(), s0.numpy())
    np.testing.assert_array_equal(y.numpy(), y0.numpy())
    if tiles[-1] == shape[-1]:          # whole rows: one fused task per tile
        assert ntasks == X.traits.ntiles


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_with_gradients_it_is_the_plain_ops(rng, kind):
    X, R = _pair(rng, (3, 4), (3, 4), np.float64)
    w = tt.from_numpy(rng.standard_normal(4), (4,)).requires_grad_()
    X.requires_grad_()
    s, y = F.add_layer_norm(X, R, w) if kind == "layer" else F.add_rms_norm(X, R, w)
    y.sum().backward()
    tt.wait()
    assert X.grad is not None and w.grad is not None
    X2 = tt.from_numpy(X.detach().numpy(), (3, 4)).requires_grad_()
    w2 = tt.from_numpy(w.detach().numpy(), (4,)).requires_grad_()
    s2 = X2 + R
    (F.layer_norm(s2, (4,), w2) if kind == "layer" else F.rms_norm(s2, (4,), w2, 1e-6)).sum().backward()
    np.testing.assert_array_equal(X.grad.numpy(), X2.grad.numpy())
    np.testing.assert_array_equal(w.grad.numpy(), w2.grad.numpy())


def test_bad_input(rng):
    X, R = _pair(rng, (3, 4), (3, 4), np.float32)
    with pytest.raises(ValueError, match="add_layer_norm: r must have x's shape, tiles and dtype"):
        F.add_layer_norm(X, tt.from_numpy(np.ones((3, 4), np.float32), (1, 4)))
    with pytest.raises(ValueError, match="add_rms_norm: r must have x's shape, tiles and dtype"):
        F.add_rms_norm(X, tt.from_numpy(np.ones((3, 4))))
    with pytest.raises(ValueError, match="add_layer_norm: weight must have shape"):
        with tt.no_grad():
            F.add_layer_norm(X, R, tt.from_numpy(np.ones(5, np.float32)))
    with pytest.raises(ValueError, match="add_layer_norm: eps must be a positive"):
        with tt.no_grad():
            F.add_layer_norm(X, R, eps=0.0)
