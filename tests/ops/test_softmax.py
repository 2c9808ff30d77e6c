"""softmax, log_softmax (every dim) and the fused cross_entropy: forward against NumPy and
torch over tile grids (one tile; an even grid; a smaller last tile on every axis, the axis
split across tiles), float32 and float64; VJP checks of every backward rule in float64;
large-magnitude logits; bad input."""
import numpy as np
import pytest

import tiletrain as tt
import tiletrain.functional as F
from conftest import FLOATS, GRIDS_2D, GRIDS_ND, tol
from tiletrain._ffi import lib
from tiletrain.testing.gradcheck import vjp_check
from tiletrain.ops.softmax import cross_entropy_last  # the fused op, classes on the last axis

GRIDS = GRIDS_2D + GRIDS_ND + [
    ((4, 13), (4, 13)),        # one tile, odd class count
    ((6, 13), (2, 5)),         # last axis in three tiles, the last one smaller (5, 5, 3)
    ((2, 3, 9), (1, 2, 3)),    # last axis split evenly, smaller last tile along axis 1
    ((10,), (4,)),             # a single row split in tiles (the row statistics are 0-d)
]


def _np_log_softmax(x):
    x = x.astype(np.float64)
    z = x - x.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _np_cross_entropy(x, t, ignore_index=-100, reduction="mean"):
    ls = _np_log_softmax(x)
    valid = t != ignore_index
    safe = np.where(valid, t, 0)
    per = -np.take_along_axis(ls, safe[..., None], axis=-1)[..., 0]
    per = np.where(valid, per, 0.0)
    if reduction == "none":
        return per
    if reduction == "sum":
        return per.sum()
    with np.errstate(invalid="ignore"):
        return per.sum() / valid.sum()


def _targets(rng, shape, ncls, ignore_index=-100, frac_ignored=0.25):
    t = rng.integers(0, ncls, size=shape)
    t = np.where(rng.random(shape) < frac_ignored, ignore_index, t)
    return np.asarray(t, dtype=np.int64)


def _rows_tiles(tiles):
    return tuple(tiles[:-1])


# -- forward ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,tiles", GRIDS)
def test_softmax_forward(rng, shape, tiles, dtype):
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    X = tt.from_numpy(x, tiles)
    ls = _np_log_softmax(x)
    t = tol(dtype)
    y = F.softmax(X, dim=-1)
    assert y.shape == X.shape and y.tiles == X.tiles and y.dtype == dtype
    np.testing.assert_allclose(y.numpy(), np.exp(ls), **t)
    np.testing.assert_allclose(F.softmax(X, dim=X.ndim - 1).numpy(), np.exp(ls), **t)
    np.testing.assert_allclose(F.log_softmax(X, dim=-1).numpy(), ls, **t)
    np.testing.assert_allclose(F.softmax(X, dim=-1).numpy().sum(axis=-1), np.ones(shape[:-1]), **t)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,tiles", GRIDS)
def test_cross_entropy_forward(rng, shape, tiles, dtype):
    ncls = shape[-1]
    x = (rng.standard_normal(shape) * 2).astype(dtype)
    t = _targets(rng, shape[:-1], ncls)
    if t.ndim and t.size > 1:
        t.flat[0], t.flat[1] = -100, ncls - 1   # an ignored target and the last class, always
    X, T = tt.from_numpy(x, tiles), tt.from_numpy(t, _rows_tiles(tiles))
    tl = tol(dtype)
    for reduction in ("mean", "sum", "none"):
        expected = _np_cross_entropy(x, t, reduction=reduction)
        out = cross_entropy_last(X, T, reduction=reduction)
        assert out.dtype == dtype
        if reduction == "none":
            assert out.shape == t.shape and out.tiles == T.tiles
            np.testing.assert_allclose(out.numpy(), expected, **tl)
        else:
            assert out.shape == ()
            if np.isnan(expected):     # a single ignored target: mean is 0 / 0
                assert np.isnan(float(out))
            else:
                np.testing.assert_allclose(float(out), expected, **tl)


@pytest.mark.parametrize("dtype", FLOATS)
def test_cross_entropy_ignore_index_is_a_class(rng, dtype):
    shape, tiles = (7, 9), (3, 4)
    x = rng.standard_normal(shape).astype(dtype)
    t = np.array([0, 3, 0, 8, 5, 0, 1], dtype=np.int64)
    X, T = tt.from_numpy(x, tiles), tt.from_numpy(t, (3,))
    for reduction in ("mean", "sum", "none"):
        out = cross_entropy_last(X, T, ignore_index=0, reduction=reduction)
        np.testing.assert_allclose(out.numpy(), _np_cross_entropy(x, t, ignore_index=0, reduction=reduction),
                                   **tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_cross_entropy_all_ignored(rng, dtype):
    x = rng.standard_normal((4, 6)).astype(dtype)
    X = tt.from_numpy(x, (3, 4)).requires_grad_()
    T = tt.from_numpy(np.full(4, -100, dtype=np.int64), (3,))
    loss = cross_entropy_last(X, T)
    assert np.isnan(float(loss))        # PyTorch: the mean over no targets is nan
    loss.backward()
    np.testing.assert_array_equal(X.grad.numpy(), np.zeros_like(x))   # ignored rows get no gradient
    assert float(cross_entropy_last(X, T, reduction="sum")) == 0.0
    np.testing.assert_array_equal(cross_entropy_last(X, T, reduction="none").detach().numpy(), np.zeros(4, dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_large_magnitude_does_not_overflow(rng, dtype):
    shape, tiles = (5, 11), (2, 4)
    x = (1000.0 + rng.standard_normal(shape) * 5).astype(dtype)
    x[1] -= 2000.0                     # a row around -1000 as well
    X = tt.from_numpy(x, tiles)
    ls = _np_log_softmax(x)
    y, lsy = F.softmax(X, dim=-1).numpy(), F.log_softmax(X, dim=-1).numpy()
    assert np.all(np.isfinite(y)) and np.all(np.isfinite(lsy))
    np.testing.assert_allclose(y, np.exp(ls), **tol(dtype))
    np.testing.assert_allclose(lsy, ls, **tol(dtype))
    t = _targets(rng, shape[:-1], shape[-1], frac_ignored=0.0)
    T = tt.from_numpy(t, (2,))
    Xg = tt.from_numpy(x, tiles).requires_grad_()
    loss = cross_entropy_last(Xg, T)
    assert np.isfinite(float(loss))
    np.testing.assert_allclose(float(loss), _np_cross_entropy(x, t), **tol(dtype))
    loss.backward()
    onehot = np.eye(shape[-1])[t]
    np.testing.assert_allclose(Xg.grad.numpy(), (np.exp(ls) - onehot) / shape[0], **tol(dtype))


def test_cross_entropy_keeps_only_row_statistics(rng):
    """Fused: the autograd node saves the logits, the targets and O(rows) tensors only."""
    x = rng.standard_normal((6, 13))
    X = tt.from_numpy(x, (2, 5)).requires_grad_()
    T = tt.from_numpy(_targets(rng, (6,), 13), (2,))
    for reduction in ("mean", "sum", "none"):
        loss = cross_entropy_last(X, T, reduction=reduction)
        saved = [s for s in loss._node.saved if s is not None]
        assert saved[0] is X and saved[1] is T
        assert all(s.numel() <= X.shape[0] for s in saved[2:]), [s.shape for s in saved]


def test_cross_entropy_counts_and_divides_in_tasks(rng):
    """The count of targets and the division are tile tasks: no host read after the check."""
    x = rng.standard_normal((6, 13))
    X = tt.from_numpy(x, (2, 5)).requires_grad_()
    t = _targets(rng, (6,), 13)
    T = tt.from_numpy(t, (2,))
    before = lib.tt_kernel_ntasks(lib.TT_K_DIV)
    loss = cross_entropy_last(X, T)
    assert lib.tt_kernel_ntasks(lib.TT_K_DIV) == before + 1
    loss.backward()
    assert lib.tt_kernel_ntasks(lib.TT_K_DIV) == before + 2    # g / count
    np.testing.assert_allclose(float(loss), _np_cross_entropy(x, t), rtol=1e-12)


# -- backward --------------------------------------------------------------------------

VJP_GRIDS = [((4, 6), (4, 6)), ((5, 13), (2, 5)), ((2, 3, 8), (1, 2, 4)), ((9,), (4,))]


@pytest.mark.parametrize("shape,tiles", VJP_GRIDS)
def test_vjp_softmax(rng, shape, tiles):
    x = rng.standard_normal(shape) * 2
    vjp_check(lambda t: F.softmax(t, dim=-1), [x], [tiles])
    vjp_check(lambda t: F.log_softmax(t, dim=-1), [x], [tiles])
    vjp_check(lambda t: F.softmax(t, dim=-1) * t, [x], [tiles])      # the input used twice


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape,tiles", VJP_GRIDS)
def test_vjp_cross_entropy(rng, shape, tiles, reduction):
    x = rng.standard_normal(shape) * 2
    t = _targets(rng, shape[:-1], shape[-1])
    if t.ndim and t.size > 1:
        t.flat[0], t.flat[1] = -100, 3     # include an ignored target and a counted one
    T = tt.from_numpy(t, _rows_tiles(tiles))
    vjp_check(lambda lg: cross_entropy_last(lg, T, reduction=reduction), [x], [tiles])
    T3 = tt.from_numpy(np.where(t == -100, 0, t), _rows_tiles(tiles))   # now class 3 is the ignored one
    vjp_check(lambda lg: cross_entropy_last(lg, T3, ignore_index=3, reduction=reduction), [x], [tiles])


def test_vjp_cross_entropy_through_matmul(rng):
    x, w = rng.standard_normal((2, 5, 4)), rng.standard_normal((4, 11))
    T = tt.from_numpy(_targets(rng, (2, 5), 11), (1, 3))
    vjp_check(lambda a, b: cross_entropy_last(tt.matmul(a, b), T), [x, w], [(1, 3, 2), (2, 4)])


def test_cross_entropy_gradient_values(rng):
    shape, tiles = (6, 10), (4, 3)
    x = rng.standard_normal(shape)
    t = _targets(rng, (6,), 10)
    t[0] = -100
    X = tt.from_numpy(x, tiles).requires_grad_()
    cross_entropy_last(X, tt.from_numpy(t, (4,))).backward()
    valid = t != -100
    expected = (np.exp(_np_log_softmax(x)) - np.eye(10)[np.where(valid, t, 0)]) * valid[:, None] / valid.sum()
    np.testing.assert_allclose(X.grad.numpy(), expected, rtol=1e-12, atol=1e-14)


def test_softmax_without_dim_takes_torchs_implicit_dim_with_its_warning(rng):
    import torch
    for shape in ((5,), (3, 4), (2, 3, 4), (2, 2, 3, 2)):
        x = rng.standard_normal(shape)
        for name in ("softmax", "log_softmax"):
            with pytest.warns(UserWarning, match="Implicit dimension choice"):
                got = getattr(F, name)(tt.from_numpy(x)).numpy()
            with pytest.warns(UserWarning):
                want = getattr(torch.nn.functional, name)(torch.from_numpy(x)).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


# -- bad input -------------------------------------------------------------------------

def test_softmax_bad_input(rng, nothing_submitted):
    X = tt.from_numpy(rng.standard_normal((4, 6)), (2, 3))
    for fn in (F.softmax, F.log_softmax):
        with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-2, 1\], "
                                             r"but got 2\)"):
            fn(X, dim=2)
        with pytest.raises(IndexError, match="Dimension out of range"):
            fn(X, dim=-3)
        with pytest.raises(TypeError, match="dim must be an int"):
            fn(X, dim=1.0)
        with pytest.raises(TypeError, match="input must be a tiletrain Tensor"):
            fn(np.zeros((4, 6)), dim=-1)
        with pytest.raises(TypeError, match="float32 and float64"):
            fn(tt.from_numpy(np.zeros((4, 6), dtype=np.int64), (2, 3)), dim=-1)
        with pytest.raises(ValueError, match="0-d"):
            fn(tt.from_numpy(np.array(1.0)), dim=-1)


# -- any dim: forward against torch, backward against torch and VJP checks ------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,tiles", GRIDS)
def test_softmax_every_dim_matches_torch(rng, shape, tiles, dtype):
    import torch
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    X = tt.from_numpy(x, tiles)
    for dim in range(-len(shape), len(shape)):
        for fn, tfn in ((F.softmax, torch.softmax), (F.log_softmax, torch.log_softmax)):
            y = fn(X, dim=dim)
            assert y.shape == X.shape and y.tiles == X.tiles and y.dtype == dtype
            np.testing.assert_allclose(y.numpy(), tfn(torch.from_numpy(x.astype(np.float64)), dim).numpy(),
                                       **tol(dtype))


@pytest.mark.parametrize("shape,tiles", [((5, 7, 6), (2, 3, 4)), ((9, 4), (4, 3))])
def test_softmax_every_dim_backward_matches_torch(rng, shape, tiles):
    import torch
    x, g = rng.standard_normal(shape), rng.standard_normal(shape)
    for dim in range(len(shape)):
        for fn, tfn in ((F.softmax, torch.softmax), (F.log_softmax, torch.log_softmax)):
            X = tt.from_numpy(x, tiles).requires_grad_()
            fn(X, dim=dim).backward(tt.from_numpy(g, tiles))
            T = torch.from_numpy(x).requires_grad_()
            tfn(T, dim).backward(torch.from_numpy(g))
            np.testing.assert_allclose(X.grad.numpy(), T.grad.numpy(), rtol=1e-10, atol=1e-10)
        vjp_check(lambda t, dim=dim: F.softmax(t, dim=dim), [x], [tiles])
        vjp_check(lambda t, dim=dim: F.log_softmax(t, dim=dim), [x], [tiles])


def test_cross_entropy_bad_input(rng):
    X = tt.from_numpy(rng.standard_normal((6, 5)), (4, 2))
    good = np.array([0, 1, 4, -100, 2, 3], dtype=np.int64)
    T = tt.from_numpy(good, (4,))
    with pytest.raises(ValueError, match=r"targets must have shape \(6,\)"):
        cross_entropy_last(X, tt.from_numpy(good[:5], (4,)))
    with pytest.raises(ValueError, match=r"targets must have shape \(6,\)"):
        cross_entropy_last(X, tt.from_numpy(good.reshape(6, 1), (4, 1)))
    # targets of another tiling are retiled like the logits' rows, not refused
    assert float(cross_entropy_last(X, tt.from_numpy(good, (3,)))) == float(cross_entropy_last(X, T))
    with pytest.raises(TypeError, match="targets must be int64"):
        cross_entropy_last(X, tt.from_numpy(good.astype(np.float64), (4,)))
    with pytest.raises(TypeError, match="targets must be a tiletrain Tensor"):
        cross_entropy_last(X, good)
    with pytest.raises(ValueError, match="reduction must be one of"):
        cross_entropy_last(X, T, reduction="avg")
    with pytest.raises(ValueError, match="reduction must be one of"):
        cross_entropy_last(X, T, reduction=None)
    with pytest.raises(TypeError, match="ignore_index must be an int"):
        cross_entropy_last(X, T, ignore_index=1.5)
    with pytest.raises(TypeError, match="logits has dtype int64"):
        cross_entropy_last(tt.from_numpy(np.zeros((6, 5), dtype=np.int64), (4, 2)), T)
    with pytest.raises(ValueError, match="0-d"):
        cross_entropy_last(tt.from_numpy(np.array(1.0)), T)
    with pytest.raises(ValueError, match=r"weight must have shape \(5,\)"):
        cross_entropy_last(X, T, tt.ones(4, dtype=tt.float64))
    with pytest.raises(RuntimeError, match="weight cannot require gradients"):
        cross_entropy_last(X, T, tt.ones(5, dtype=tt.float64, requires_grad=True))
    with pytest.raises(NotImplementedError, match="size_average and reduce are deprecated"):
        cross_entropy_last(X, T, reduce=False)
    for bad in (-0.1, 1.5, "0.1", True):
        with pytest.raises(ValueError, match="label_smoothing must be a number in"):
            cross_entropy_last(X, T, label_smoothing=bad)
    before = [lib.tt_kernel_ntasks(k) for k in range(lib.tt_kernel_count())]
    for bad, value in ((5, "5"), (-1, "-1"), (-101, "-101"), (10**12, str(10**12))):
        t = good.copy()
        t[4] = bad
        Tb = tt.from_numpy(t, (4,))
        mid = [lib.tt_kernel_ntasks(k) for k in range(lib.tt_kernel_count())]
        with pytest.raises(ValueError, match=rf"target {value} at position \(4,\) is out of range"):
            cross_entropy_last(X, Tb)
        # nothing was submitted by the failing call
        assert [lib.tt_kernel_ntasks(k) for k in range(lib.tt_kernel_count())] == mid
    assert lib.tt_kernel_ntasks(lib.TT_K_CROSS_ENTROPY_FWD) == before[lib.TT_K_CROSS_ENTROPY_FWD]
    # the ignore_index value itself is fine, even outside [0, V)
    t = good.copy()
    t[3:5] = -7
    assert np.isfinite(float(cross_entropy_last(X, tt.from_numpy(t, (4,)), ignore_index=-7)))


@pytest.mark.parametrize("shape", [(3, 4, 4), (2, 5, 3, 2), (5,)])
def test_cross_entropy_reads_the_classes_as_torch_does(rng, shape):
    """torch.nn.functional.cross_entropy's layouts: (N, C, d1, ...) has the classes on dim 1
    (also when C equals d1: the targets' shape cannot tell), (C,) is one unbatched row."""
    import torch
    x = rng.standard_normal(shape)
    C = shape[1] if len(shape) > 1 else shape[0]
    t = rng.integers(0, C, (shape[0],) + shape[2:]) if len(shape) > 1 else np.array(int(rng.integers(0, C)))
    for reduction in ("mean", "none"):
        ours = F.cross_entropy(tt.from_numpy(x), tt.from_numpy(t), reduction=reduction)
        ref = torch.nn.functional.cross_entropy(torch.tensor(x), torch.tensor(t), reduction=reduction)
        np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-12, atol=1e-12)
