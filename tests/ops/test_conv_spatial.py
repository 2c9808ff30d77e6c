"""Convolutions, pools and batch norm on activations tiled along D/H/W (halo windows): forward
and every gradient against torch in float64 to 1e-10, with odd sizes, smaller last tiles,
stride 2, padding and dilation; the tiling of outputs; bad input rejected before any task."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import tiletrain as tt
import tiletrain.functional as F
from tiletrain.distribution import Spatial
from tiletrain.ops import backward

TOL = dict(rtol=1e-10, atol=1e-10)


def _against_torch(tt_fn, torch_fn, arrays, tiles, seed=1):
    ts = [tt.from_numpy(a, t).requires_grad_() for a, t in zip(arrays, tiles)]
    tor = [torch.tensor(a, requires_grad=True) for a in arrays]
    y, yt = tt_fn(*ts), torch_fn(*tor)
    np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), **TOL)
    g = np.random.default_rng(seed).standard_normal(yt.shape)
    yt.backward(torch.tensor(g))
    backward(y, tt.from_numpy(g, y.tiles))
    for i, (t, r) in enumerate(zip(ts, tor)):
        np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), err_msg=f"grad of input {i}", **TOL)
    return y


CONVS = [  # (x shape, x tiles, weight shape, kwargs)
    ((2, 3, 7, 9, 6), (1, 3, 3, 4, 4), (4, 3, 3, 3, 3), dict(padding=1)),
    ((3, 2, 9, 8, 7), (2, 2, 4, 3, 4), (3, 2, 3, 2, 3), dict(stride=2, padding=1, dilation=(1, 2, 1))),
    ((2, 4, 8, 7, 9), (2, 4, 3, 3, 5), (4, 2, 2, 3, 3), dict(stride=(2, 1, 2), padding=(0, 1, 2), groups=2)),
    ((2, 2, 6, 6, 6), (1, 2, 2, 2, 2), (3, 2, 1, 1, 1), dict()),                    # pointwise: no halo
    ((2, 2, 9, 7, 8), (2, 2, 5, 4, 3), (2, 2, 3, 3, 3), dict(padding="same", dilation=(1, 1, 2))),
    ((3, 2, 11), (2, 2, 4), (3, 2, 3), dict(stride=2, padding=2)),                   # conv1d
    ((2, 3, 9, 10), (1, 3, 4, 3), (4, 3, 3, 3), dict(stride=(1, 2), padding=(2, 1), dilation=2)),   # conv2d
]


@pytest.mark.parametrize("xs, xt, ws, kw", CONVS)
def test_conv_spatial_tiles_against_torch(xs, xt, ws, kw):
    rng = np.random.default_rng(len(xs) + xs[2])
    x, w, b = rng.standard_normal(xs), rng.standard_normal(ws), rng.standard_normal(ws[0])
    dims = len(xs) - 2
    ours, theirs = getattr(F, f"conv{dims}d"), getattr(TF, f"conv{dims}d")
    y = _against_torch(lambda t, u, c: ours(t, u, c, **kw), lambda t, u, c: theirs(t, u, c, **kw),
                       [x, w, b], [xt, w.shape, b.shape])
    # the output is split along every axis the input is (where it is long enough)
    for j in range(2, len(xs)):
        if xt[j] < xs[j] and y.shape[j] > 1:
            assert y.grid[j] > 1, (y.shape, y.tiles)


POOLS = [  # (function, x shape, x tiles, kwargs)
    ("max_pool3d", (2, 2, 7, 8, 9), (1, 2, 3, 3, 4), dict(kernel_size=3, stride=2, padding=1)),
    ("max_pool3d", (2, 2, 8, 8, 8), (1, 2, 4, 4, 4), dict(kernel_size=2)),               # windows inside tiles
    ("max_pool3d", (2, 2, 9, 7, 8), (2, 2, 4, 3, 3), dict(kernel_size=2, stride=1, dilation=(2, 1, 2))),
    ("max_pool2d", (3, 2, 9, 8), (2, 2, 4, 3), dict(kernel_size=3, stride=2, ceil_mode=True)),
    ("avg_pool3d", (2, 2, 7, 8, 9), (1, 2, 3, 3, 4), dict(kernel_size=3, stride=2, padding=1)),
    ("avg_pool3d", (2, 2, 7, 8, 9), (1, 2, 3, 5, 4), dict(kernel_size=3, stride=2, padding=1,
                                                          count_include_pad=False, ceil_mode=True)),
    ("avg_pool2d", (2, 3, 9, 10), (2, 3, 4, 4), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ("avg_pool1d", (3, 2, 11), (2, 2, 3), dict(kernel_size=2, stride=2)),
]


@pytest.mark.parametrize("name, xs, xt, kw", POOLS)
def test_pool_spatial_tiles_against_torch(name, xs, xt, kw):
    x = np.random.default_rng(len(xs)).standard_normal(xs)
    _against_torch(lambda t: getattr(F, name)(t, **kw), lambda t: getattr(TF, name)(t, **kw), [x], [xt])


@pytest.mark.parametrize("xs, xt", [((3, 2, 7, 6, 5), (2, 2, 3, 4, 2)), ((2, 3, 9, 8), (1, 3, 4, 3)),
                                    ((4, 3, 11), (3, 3, 4))])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_spatial_tiles_against_torch(xs, xt, training):
    rng = np.random.default_rng(5)
    C = xs[1]
    x, w, b = rng.standard_normal(xs) * 2 + 1, rng.standard_normal(C), rng.standard_normal(C)
    rm0, rv0 = rng.standard_normal(C), rng.uniform(0.5, 2.0, C)
    rm, rv = tt.from_numpy(rm0.copy(), (C,)), tt.from_numpy(rv0.copy(), (C,))
    rmt, rvt = torch.tensor(rm0), torch.tensor(rv0)
    y = _against_torch(lambda t, tw, tb_: F.batch_norm(t, rm, rv, tw, tb_, training, 0.3, 1e-4),
                       lambda t, tw, tb_: TF.batch_norm(t, rmt, rvt, tw, tb_, training, 0.3, 1e-4),
                       [x, w, b], [xt, (C,), (C,)])
    assert y.tiles == xt    # no re-tiling: one task per tile
    np.testing.assert_allclose(rm.numpy(), rmt.numpy(), **TOL)
    np.testing.assert_allclose(rv.numpy(), rvt.numpy(), **TOL)


def test_small_cnn_chain_spatial_tiles():
    """conv -> batch norm -> relu -> max pool -> conv (stride 2) -> avg pool, split in
    space, against torch."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 1, 12, 11, 10))
    w1, b1 = rng.standard_normal((4, 1, 3, 3, 3)) * 0.3, rng.standard_normal(4)
    w2, b2 = rng.standard_normal((3, 4, 3, 3, 3)) * 0.3, rng.standard_normal(3)
    bw, bb = rng.standard_normal(4), rng.standard_normal(4)

    def ours(t, u1, c1, u2, c2, g, h):
        z = F.relu(F.batch_norm(F.conv3d(t, u1, c1, padding=1), None, None, g, h, True))
        z = F.conv3d(F.max_pool3d(z, 2), u2, c2, stride=2, padding=1)
        return F.avg_pool3d(z, 2, ceil_mode=True)

    def theirs(t, u1, c1, u2, c2, g, h):
        z = TF.relu(TF.batch_norm(TF.conv3d(t, u1, c1, padding=1), None, None, g, h, True))
        z = TF.conv3d(TF.max_pool3d(z, 2), u2, c2, stride=2, padding=1)
        return TF.avg_pool3d(z, 2, ceil_mode=True)

    arrays = [x, w1, b1, w2, b2, bw, bb]
    _against_torch(ours, theirs, arrays, [(1, 1, 6, 6, 5)] + [a.shape for a in arrays[1:]])


def _t(shape, tiles=None):
    return tt.from_numpy(np.ones(shape), tiles or shape)


BAD = [
    (lambda: F.conv3d(_t((1, 2, 8, 8, 8), (1, 2, 1, 8, 8)), _t((3, 2, 5, 3, 3)), padding=2), "smaller than the halo"),
    (lambda: F.conv2d(_t((1, 2, 8, 8), (1, 2, 8, 2)), _t((3, 2, 3, 7)), padding=(1, 3)), "along W"),
    (lambda: F.max_pool3d(_t((1, 2, 8, 8, 8), (1, 2, 1, 8, 8)), 5, 1, 2), "smaller than the halo"),
    (lambda: F.conv3d(_t((1, 2, 4, 8, 8), (1, 2, 2, 4, 4)), _t((3, 2, 5, 3, 3))), "larger than the padded input"),
    (lambda: F.avg_pool3d(_t((1, 2, 4, 8, 8), (1, 2, 2, 4, 4)), (5, 2, 2)), "larger than the padded input"),
    # an input placed on a 2-rank grid along D in 3 tiles: the grid does not divide the tiles
    (lambda: tt.from_numpy(np.ones((1, 1, 6, 4, 4)), (1, 1, 2, 4, 4), dist=Spatial(dims=(2,), grid=(2,))),
     "does not divide its 3 tiles"),
    (lambda: tt.zeros((3, 1, 4, 4, 4), tiles=(1, 1, 2, 4, 4), dist=Spatial(dims=(0, 2), grid=(2, 2))),
     "along axis 0 does not divide its 3 tiles"),
]


@pytest.mark.parametrize("call, match", BAD)
def test_bad_spatial_input_rejected_before_submission(call, match, nothing_submitted):
    with pytest.raises(ValueError, match=match):
        call()
