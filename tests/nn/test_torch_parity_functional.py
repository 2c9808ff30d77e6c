"""torch.nn.functional's padding modes, shrink/threshold activations (and in-place forms) and
margin losses, with their modules, against torch itself (float64; values and every gradient)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tiletrain as tt
import tiletrain.nn as nn
import tiletrain.nn.functional as F
from test_torch_parity import _same

TF = torch.nn.functional
RNG = np.random.default_rng(5)

PADS = [((1, 2), 3), ((2, 0), 2), ((1, 2, 0, 1), 4), ((1, 1, 2, 0), 3), ((1, 0, 1, 2, 0, 1), 5), ((1, 1, 1, 1, 1, 1), 4)]


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("pad,ndim", PADS)
def test_pad_modes(mode, pad, ndim):
    a = RNG.standard_normal((2, 3, 4, 5, 3)[:ndim])
    _same(lambda x: TF.pad(x, pad, mode), lambda x: F.pad(x, pad, mode), a)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes_bad_input(mode):
    with pytest.raises(NotImplementedError):
        TF.pad(torch.zeros(4), (1, 1), mode)
    with pytest.raises(NotImplementedError):
        F.pad(tt.zeros(4), (1, 1), mode)
    with pytest.raises(NotImplementedError):
        F.pad(tt.zeros((1, 2, 3, 4, 5)), (1, 1), mode)


def test_pad_too_large():
    with pytest.raises(RuntimeError):
        TF.pad(torch.zeros(1, 2, 3), (3, 0), "reflect")
    with pytest.raises(RuntimeError):
        F.pad(tt.zeros((1, 2, 3)), (3, 0), "reflect")
    with pytest.raises(RuntimeError):
        F.pad(tt.zeros((1, 2, 3)), (4, 0), "circular")


MODULES = [(f"{kind}Pad{n}d", n) for kind in ("Reflection", "Replication", "Circular") for n in (1, 2, 3)]


@pytest.mark.parametrize("name,n", MODULES, ids=[m for m, _ in MODULES])
@pytest.mark.parametrize("padding", [1, "tuple"])
def test_pad_modules(name, n, padding):
    padding = tuple(range(1, 2 * n + 1)) if padding == "tuple" else padding
    padding = tuple(min(p, 2) for p in padding) if isinstance(padding, tuple) else padding
    a = RNG.standard_normal((2, 3, 4, 5, 4)[:n + 2])
    _same(getattr(torch.nn, name)(padding), getattr(nn, name)(padding), a)
    assert repr(getattr(nn, name)(padding)) == repr(getattr(torch.nn, name)(padding))


@pytest.fixture
def x():
    a = RNG.standard_normal((5, 6))
    a[0, :4] = [0.5, -0.5, 0.7, -0.7]  # the kinks at lambd / threshold
    return a


@pytest.mark.parametrize("name,args", [("hardshrink", ()), ("hardshrink", (0.7,)), ("softshrink", ()),
                                       ("softshrink", (0.7,)), ("threshold", (0.7, -2.0)), ("threshold", (-0.5, 3.0))])
def test_shrink_threshold(name, args, x):
    _same(lambda t: getattr(TF, name)(t, *args), lambda t: getattr(F, name)(t, *args), x)
    module = {"hardshrink": "Hardshrink", "softshrink": "Softshrink", "threshold": "Threshold"}[name]
    _same(getattr(torch.nn, module)(*args), getattr(nn, module)(*args), x)
    assert repr(getattr(nn, module)(*args)) == repr(getattr(torch.nn, module)(*args))


def test_softshrink_negative_lambda():
    with pytest.raises(RuntimeError):
        TF.softshrink(torch.zeros(2), -1.0)
    with pytest.raises(RuntimeError):
        F.softshrink(tt.zeros(2), -1.0)


# celu_ with alpha 0.5: torch's in-place celu backward rounds 1/alpha to float32 (a 1e-8 difference otherwise)
INPLACE = [("relu_", ()), ("elu_", (0.5,)), ("leaky_relu_", (0.2,)), ("hardtanh_", (-0.5, 0.7)), ("selu_", ()),
           ("celu_", (0.5,)), ("threshold_", (0.1, -3.0))]


@pytest.mark.parametrize("name,args", INPLACE, ids=[n for n, _ in INPLACE])
def test_inplace_functional(name, args, x):
    def run(lib, fn):
        def f(t):
            y = lib.mul(t, 2.0) if lib is tt else t * 2.0
            r = fn(y, *args)
            assert r is y
            return y
        return f
    ft = getattr(torch.nn.functional, name) if hasattr(torch.nn.functional, name) else getattr(torch, name)
    _same(run(torch, ft), run(tt, getattr(F, name)), x)
    a, b = torch.tensor(x), tt.tensor(x)  # outside the graph: written into the tensor itself
    ft(a, *args)
    getattr(F, name)(b, *args)
    np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-12, atol=1e-14)


def test_threshold_inplace_flag(x):
    a, b = torch.tensor(x), tt.tensor(x)
    TF.threshold(a, 0.2, 9.0, inplace=True)
    nn.Threshold(0.2, 9.0, inplace=True)(b)
    np.testing.assert_allclose(b.numpy(), a.numpy())


def _loss(fn, t):  # the target is data (torch refuses a target that requires grad)
    return lambda u: fn(u, torch.tensor(t) if isinstance(u, torch.Tensor) else tt.tensor(t))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_soft_margin_loss(reduction):
    a, t = RNG.standard_normal((4, 5)), np.sign(RNG.standard_normal((4, 5)))
    _same(_loss(lambda u, v: TF.soft_margin_loss(u, v, reduction=reduction), t),
          _loss(lambda u, v: F.soft_margin_loss(u, v, reduction=reduction), t), a)
    _same(_loss(torch.nn.SoftMarginLoss(reduction=reduction), t), _loss(nn.SoftMarginLoss(reduction=reduction), t), a)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("margin", [1.0, 0.3])
def test_hinge_embedding_loss(reduction, margin):
    a, t = RNG.standard_normal((4, 5)), np.sign(RNG.standard_normal((4, 5)))
    _same(_loss(lambda u, v: TF.hinge_embedding_loss(u, v, margin=margin, reduction=reduction), t),
          _loss(lambda u, v: F.hinge_embedding_loss(u, v, margin=margin, reduction=reduction), t), a)
    _same(_loss(torch.nn.HingeEmbeddingLoss(margin, reduction=reduction), t),
          _loss(nn.HingeEmbeddingLoss(margin, reduction=reduction), t), a)


def test_bad_reduction():
    with pytest.raises(ValueError):
        F.soft_margin_loss(tt.zeros(3), tt.zeros(3), reduction="avg")
    with pytest.raises(ValueError):
        TF.soft_margin_loss(torch.zeros(3), torch.zeros(3), reduction="avg")


def test_pad_mode_errors():
    for lib, pad in ((torch, TF.pad), (tt, F.pad)):
        with pytest.raises(NotImplementedError, match="foo"):
            pad(lib.zeros((2, 3)), (1, 1), mode="foo")
        with pytest.raises(RuntimeError, match="value"):
            pad(lib.zeros((2, 3)), (1, 1), mode="reflect", value=2.0)


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0])
@pytest.mark.parametrize("keepdim", [False, True])
def test_pairwise_distance(p, keepdim):
    a, b = RNG.standard_normal((4, 5)), RNG.standard_normal((4, 5))
    _same(lambda u, v: TF.pairwise_distance(u, v, p, keepdim=keepdim),
          lambda u, v: F.pairwise_distance(u, v, p, keepdim=keepdim), a, b)
    _same(torch.nn.PairwiseDistance(p, keepdim=keepdim), nn.PairwiseDistance(p, keepdim=keepdim), a, b)


@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 3, 4, 5)])
def test_softmax2d(shape):
    _same(torch.nn.Softmax2d(), nn.Softmax2d(), RNG.standard_normal(shape))


def test_softmax2d_bad_input():
    with pytest.raises(ValueError):
        torch.nn.Softmax2d()(torch.zeros(2, 3))
    with pytest.raises(ValueError):
        nn.Softmax2d()(tt.zeros((2, 3)))


@pytest.mark.parametrize("shape,groups", [((2, 6, 3), 2), ((2, 6, 2, 3), 3), ((1, 4, 2, 2, 2), 4)])
def test_channel_shuffle(shape, groups):
    a = RNG.standard_normal(shape)
    _same(lambda u: TF.channel_shuffle(u, groups), lambda u: F.channel_shuffle(u, groups), a)
    _same(torch.nn.ChannelShuffle(groups), nn.ChannelShuffle(groups), a)
    with pytest.raises(RuntimeError):
        F.channel_shuffle(tt.zeros((2, 5, 3)), 2)


def test_upsample_family():
    a = RNG.standard_normal((2, 3, 4, 5))
    _same(lambda u: TF.upsample(u, scale_factor=2), lambda u: F.upsample(u, scale_factor=2), a)
    _same(lambda u: TF.upsample(u, size=(7, 6), mode="bilinear"), lambda u: F.upsample(u, size=(7, 6), mode="bilinear"), a)
    _same(lambda u: TF.upsample_nearest(u, size=(6, 9)), lambda u: F.upsample_nearest(u, size=(6, 9)), a)
    _same(lambda u: TF.upsample_bilinear(u, scale_factor=2), lambda u: F.upsample_bilinear(u, scale_factor=2), a)
    _same(torch.nn.UpsamplingNearest2d(scale_factor=2), nn.UpsamplingNearest2d(scale_factor=2), a)
    _same(torch.nn.UpsamplingBilinear2d(size=(7, 9)), nn.UpsamplingBilinear2d(size=(7, 9)), a)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_multilabel_soft_margin_loss(reduction, weighted):
    a, t = RNG.standard_normal((4, 5)), (RNG.random((4, 5)) > 0.5).astype(np.float64)
    w = RNG.random(5) if weighted else None
    kw = lambda lib: {"weight": None if w is None else lib.tensor(w), "reduction": reduction}  # noqa: E731
    _same(_loss(lambda u, v: TF.multilabel_soft_margin_loss(u, v, **kw(torch)), t),
          _loss(lambda u, v: F.multilabel_soft_margin_loss(u, v, **kw(tt)), t), a)
    _same(_loss(torch.nn.MultiLabelSoftMarginLoss(**kw(torch)), t), _loss(nn.MultiLabelSoftMarginLoss(**kw(tt)), t), a)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("var_shape", [(4, 5), (4,), (4, 1)])
def test_gaussian_nll_loss(reduction, full, var_shape):
    a, t = RNG.standard_normal((4, 5)), RNG.standard_normal((4, 5))
    v = RNG.random(var_shape) + 0.1
    v.flat[0] = 1e-8  # below eps: clamped for the value, the gradient passes
    _same(lambda u, s, va: TF.gaussian_nll_loss(u, s, va, full=full, reduction=reduction),
          lambda u, s, va: F.gaussian_nll_loss(u, s, va, full=full, reduction=reduction), a, t, v)
    _same(torch.nn.GaussianNLLLoss(full=full, reduction=reduction), nn.GaussianNLLLoss(full=full, reduction=reduction),
          a, t, v)


def test_gaussian_nll_loss_bad_input():
    for lib, fn in ((torch, TF.gaussian_nll_loss), (tt, F.gaussian_nll_loss)):
        with pytest.raises(ValueError):
            fn(lib.zeros((4, 5)), lib.zeros((4, 5)), lib.ones((3,)))
        with pytest.raises(ValueError):
            fn(lib.zeros((4, 5)), lib.zeros((4, 5)), lib.full((4, 5), -1.0))


@pytest.mark.parametrize("name,shape,lead", [("dropout1d", (8, 50, 3), 2), ("dropout1d", (50, 3), 1),
                                             ("dropout2d", (8, 50, 2, 3), 2), ("dropout2d", (8, 50, 3), 2),
                                             ("dropout3d", (8, 50, 2, 2, 2), 2), ("dropout3d", (50, 2, 2, 2), 1)])
def test_channel_dropout(name, shape, lead):
    p = 0.3
    x = tt.tensor(RNG.random(shape) + 1.0)
    y = getattr(F, name)(x, p).numpy()
    ratio = (y / x.numpy()).reshape(shape[:lead] + (-1,))
    assert np.all((ratio == 0.0).all(-1) | np.isclose(ratio, 1 / (1 - p)).all(-1))  # whole channels
    dropped = (ratio == 0.0).all(-1).mean()
    assert 0.15 < dropped < 0.45
    np.testing.assert_array_equal(getattr(F, name)(x, p, training=False).numpy(), x.numpy())
    module = getattr(nn, name.replace("dropout", "Dropout"))(p)
    np.testing.assert_array_equal(module.eval()(x).numpy(), x.numpy())
    assert repr(module) == repr(getattr(torch.nn, name.replace("dropout", "Dropout"))(p))
    with pytest.raises(ValueError):
        getattr(F, name)(x, 1.5)


def test_channel_dropout_gradient():
    x = tt.tensor(np.ones((4, 30, 3)), requires_grad=True)
    y = F.dropout1d(x, 0.5)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), y.detach().numpy())
    with pytest.raises(RuntimeError):
        F.dropout1d(tt.zeros((2, 3, 4, 5)))


@pytest.mark.parametrize("name", ["alpha_dropout", "feature_alpha_dropout"])
def test_alpha_dropout(name):
    p, alpha = 0.2, 1.7580993408473766
    a = 1.0 / np.sqrt((alpha * alpha * p + 1) * (1 - p))
    x = tt.tensor(RNG.standard_normal((40, 50, 6)), requires_grad=True)
    y = getattr(F, name)(x, p, training=True)
    kept = np.isclose(y.detach().numpy(), a * x.detach().numpy() + alpha * a * p)
    dropped = np.isclose(y.detach().numpy(), alpha * a * (p - 1))
    assert np.all(kept | dropped)
    if name == "feature_alpha_dropout":  # whole channels
        assert np.all(dropped.all(-1) | kept.all(-1))
    assert 0.15 < dropped.mean() < 0.25
    assert abs(y.detach().numpy().mean()) < 0.05 and abs(y.detach().numpy().std() - 1.0) < 0.05  # selu's statistics kept
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.where(kept, a, 0.0))
    np.testing.assert_array_equal(getattr(F, name)(x, p).detach().numpy(), x.detach().numpy())  # training=False by default, as torch
    module = getattr(nn, {"alpha_dropout": "AlphaDropout", "feature_alpha_dropout": "FeatureAlphaDropout"}[name])(p)
    np.testing.assert_array_equal(module.eval()(x).detach().numpy(), x.detach().numpy())
    with pytest.raises(ValueError):
        getattr(F, name)(x, -0.1)


def test_rrelu(x):
    _same(lambda u: TF.rrelu(u), lambda u: F.rrelu(u), x)
    _same(lambda u: TF.rrelu(u, 0.1, 0.3), lambda u: F.rrelu(u, 0.1, 0.3), x)
    _same(torch.nn.RReLU().eval(), nn.RReLU().eval(), x)
    assert repr(nn.RReLU(0.1, 0.3)) == repr(torch.nn.RReLU(0.1, 0.3))
    big = tt.tensor(-np.abs(RNG.standard_normal((200, 50))) - 0.1)
    slope = F.rrelu(big, 0.1, 0.3, training=True).numpy() / big.numpy()
    assert slope.min() >= 0.1 and slope.max() < 0.3 and abs(slope.mean() - 0.2) < 0.005
    pos = tt.tensor(np.abs(RNG.standard_normal((5, 5))) + 0.1)
    np.testing.assert_array_equal(nn.RReLU()(pos).numpy(), pos.numpy())


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("custom", [False, True])
def test_triplet_margin_with_distance_loss(reduction, swap, custom):
    a, p, n = (RNG.standard_normal((4, 5)) for _ in range(3))

    def kw(lib):
        dist = (lambda u, v: 1.0 - lib.nn.functional.cosine_similarity(u, v)) if custom else None
        return {"distance_function": dist, "margin": 0.7, "swap": swap, "reduction": reduction}
    _same(lambda *t: TF.triplet_margin_with_distance_loss(*t, **kw(torch)),
          lambda *t: F.triplet_margin_with_distance_loss(*t, **kw(tt)), a, p, n)
    _same(torch.nn.TripletMarginWithDistanceLoss(**kw(torch)), nn.TripletMarginWithDistanceLoss(**kw(tt)), a, p, n)
    with pytest.raises(ValueError):
        nn.TripletMarginWithDistanceLoss(margin=0.0)


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0])
def test_pdist(p):
    _same(lambda u: TF.pdist(u, p), lambda u: F.pdist(u, p), RNG.standard_normal((5, 4)))
    with pytest.raises(RuntimeError):
        F.pdist(tt.zeros((2, 3, 4)))


@pytest.mark.parametrize("shape", [(2, 7, 5), (2, 7, 3, 4), (2, 6, 2, 3, 2)])
@pytest.mark.parametrize("size", [2, 3])
def test_local_response_norm(shape, size):
    a = RNG.standard_normal(shape)
    _same(lambda u: TF.local_response_norm(u, size, 0.3, 0.6, 2.0), lambda u: F.local_response_norm(u, size, 0.3, 0.6, 2.0),
          a)
    _same(torch.nn.LocalResponseNorm(size), nn.LocalResponseNorm(size), a)
    assert repr(nn.LocalResponseNorm(size)) == repr(torch.nn.LocalResponseNorm(size))
    with pytest.raises(ValueError):
        F.local_response_norm(tt.zeros((2, 3)), 2)


@pytest.mark.parametrize("norm_type", [2.0, 3.0, 1.5])
def test_lp_pool(norm_type):
    a = RNG.random((2, 3, 6, 7)) + 0.1  # positive: fractional powers of negative numbers are NaN in both
    _same(lambda u: TF.lp_pool2d(u, norm_type, 2), lambda u: F.lp_pool2d(u, norm_type, 2), a)
    _same(lambda u: TF.lp_pool2d(u, norm_type, (2, 3), stride=(1, 2), ceil_mode=True),
          lambda u: F.lp_pool2d(u, norm_type, (2, 3), stride=(1, 2), ceil_mode=True), a)
    _same(lambda u: TF.lp_pool1d(u, norm_type, 3), lambda u: F.lp_pool1d(u, norm_type, 3), a[0])
    _same(torch.nn.LPPool1d(norm_type, 2, 1), nn.LPPool1d(norm_type, 2, 1), a[0])
    _same(torch.nn.LPPool2d(norm_type, 2), nn.LPPool2d(norm_type, 2), a)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("p,margin,weighted", [(1, 1.0, False), (2, 0.7, False), (1, 1.3, True), (2, 1.0, True)])
def test_multi_margin_loss(reduction, p, margin, weighted):
    a, y = RNG.standard_normal((6, 5)), RNG.integers(0, 5, 6)
    w = RNG.random(5) + 0.5 if weighted else None

    def run(lib, fn):
        kw = {"p": p, "margin": margin, "weight": None if w is None else lib.tensor(w), "reduction": reduction}
        return lambda u: fn(u, lib.tensor(y), **kw)
    _same(run(torch, TF.multi_margin_loss), run(tt, F.multi_margin_loss), a)
    _same(run(torch, lambda u, t, **kw: torch.nn.MultiMarginLoss(**kw)(u, t)),
          run(tt, lambda u, t, **kw: nn.MultiMarginLoss(**kw)(u, t)), a)
    _same(lambda u: TF.multi_margin_loss(u, torch.tensor(2), p=p, reduction=reduction),
          lambda u: F.multi_margin_loss(u, tt.tensor(2), p=p, reduction=reduction), a[0])
    with pytest.raises(ValueError):
        F.multi_margin_loss(tt.tensor(a), tt.tensor(y), p=3)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_multilabel_margin_loss(reduction):
    a = RNG.standard_normal((4, 5))
    y = np.array([[3, 0, -1, 1, 2], [1, 2, 3, 4, 0], [-1, 2, 0, 0, 0], [4, 4, 1, -1, 2]])  # after -1: ignored
    _same(lambda u: TF.multilabel_margin_loss(u, torch.tensor(y), reduction=reduction),
          lambda u: F.multilabel_margin_loss(u, tt.tensor(y), reduction=reduction), a)
    _same(lambda u: torch.nn.MultiLabelMarginLoss(reduction=reduction)(u, torch.tensor(y)),
          lambda u: nn.MultiLabelMarginLoss(reduction=reduction)(u, tt.tensor(y)), a)
    _same(lambda u: TF.multilabel_margin_loss(u, torch.tensor(y[0]), reduction=reduction),
          lambda u: F.multilabel_margin_loss(u, tt.tensor(y[0]), reduction=reduction), a[0])
