"""layer_norm and rms_norm over the last axis: forward against NumPy over tile grids (one
tile, even grids, a smaller last tile on every axis, the last axis split into several
tiles), float32 and float64; numerical soundness; VJP checks of every backward rule;
bad input."""
import numpy as np
import pytest

import tiletrain as tt
import tiletrain.functional as F
from conftest import FLOATS, GRIDS_2D, GRIDS_ND, tol
from tiletrain._ffi import ffi, lib
from tiletrain.testing.gradcheck import vjp_check

GRIDS = GRIDS_2D + GRIDS_ND  # the last axis is split in every grid but the one-tile ones


def ln_ref(x, w=None, b=None, eps=1e-5):
    x = np.asarray(x, np.float64)
    mu = x.mean(-1, keepdims=True)
    y = (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)
    if w is not None:
        y = y * np.float64(w)
    if b is not None:
        y = y + np.float64(b)
    return y


def rms_ref(x, w=None, eps=1e-6):
    x = np.asarray(x, np.float64)
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y if w is None else y * np.float64(w)


def _params(rng, C, tc, dtype, n):
    arrays = [rng.standard_normal(C).astype(dtype) for _ in range(n)]
    return arrays, [tt.from_numpy(a, (tc,)) for a in arrays]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,tiles", GRIDS)
def test_layer_norm_forward(rng, shape, tiles, dtype):
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    X = tt.from_numpy(x, tiles)
    (w, b), (W, B) = _params(rng, shape[-1], tiles[-1], dtype, 2)
    t = tol(dtype)
    for args, ref in [((W, B), ln_ref(x, w, b)), ((W,), ln_ref(x, w)), ((), ln_ref(x)),
                      ((None, B), ln_ref(x, None, b))]:
        Y = F.layer_norm(X, X.shape[-1:], *args)
        assert Y.shape == X.shape and Y.tiles == X.tiles and Y.dtype == dtype
        np.testing.assert_allclose(Y.numpy(), ref, **t)
    np.testing.assert_allclose(F.layer_norm(X, X.shape[-1:], W, B, eps=0.5).numpy(), ln_ref(x, w, b, 0.5), **t)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,tiles", GRIDS)
def test_rms_norm_forward(rng, shape, tiles, dtype):
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    X = tt.from_numpy(x, tiles)
    (w,), (W,) = _params(rng, shape[-1], tiles[-1], dtype, 1)
    t = tol(dtype)
    for args, ref in [((W, 1e-6), rms_ref(x, w)), ((None, 1e-6), rms_ref(x)), ((W, 0.25), rms_ref(x, w, 0.25))]:
        Y = F.rms_norm(X, X.shape[-1:], *args)
        assert Y.shape == X.shape and Y.tiles == X.tiles and Y.dtype == dtype
        np.testing.assert_allclose(Y.numpy(), ref, **t)


def test_layer_norm_statistics_are_numerically_sound(rng):
    # A large offset over a small spread, the last axis in 4 tiles (the last one smaller):
    # E[x^2] - E[x]^2 loses everything here (1e14 against 1 in float64); the per-tile two-pass
    # statistics merged pairwise do not.
    x = 1e7 + rng.standard_normal((6, 29))
    y = F.layer_norm(tt.from_numpy(x, (4, 8)), (29,)).numpy()
    np.testing.assert_allclose(y, ln_ref(x), rtol=1e-6, atol=1e-6)
    mu = x.mean(-1, keepdims=True)
    naive = (x - mu) / np.sqrt((x * x).mean(-1, keepdims=True) - mu ** 2 + 1e-5)
    assert np.abs(naive - ln_ref(x)).max() > 1e-4  # the test would catch the naive formula
    # float32 with an offset: the mean is kept in float32, so the error is its rounding (~1e-5)
    x32 = (300.0 + rng.standard_normal((5, 37))).astype(np.float32)
    y32 = F.layer_norm(tt.from_numpy(x32, (2, 10)), 37).numpy()
    np.testing.assert_allclose(y32, ln_ref(x32), rtol=1e-4, atol=1e-4)
    # rms_norm of large values: no overflow of the sum of squares in float32
    big = (rng.standard_normal((3, 20)) * 1e18).astype(np.float32)
    np.testing.assert_allclose(F.rms_norm(tt.from_numpy(big, (2, 6)), [20], eps=1e-6).numpy(), rms_ref(big),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", FLOATS)
def test_constant_rows(dtype):
    x = np.full((4, 9), 3.25, dtype)
    x[1] = -7.0
    b = np.linspace(-1, 1, 9).astype(dtype)
    y = F.layer_norm(tt.from_numpy(x, (3, 4)), (9,), None, tt.from_numpy(b, (4,))).numpy()
    np.testing.assert_array_equal(y, np.broadcast_to(b, x.shape))  # zero variance: exactly the bias
    z = F.rms_norm(tt.from_numpy(np.zeros((2, 5), dtype), (1, 2)), (5,)).numpy()
    np.testing.assert_array_equal(z, 0)


# ---------------------------------------------------------------- backward (float64)

VJP_GRIDS = [((6, 5), (6, 5)), ((7, 11), (3, 4)), ((3, 5, 7), (2, 2, 3)), ((9,), (4,))]


@pytest.mark.parametrize("shape,tiles", VJP_GRIDS)
def test_vjp_layer_norm(rng, shape, tiles):
    x = rng.standard_normal(shape) * 1.5 + 0.3
    C, tc = shape[-1], (tiles[-1],)
    w, b = rng.standard_normal(C), rng.standard_normal(C)
    vjp_check(lambda X, W, B: F.layer_norm(X, (C,), W, B, eps=1e-3), [x, w, b], [tiles, tc, tc])
    vjp_check(lambda X: F.layer_norm(X, (C,)), [x], [tiles])
    vjp_check(lambda X, B: F.layer_norm(X, (C,), None, B), [x, b], [tiles, tc])
    X = tt.from_numpy(x, tiles)  # gradients for weight and bias only: the x pass is skipped
    vjp_check(lambda W, B: F.layer_norm(X, (C,), W, B), [w, b], [tc, tc])


@pytest.mark.parametrize("shape,tiles", VJP_GRIDS)
def test_vjp_rms_norm(rng, shape, tiles):
    x = rng.standard_normal(shape) * 1.5 + 0.3
    C, tc = shape[-1], (tiles[-1],)
    w = rng.standard_normal(C)
    vjp_check(lambda X, W: F.rms_norm(X, (C,), W, eps=1e-3), [x, w], [tiles, tc])
    vjp_check(lambda X: F.rms_norm(X, (C,)), [x], [tiles])
    X = tt.from_numpy(x, tiles)
    vjp_check(lambda W: F.rms_norm(X, (C,), W), [w], [tc])


def test_norm_gradients_match_closed_form(rng):
    # loss = sum(layer_norm(x) * v): dw = sum_rows(v * xhat), db = sum_rows(v), and dx per row
    x, v = rng.standard_normal((5, 3, 10)), rng.standard_normal((5, 3, 10))
    w, b = rng.standard_normal(10), rng.standard_normal(10)
    X = tt.from_numpy(x, (2, 2, 4)).requires_grad_()
    W, B = tt.from_numpy(w, (4,)).requires_grad_(), tt.from_numpy(b, (4,)).requires_grad_()
    F.layer_norm(X, (10,), W, B).backward(tt.from_numpy(v, (2, 2, 4)))
    eps = 1e-5
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    rstd = 1 / np.sqrt(var + eps)
    xhat = (x - mu) * rstd
    g = v * w
    dx = rstd * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    np.testing.assert_allclose(X.grad.numpy(), dx, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(W.grad.numpy(), (v * xhat).sum((0, 1)), rtol=1e-10)
    np.testing.assert_allclose(B.grad.numpy(), v.sum((0, 1)), rtol=1e-10)


def test_float32_backward_close_to_float64(rng):
    x, v = rng.standard_normal((6, 13)), rng.standard_normal((6, 13))
    w = rng.standard_normal(13)
    grads = {}
    for dt in FLOATS:
        X = tt.from_numpy(x.astype(dt), (4, 5)).requires_grad_()
        W = tt.from_numpy(w.astype(dt), (5,)).requires_grad_()
        F.rms_norm(F.layer_norm(X, (13,), W), (13,), W, 1e-6).backward(tt.from_numpy(v.astype(dt), (4, 5)))
        grads[dt] = X.grad.numpy(), W.grad.numpy()
    for a, b in zip(grads[np.float32], grads[np.float64]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- bad input

def test_bad_input(rng, nothing_submitted):
    X = tt.from_numpy(rng.standard_normal((4, 6)), (2, 4))
    w = tt.from_numpy(rng.standard_normal(6), (4,))
    for op in (F.layer_norm, F.rms_norm):
        name = op.__name__
        with pytest.raises(ValueError, match=rf"{name}: weight must have shape normalized_shape \(6,\), got \(5,\)"):
            op(X, (6,), tt.from_numpy(np.ones(5), (4,)))
        with pytest.raises(ValueError, match=rf"{name}: weight must have shape normalized_shape \(6,\).*got \(1, 6\)"):
            op(X, (6,), tt.from_numpy(np.ones((1, 6)), (1, 4)))
        with pytest.raises(TypeError, match=f"{name}: weight is float32 but x is float64"):
            op(X, (6,), tt.from_numpy(np.ones(6, np.float32), (4,)))
        with pytest.raises(TypeError, match=f"{name}: weight must be a tiletrain Tensor, got ndarray"):
            op(X, (6,), np.ones(6))
        with pytest.raises(TypeError, match=f"{name}: x has dtype int64"):
            op(tt.from_numpy(np.ones((2, 3), np.int64)), (3,))
        with pytest.raises(TypeError, match=f"{name}: x must be a tiletrain Tensor"):
            op(np.ones((2, 3)), (3,))
        with pytest.raises(ValueError, match=f"{name}: x must have at least one axis"):
            op(tt.from_numpy(np.array(2.0)), (1,))
        for eps in (0.0, -1e-5, float("nan"), float("inf")):
            with pytest.raises(ValueError, match=f"{name}: eps must be a positive finite number"):
                op(X, (6,), w, eps=eps)
        with pytest.raises(TypeError, match=f"{name}: eps must be a real number, got str"):
            op(X, (6,), eps="1e-5")
    with pytest.raises(ValueError, match=r"layer_norm: bias must have shape normalized_shape \(6,\)"):
        F.layer_norm(X, (6,), w, tt.from_numpy(np.ones(7), (4,)))
    with pytest.raises(TypeError, match="layer_norm: bias is float32 but x is float64"):
        F.layer_norm(X, (6,), None, tt.from_numpy(np.ones(6, np.float32), (4,)))
    with pytest.raises(ValueError, match=r"layer_norm: normalized_shape \(5,\) must be the last dimensions"):
        F.layer_norm(X, (5,))
    with pytest.raises(TypeError, match="rms_norm: normalized_shape must be an int or a sequence of ints"):
        F.rms_norm(X, w)


def test_expander_revalidates(rng, nothing_submitted):
    """The C expander checks layouts and dtypes itself (a caller bypassing Python)."""
    X = tt.from_numpy(rng.standard_normal((4, 6)), (2, 4))
    Y = tt.empty((4, 6), tiles=(2, 4), dtype=np.float64)
    good_row = tt.from_numpy(np.ones(4), (2,))
    col = tt.from_numpy(np.ones(6), (4,))
    args = ffi.new("tt_args_layer_norm_fwd *")

    def call(full, rows, cols, reduce=0, kernel=lib.TT_K_LAYER_NORM_FWD, a=args):
        f = ffi.new("tt_tensor *[]", [t._ptr for t in full])
        r = ffi.new("tt_tensor *[]", [t._ptr for t in rows])
        c = ffi.new("tt_tensor *[]", [t._ptr for t in cols])
        from tiletrain._ffi import check
        check(lib.tt_norm_map(kernel, a, len(full), f, len(rows), r, len(cols), c, reduce))

    with pytest.raises(ValueError, match="row operand 2 must have operand 0's shape and tiles without"):
        call([X, Y], [tt.from_numpy(np.ones(4), (3,)), good_row], [col, col])
    with pytest.raises(ValueError, match="column operand 5 must be 1-D of size 6 with tiles of 4"):
        call([X, Y], [good_row, good_row], [col, tt.from_numpy(np.ones(6), (2,))])
    with pytest.raises(ValueError, match="operands must share a dtype"):
        call([X, Y], [good_row, good_row], [col, tt.from_numpy(np.ones(6, np.float32), (4,))])
    with pytest.raises(ValueError, match="takes 6 tensors"):
        call([X, Y], [good_row], [col, col])
    with pytest.raises(ValueError, match="operand 1 has a different shape or tiling"):
        call([X, tt.empty((4, 6), tiles=(4, 4), dtype=np.float64)], [good_row, good_row], [col, col])
    with pytest.raises(ValueError, match="is written but is a row tensor and reduce=0"):
        call([X], [good_row, good_row], [], reduce=0, kernel=lib.TT_K_LAYER_NORM_STATS,
             a=ffi.new("tt_args_layer_norm_stats *"))
    with pytest.raises(ValueError, match="never been written"):
        call([X, Y], [tt.empty((4,), tiles=(2,), dtype=np.float64), good_row], [col, col])
    with pytest.raises(ValueError, match="not a row/column kernel"):
        call([X, Y], [], [], kernel=lib.TT_K_ADD)


@pytest.mark.parametrize("dtype", FLOATS)
def test_whole_row_tiles_take_one_task_with_the_same_results(rng, dtype):
    """x's last axis in one tile: layer_norm_row / rms_norm_row (one task per tile) give the
    values of the three-kernel path (stats, rstd, forward) to the bit, mean and rstd included."""
    from tiletrain.ops.norm import _stats
    from tiletrain.runtime.kernels import kernel_id, run_norm
    x = (rng.standard_normal((5, 3, 40)) * 2 + 1).astype(dtype)
    w, b = rng.standard_normal(40).astype(dtype), rng.standard_normal(40).astype(dtype)
    X, W, B = tt.from_numpy(x, (2, 3, 40)), tt.from_numpy(w, 40), tt.from_numpy(b, 40)
    counts = {k: lib.tt_kernel_ntasks(kernel_id(k)) for k in ("layer_norm_row", "rms_norm_row", "norm_rstd")}
    y, yr = F.layer_norm(X, (40,), W, B, eps=1e-3), F.rms_norm(X, (40,), W, eps=1e-3)
    assert lib.tt_kernel_ntasks(kernel_id("layer_norm_row")) - counts["layer_norm_row"] == 3  # row tiles
    assert lib.tt_kernel_ntasks(kernel_id("rms_norm_row")) - counts["rms_norm_row"] == 3
    assert lib.tt_kernel_ntasks(kernel_id("norm_rstd")) == counts["norm_rstd"]
    with tt.no_grad():
        mean, rstd = _stats(X, 1e-3, centred=True)
        ref = tt.Tensor(X.traits, X.dtype)
        run_norm("layer_norm_fwd", [X, ref], [mean, rstd], [W, B], reduce=0)
        _, rstd2 = _stats(X, 1e-3, centred=False)
        ref2 = tt.Tensor(X.traits, X.dtype)
        run_norm("rms_norm_fwd", [X, ref2], [rstd2], [W], reduce=0)
    np.testing.assert_array_equal(y.numpy(), ref.numpy())
    np.testing.assert_array_equal(yr.numpy(), ref2.numpy())
    np.testing.assert_allclose(y.numpy(), ln_ref(x, w, b, eps=1e-3), **tol(dtype))


def test_torch_signature_several_axes_and_other_weight_tilings(rng):
    """torch's normalized_shape: several last dimensions (merged into one axis and back), a
    weight tiled otherwise than x's last axis (re-tiled), rms_norm's eps=None (the dtype's
    machine epsilon): torch's values and gradients."""
    import torch
    x, w, b, g = (rng.standard_normal(s) for s in ((3, 4, 5), (4, 5), (4, 5), (3, 4, 5)))
    X = tt.from_numpy(x, (2, 3, 2)).requires_grad_()
    W, B = tt.from_numpy(w, (3, 5)).requires_grad_(), tt.from_numpy(b, (1, 4)).requires_grad_()
    rx, rw, rb = (torch.from_numpy(a).requires_grad_() for a in (x, w, b))
    y = F.layer_norm(X, (4, 5), W, B) + F.rms_norm(X, [4, 5], W)
    ry = torch.nn.functional.layer_norm(rx, (4, 5), rw, rb) + torch.nn.functional.rms_norm(rx, [4, 5], rw)
    np.testing.assert_allclose(y.detach().numpy(), ry.detach().numpy(), rtol=1e-10, atol=1e-12)
    y.backward(tt.from_numpy(g))
    ry.backward(torch.from_numpy(g))
    for ours, ref in ((X, rx), (W, rw), (B, rb)):
        np.testing.assert_allclose(ours.grad.numpy(), ref.grad.numpy(), rtol=1e-10, atol=1e-12)
    v = tt.from_numpy(rng.standard_normal(7), (3,))
    X1 = tt.from_numpy(rng.standard_normal((5, 7)), (2, 4))
    np.testing.assert_allclose(F.layer_norm(X1, 7, v).numpy(),
                               torch.nn.functional.layer_norm(torch.from_numpy(X1.numpy()), (7,),
                                                              torch.from_numpy(v.numpy())).numpy(), rtol=1e-12)
    z = rng.standard_normal((3, 6)).astype(np.float32) * 1e-4
    np.testing.assert_allclose(F.rms_norm(tt.from_numpy(z), (6,)).numpy(),
                               torch.nn.functional.rms_norm(torch.from_numpy(z), (6,)).numpy(), rtol=1e-5)
