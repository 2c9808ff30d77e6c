"""conv1d/2d/3d, max/avg pools and batch_norm against torch (float64, forward and backward),
with the batch split into several tiles and a smaller last one; VJP checks; bad input."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import tiletrain as tt
import tiletrain.functional as F
from tiletrain.ops import backward
from tiletrain.testing.gradcheck import vjp_check

TOL = dict(rtol=1e-10, atol=1e-10)


def _whole(a):
    return tuple(a.shape)


def _batch(a, tb):
    return (tb,) + tuple(a.shape[1:])


def _against_torch(tt_fn, torch_fn, arrays, tiles, seed=1):
    """Forward and every input's gradient of tt_fn vs torch_fn, float64."""
    ts = [tt.from_numpy(a, t).requires_grad_() for a, t in zip(arrays, tiles)]
    tor = [torch.tensor(a, requires_grad=True) for a in arrays]
    y, yt = tt_fn(*ts), torch_fn(*tor)
    np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), **TOL)
    g = np.random.default_rng(seed).standard_normal(yt.shape)
    yt.backward(torch.tensor(g))
    backward(y, tt.from_numpy(g, y.tiles))
    for i, (t, r) in enumerate(zip(ts, tor)):
        np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), err_msg=f"grad of input {i}", **TOL)


CONVS = [  # (dims, x shape, weight shape, bias, batch tile, kwargs)
    (1, (5, 4, 11), (6, 4, 3), True, 2, dict(stride=2, padding=1)),
    (1, (5, 4, 10), (4, 2, 4), True, 3, dict(padding="same", dilation=2, groups=2)),
    (2, (7, 4, 9, 8), (6, 2, 3, 2), True, 3, dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)),
    (2, (7, 4, 6, 5), (5, 4, 1, 1), False, 4, dict()),
    (2, (5, 4, 8, 7), (4, 1, 3, 3), True, 2, dict(stride=3, padding="valid", groups=4)),
    (2, (5, 3, 6, 7), (4, 3, 3, 3), True, 2, dict(stride=2, padding=2)),
    (2, (5, 3, 6, 7), (4, 3, 4, 3), True, 2, dict(padding="same")),     # odd total padding: more on the right
    (3, (5, 2, 5, 6, 4), (3, 2, 2, 3, 2), True, 2,
     dict(stride=(1, 2, 1), padding=(1, 1, 0), dilation=(2, 1, 1))),
]


@pytest.mark.parametrize("dims, xs, ws, bias, tb, kw", CONVS)
def test_conv_against_torch(dims, xs, ws, bias, tb, kw):
    rng = np.random.default_rng(dims)
    arrays = [rng.standard_normal(xs), rng.standard_normal(ws)]
    arrays += [rng.standard_normal(ws[0])] if bias else []
    tiles = [_batch(arrays[0], tb)] + [_whole(a) for a in arrays[1:]]
    ours, theirs = getattr(F, f"conv{dims}d"), getattr(TF, f"conv{dims}d")
    if bias:
        _against_torch(lambda x, w, b: ours(x, w, b, **kw), lambda x, w, b: theirs(x, w, b, **kw),
                       arrays, tiles)
    else:
        _against_torch(lambda x, w: ours(x, w, **kw), lambda x, w: theirs(x, w, **kw), arrays, tiles)


def test_unbatched_input():
    """(C, *spatial) without a batch axis, as torch accepts."""
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((3, 7, 6)), rng.standard_normal((4, 3, 3, 2))
    _against_torch(lambda t, u: F.conv2d(t, u, padding=1), lambda t, u: TF.conv2d(t, u, padding=1), [x, w],
                   [x.shape, w.shape])
    _against_torch(lambda t: F.max_pool1d(t, 2), lambda t: TF.max_pool1d(t, 2), [x[0]], [(7, 6)])
    _against_torch(lambda t: F.avg_pool2d(t, 2, 1), lambda t: TF.avg_pool2d(t, 2, 1), [x], [(1, 7, 6)])


def test_conv_float32():
    rng = np.random.default_rng(3)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((5, 3, 8, 8), (4, 3, 3, 3), (4,)))
    y = F.conv2d(tt.from_numpy(x, (2, 3, 8, 8)), tt.from_numpy(w, w.shape), tt.from_numpy(b, (4,)), padding=1)
    ref = TF.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), padding=1).numpy()
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4, atol=1e-4)


POOLS = [  # (function name, x shape, batch tile, kwargs)
    ("max_pool1d", (5, 3, 11), 2, dict(kernel_size=3, stride=2, padding=1)),
    ("max_pool2d", (7, 3, 9, 8), 3, dict(kernel_size=(3, 2), stride=(2, 1), padding=1, dilation=(1, 2))),
    ("max_pool2d", (5, 2, 9, 8), 2, dict(kernel_size=3, stride=2, ceil_mode=True)),
    ("max_pool2d", (5, 2, 8, 6), 4, dict(kernel_size=2)),
    ("max_pool3d", (5, 2, 4, 6, 5), 2, dict(kernel_size=2, stride=(1, 2, 2), padding=(1, 0, 1))),
    ("avg_pool1d", (5, 3, 11), 2, dict(kernel_size=3, stride=2, padding=1)),
    ("avg_pool2d", (7, 3, 9, 8), 3, dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    ("avg_pool2d", (5, 2, 8, 9), 2, dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ("avg_pool2d", (5, 2, 8, 9), 2, dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                         count_include_pad=False)),
    ("avg_pool2d", (5, 2, 6, 6), 2, dict(kernel_size=2, divisor_override=3)),
    ("avg_pool3d", (5, 2, 4, 6, 5), 2, dict(kernel_size=(2, 2, 3), stride=(1, 2, 2), padding=(1, 0, 1))),
]


@pytest.mark.parametrize("name, xs, tb, kw", POOLS)
def test_pool_against_torch(name, xs, tb, kw):
    x = np.random.default_rng(len(xs)).standard_normal(xs)
    _against_torch(lambda t: getattr(F, name)(t, **kw), lambda t: getattr(TF, name)(t, **kw),
                   [x], [_batch(x, tb)])


def test_max_pool_ties_route_to_the_first_maximum():
    x = np.random.default_rng(0).integers(0, 2, (3, 2, 6, 6)).astype(np.float64)   # many ties
    _against_torch(lambda t: F.max_pool2d(t, 3, 1, 1), lambda t: TF.max_pool2d(t, 3, 1, 1),
                   [x], [(2, 2, 6, 6)])


@pytest.mark.parametrize("xs, tb", [((7, 3, 4, 5), 3), ((7, 3), 2), ((5, 4, 6), 2), ((5, 2, 3, 4, 2), 4)])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_against_torch(xs, tb, training):
    rng = np.random.default_rng(5)
    C = xs[1]
    x, w, b = rng.standard_normal(xs) * 2 + 1, rng.standard_normal(C), rng.standard_normal(C)
    rm0, rv0 = rng.standard_normal(C), rng.uniform(0.5, 2.0, C)
    rm, rv = tt.from_numpy(rm0.copy(), (C,)), tt.from_numpy(rv0.copy(), (C,))
    rmt, rvt = torch.tensor(rm0), torch.tensor(rv0)
    _against_torch(lambda t, tw, tb_: F.batch_norm(t, rm, rv, tw, tb_, training, 0.3, 1e-4),
                   lambda t, tw, tb_: TF.batch_norm(t, rmt, rvt, tw, tb_, training, 0.3, 1e-4),
                   [x, w, b], [_batch(x, tb), (C,), (C,)])
    np.testing.assert_allclose(rm.numpy(), rmt.numpy(), **TOL)
    np.testing.assert_allclose(rv.numpy(), rvt.numpy(), **TOL)
    if training:
        assert not np.allclose(rv.numpy(), rv0)   # updated in place


def test_operands_tiled_along_other_axes_are_retiled():
    """Tiling is a performance choice: inputs split along channels/space, weights split in
    several tiles, running statistics split too (updated in place all the same)."""
    rng = np.random.default_rng(4)
    x, w, b = rng.standard_normal((5, 4, 7, 6)), rng.standard_normal((6, 4, 3, 3)), rng.standard_normal(6)
    _against_torch(lambda t, u, c: F.max_pool2d(F.conv2d(t, u, c, padding=1), 2),
                   lambda t, u, c: TF.max_pool2d(TF.conv2d(t, u, c, padding=1), 2),
                   [x, w, b], [(2, 3, 4, 4), (4, 3, 2, 2), (4,)])
    rm0, rv0 = rng.standard_normal(4), rng.uniform(0.5, 2, 4)
    rm, rv = tt.from_numpy(rm0.copy(), (3,)), tt.from_numpy(rv0.copy(), (3,))
    rmt, rvt = torch.tensor(rm0), torch.tensor(rv0)
    _against_torch(lambda t, u: F.batch_norm(t, rm, rv, u, None, True),
                   lambda t, u: TF.batch_norm(t, rmt, rvt, u, None, True), [x, rng.standard_normal(4)],
                   [(2, 3, 4, 4), (3,)])
    np.testing.assert_allclose(rm.numpy(), rmt.numpy(), **TOL)
    np.testing.assert_allclose(rv.numpy(), rvt.numpy(), **TOL)


def test_batch_norm_without_affine_or_running_stats():
    x = np.random.default_rng(2).standard_normal((5, 3, 4))
    _against_torch(lambda t: F.batch_norm(t, None, None, training=True),
                   lambda t: TF.batch_norm(t, None, None, training=True), [x], [(2, 3, 4)])


def test_vjp_conv_pool_batch_norm():
    rng = np.random.default_rng(9)
    x, w, b = rng.standard_normal((5, 4, 6, 5)), rng.standard_normal((6, 2, 3, 2)), rng.standard_normal(6)
    vjp_check(lambda t, u, c: F.conv2d(t, u, c, stride=(1, 2), padding=1, dilation=(2, 1), groups=2),
              [x, w, b], [(2, 4, 6, 5), w.shape, (6,)])
    vjp_check(lambda t: F.max_pool2d(t, 2, 1, 1), [x], [(2, 4, 6, 5)])
    vjp_check(lambda t: F.avg_pool2d(t, 3, 2, 1, count_include_pad=False), [x], [(3, 4, 6, 5)])
    vjp_check(lambda t, u, c: F.batch_norm(t, None, None, u, c, True), [x, rng.standard_normal(4),
              rng.standard_normal(4)], [(2, 4, 6, 5), (4,), (4,)])


def _t(shape, tiles=None, dtype=np.float64):
    return tt.from_numpy(np.ones(shape, dtype), tiles or shape)


BAD = [
    (lambda: F.conv2d(_t((2, 3, 5, 5)), _t((4, 2, 3, 3))), ValueError, "channels"),
    (lambda: F.conv2d(_t((2, 4, 5, 5)), _t((3, 2, 3, 3)), groups=2), ValueError, "divisible by groups"),
    (lambda: F.conv2d(_t((2, 4, 5, 5)), _t((4, 4, 3, 3)), groups=0), ValueError, "groups"),
    (lambda: F.conv2d(_t((2, 3, 2, 5)), _t((4, 3, 3, 3))), ValueError, "larger than the padded input"),
    (lambda: F.conv2d(_t((5, 5)), _t((4, 3, 3, 3))), ValueError, "input must be 4-D"),
    (lambda: F.conv2d(_t((2, 3, 5, 5)), _t((4, 3, 3))), ValueError, "weight must be 4-D"),
    (lambda: F.conv1d(_t((2, 3, 5)), _t((4, 3, 3), dtype=np.float32)), TypeError, "weight is float32"),
    (lambda: F.conv1d(_t((2, 3, 5)), _t((4, 3, 3)), _t((3,))), ValueError, "bias must have shape"),
    (lambda: F.conv1d(_t((2, 3, 5)), _t((4, 3, 3)), stride=2, padding="same"), ValueError, "strided"),
    (lambda: F.conv1d(_t((2, 3, 5)), _t((4, 3, 3)), padding="full"), ValueError, "padding"),
    (lambda: F.conv1d(_t((2, 3, 5)), _t((4, 3, 3)), stride=0), ValueError, "stride"),
    (lambda: F.conv1d(_t((2, 3, 5)), _t((4, 3, 3)), dilation=(1, 1)), TypeError, "dilation"),
    (lambda: F.conv1d(np.ones((2, 3, 5)), _t((4, 3, 3))), TypeError, "input must be a tiletrain Tensor"),
    (lambda: F.max_pool2d(_t((2, 3, 5, 5)), 2, padding=2), ValueError, "at most half"),
    (lambda: F.max_pool2d(_t((2, 3, 2, 5)), 3), ValueError, "larger than the padded input"),
    (lambda: F.avg_pool1d(_t((2, 3, 5, 5)), 2), ValueError, "input must be 3-D"),
    (lambda: F.conv2d(_t((3, 2, 5), (2, 2, 5)), _t((4, 3, 3, 3))), ValueError, "larger than the padded"),
    (lambda: F.max_pool2d(_t((2, 3, 5, 5), dtype=np.float16), 2), TypeError, "float32 and float64"),
    (lambda: F.avg_pool2d(_t((2, 3, 5, 5)), 2, divisor_override=0), ValueError, "divisor_override"),
    (lambda: F.batch_norm(_t((2, 3, 4)), _t((4,)), _t((3,))), ValueError, "running_mean must have shape"),
    (lambda: F.batch_norm(_t((2, 3, 4)), None, None), ValueError, "required when training=False"),
    (lambda: F.batch_norm(_t((1, 3)), None, None, training=True), ValueError, "more than 1 value"),
    (lambda: F.batch_norm(_t((3,)), None, None, training=True), ValueError, "at least 2-D"),
]


@pytest.mark.parametrize("call, exc, match", BAD)
def test_bad_input_rejected_before_submission(call, exc, match, nothing_submitted):
    with pytest.raises(exc, match=match):
        call()
