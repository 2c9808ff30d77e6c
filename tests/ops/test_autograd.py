"""Autograd: the tape, gradient accumulation, no_grad/detach, and VJP checks (float64,
central differences) of every backward rule of the basic ops."""
import gc

import numpy as np
import pytest

import tiletrain as tt
from tiletrain.ops.elementwise import BINARY_OPS
from tiletrain.testing.gradcheck import vjp_check

SHAPE, TILES = (7, 5), (3, 2)          # smaller last tile on both axes
SHAPE3, TILES3 = (3, 7, 5), (2, 3, 2)


def _r(rng, *shape, positive=False):
    x = rng.standard_normal(shape)
    return np.abs(x) + 0.5 if positive else x


def test_vjp_elementwise(rng):
    a, b = _r(rng, *SHAPE), _r(rng, *SHAPE, positive=True)
    vjp_check(lambda x, y: tt.add(x, y, alpha=-3.0), [a, b], [TILES, TILES])
    vjp_check(lambda x, y: BINARY_OPS["add"](x, y, alpha=2.0, beta=-3.0), [a, b], [TILES, TILES])
    vjp_check(lambda x, y: x - y, [a, b], [TILES, TILES])
    vjp_check(lambda x, y: BINARY_OPS["mul"](x, y, alpha=1.5), [a, b], [TILES, TILES])
    vjp_check(lambda x, y: BINARY_OPS["div"](x, y, alpha=0.5), [a, b], [TILES, TILES])
    vjp_check(lambda x, y: x / y, [a, b], [TILES, TILES])
    vjp_check(lambda x: 3.0 / x, [b], [TILES])
    vjp_check(lambda x: (2.0 - x) * 4.0 + 1.0, [a], [TILES])
    vjp_check(lambda x: -tt.copy(x), [a], [TILES])
    vjp_check(lambda x: x * x * x, [a], [TILES])  # the same input used several times


def test_vjp_reductions_and_broadcast(rng):
    x = _r(rng, *SHAPE3)
    vjp_check(lambda t: tt.sum(t), [x], [TILES3])
    for axis in (0, 1, 2, (0, 1), (1, 2), -1):
        vjp_check(lambda t, axis=axis: tt.sum(t, axis) * 0.5, [x], [TILES3])
    b = _r(rng, 5)
    vjp_check(lambda t, c: tt.add_broadcast(t, c, (0, 1), 2.0, -1.0), [x, b], [TILES3, (2,)])
    b1 = _r(rng, 3, 5)
    vjp_check(lambda t, c: tt.add_broadcast(t, c, 1), [x, b1], [TILES3, (2, 2)])
    vjp_check(lambda c: tt.broadcast(c, tt.TensorTraits(SHAPE3, TILES3), 1, alpha=3.0), [b1], [(2, 2)])


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_vjp_matmul_2d(rng, ta, tb):
    m, k, n = 7, 5, 6
    a = _r(rng, *((k, m) if ta else (m, k)))
    b = _r(rng, *((n, k) if tb else (k, n)))
    vjp_check(lambda x, y: tt.matmul(x, y, ta, tb, alpha=0.7), [a, b],
              [(2, 3) if ta else (3, 2), (4, 2) if tb else (2, 4)])


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_vjp_matmul_batched(rng, ta, tb):
    B, m, k, n = 3, 5, 4, 6
    a = _r(rng, B, *((k, m) if ta else (m, k)))
    b = _r(rng, B, *((n, k) if tb else (k, n)))
    vjp_check(lambda x, y: tt.matmul(x, y, ta, tb), [a, b], [(2, 3, 3), (2, 3, 3)])


@pytest.mark.parametrize("tb", [False, True])
def test_vjp_matmul_folded_linear_shape(rng, tb):
    x = _r(rng, 3, 7, 5)
    w = _r(rng, *((4, 5) if tb else (5, 4)))
    vjp_check(lambda a, b: tt.matmul(a, b, transpose_b=tb), [x, w], [(2, 3, 2), (3, 2) if tb else (2, 3)])
    vjp_check(lambda a, b: tt.ops.matmul_leading(a, b, alpha=2.0), [x, _r(rng, 3, 7, 4)], [(2, 3, 2), (2, 3, 3)])


def test_leaf_gradients_accumulate(rng):
    a = _r(rng, *SHAPE)
    x = tt.from_numpy(a, TILES).requires_grad_()
    tt.sum(x * x).backward()
    tt.sum(x * 3.0).backward()          # a second graph: accumulates (beta = 1) into x.grad
    np.testing.assert_allclose(x.grad.numpy(), 2 * a + 3.0, rtol=1e-12)


def test_tied_use_gets_both_contributions(rng):
    # like tied embeddings: one parameter read by two paths of the same graph
    w = _r(rng, 5, 4)
    x = _r(rng, 6, 5)
    W = tt.from_numpy(w, (2, 2)).requires_grad_()
    X = tt.from_numpy(x, (3, 2))
    h = X @ W                                     # (6, 4)
    out = tt.matmul(h, W, transpose_b=True)       # (6, 5): W used again, transposed
    tt.sum(out).backward()
    ones = np.ones((6, 5))
    expected = x.T @ (ones @ w) + (ones.T @ (x @ w))
    np.testing.assert_allclose(W.grad.numpy(), expected, rtol=1e-12)
    vjp_check(lambda X_, W_: tt.matmul(X_ @ W_, W_, transpose_b=True), [x, w], [(3, 2), (2, 2)])


def test_shared_pending_gradients_are_never_changed_behind_a_reader(rng):
    """A gradient handed to two inputs (add's backward; the residual stream) is shared, not
    copied; accumulating into one of them must not change what the other sees."""
    a = _r(rng, *SHAPE)
    # h = x*2 gets g from both branches of add(h, h*h); x's pending gradient then receives
    # a second contribution through the residual (in place only when nobody shares it)
    vjp_check(lambda x: (lambda h: (h + h * h) + h * 3.0)(x * 2.0), [a], [TILES])
    vjp_check(lambda x: (lambda h: tt.add(h, h) * h + h)(x + 1.0), [a], [TILES])
    # the seed gradient passed by the caller stays untouched
    x = tt.from_numpy(a, TILES).requires_grad_()
    y = (lambda h: h + h)(x * 1.0)
    seed = tt.from_numpy(np.ones(SHAPE), TILES)
    y.backward(seed)
    np.testing.assert_array_equal(seed.numpy(), np.ones(SHAPE))
    np.testing.assert_allclose(x.grad.numpy(), np.full(SHAPE, 2.0), rtol=1e-12)


def test_no_grad_detach_and_flags(rng):
    x = tt.from_numpy(_r(rng, *SHAPE), TILES).requires_grad_()
    with tt.no_grad():
        y = x * 2.0
    assert not y.requires_grad and y.is_leaf
    z = (x * 2.0).detach()
    assert not z.requires_grad and z.is_leaf
    np.testing.assert_array_equal(z.numpy(), x.detach().numpy() * 2.0)
    w = x * 2.0
    assert w.requires_grad and not w.is_leaf and "grad_fn=<ScaleBackward0>" in repr(w)
    with pytest.raises(TypeError, match="gradients need a float tensor"):
        tt.from_numpy(np.arange(3)).requires_grad_()


def test_backward_errors(rng):
    x = tt.from_numpy(_r(rng, *SHAPE), TILES).requires_grad_()
    y = x * 2.0
    with pytest.raises(RuntimeError, match="seed gradient is needed for a non-scalar output"):
        y.backward()
    with pytest.raises(ValueError, match="seed gradient has shape"):
        y.backward(tt.ones((7, 4)))
    with pytest.raises(RuntimeError, match="does not require grad"):
        tt.sum(tt.from_numpy(np.ones(3))).backward()
    loss = tt.sum(y)
    loss.backward()
    with pytest.raises(RuntimeError, match="already released"):
        loss.backward()


def test_backward_submits_without_waiting_and_frees_the_tape(rng):
    import weakref
    x = tt.from_numpy(_r(rng, 64, 64), (16, 16)).requires_grad_()
    h = x * 2.0
    ref = weakref.ref(h)
    loss = tt.sum(h * h)
    del h
    assert ref() is not None           # held by the tape
    loss.backward()
    gc.collect()
    assert ref() is None               # released with the tape
    np.testing.assert_allclose(x.grad.numpy(), 8 * x.detach().numpy(), rtol=1e-12)
