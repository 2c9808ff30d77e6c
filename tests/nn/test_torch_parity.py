"""torch's activations, losses, tensor methods, in-place rules, integer arithmetic,
optimizers, schedulers and sequence modules, each against torch itself (float64; values and
every gradient)."""
from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

import tiletrain as tt
import tiletrain.nn as nn
import tiletrain.nn.functional as F

TF = torch.nn.functional


def _run(fn_t, fn_tt, arrays, grad=True):
    A = [torch.tensor(a, requires_grad=grad and a.dtype == np.float64) for a in arrays]
    B = [tt.tensor(a, requires_grad=grad and a.dtype == np.float64) for a in arrays]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ra, rb = fn_t(*A), fn_tt(*B)
    return A, B, ra, rb


def _same(fn_t, fn_tt, *arrays, rtol=1e-12, atol=1e-14, grad=True):
    A, B, ra, rb = _run(fn_t, fn_tt, arrays, grad)
    if isinstance(ra, (tuple, list)):
        for u, v in zip(ra, rb):
            np.testing.assert_allclose(v.detach().numpy(), u.detach().numpy(), rtol=rtol, atol=atol)
            assert v.detach().numpy().dtype == u.detach().numpy().dtype
        return
    np.testing.assert_allclose(rb.detach().numpy(), ra.detach().numpy(), rtol=rtol, atol=atol)
    assert rb.detach().numpy().dtype == ra.detach().numpy().dtype
    if grad and ra.requires_grad:
        w = np.random.default_rng(9).standard_normal(tuple(ra.shape))
        ra.backward(torch.tensor(w))
        rb.backward(tt.tensor(w))
        for a, b in zip(A, B):
            if a.grad is not None:
                np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=rtol, atol=atol)


@pytest.fixture
def x():
    a = np.random.default_rng(1).standard_normal((6, 4)) * 3
    a[0, :4] = [-3.0, 3.0, 0.0, 6.0]  # the kinks of hardswish, hardsigmoid, relu6
    return a


ACTIVATIONS = [("leaky_relu", {"negative_slope": 0.2}), ("elu", {"alpha": 0.7}), ("selu", {}), ("celu", {"alpha": 0.5}),
               ("softplus", {"beta": 2.0, "threshold": 5.0}), ("hardtanh", {"min_val": -0.5}), ("relu6", {}),
               ("hardsigmoid", {}), ("hardswish", {}), ("logsigmoid", {}), ("mish", {}), ("softsign", {}),
               ("tanhshrink", {})]


@pytest.mark.parametrize("name,kw", ACTIVATIONS, ids=[a for a, _ in ACTIVATIONS])
def test_activation_functions_and_modules_equal_torch(name, kw, x):
    _same(lambda t: getattr(TF, name)(t, **kw), lambda t: getattr(F, name)(t, **kw), x)
    cls = {"leaky_relu": "LeakyReLU", "elu": "ELU", "selu": "SELU", "celu": "CELU", "softplus": "Softplus",
           "hardtanh": "Hardtanh", "relu6": "ReLU6", "hardsigmoid": "Hardsigmoid", "hardswish": "Hardswish",
           "logsigmoid": "LogSigmoid", "mish": "Mish", "softsign": "Softsign", "tanhshrink": "Tanhshrink"}[name]
    _same(getattr(torch.nn, cls)(**kw), getattr(nn, cls)(**kw), x)


@pytest.mark.parametrize("name", ["log1p", "expm1", "erf", "floor", "ceil", "round", "trunc", "square", "log2", "log10"])
def test_unary_functions_equal_torch(name, x):
    a = np.abs(x) + 0.1 if name in ("log1p", "log2", "log10") else x
    a = a.copy()
    a[1, :3] = [0.5, 1.5, -2.5]  # round: halves to even
    _same(getattr(torch, name), getattr(tt, name), a)


def test_composed_functions_equal_torch(x):
    y = np.random.default_rng(2).standard_normal(x.shape)
    _same(lambda a: TF.glu(a, 1), lambda a: F.glu(a, 1), x)
    _same(lambda a: TF.softmin(a, 1), lambda a: F.softmin(a, 1), x)
    _same(lambda a: TF.normalize(a, dim=0), lambda a: F.normalize(a, dim=0), x)
    _same(TF.cosine_similarity, F.cosine_similarity, x, y)
    _same(lambda a: TF.pad(a, (1, 2, 0, 1), value=3.0), lambda a: F.pad(a, (1, 2, 0, 1), value=3.0), x)
    _same(lambda a: TF.pad(a, (-1, 2)), lambda a: F.pad(a, (-1, 2)), x)
    _same(lambda a: TF.pad(a, (1, 1), mode="reflect"), lambda a: F.pad(a, (1, 1), mode="reflect"), x)
    with pytest.raises(NotImplementedError, match="foo"):
        F.pad(tt.tensor(x), (1, 1), mode="foo")


def test_losses_and_loss_modules_equal_torch():
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((6, 4)), rng.standard_normal((6, 4))
    p, q = rng.random((6, 4)) * 0.98 + 0.01, rng.random((6, 4))
    t = rng.integers(0, 4, 6)
    t[2] = -100
    w = rng.random(4)
    for red in ("mean", "sum", "none"):
        _same(lambda a, b: TF.binary_cross_entropy(a, b, reduction=red),
              lambda a, b: F.binary_cross_entropy(a, b, reduction=red), p, q)
        _same(lambda a, b: TF.smooth_l1_loss(a, b, reduction=red, beta=0.5),
              lambda a, b: F.smooth_l1_loss(a, b, reduction=red, beta=0.5), x, y)
        _same(lambda a, b: TF.huber_loss(a, b, reduction=red, delta=0.7),
              lambda a, b: F.huber_loss(a, b, reduction=red, delta=0.7), x, y)
        _same(lambda a: TF.nll_loss(a, torch.tensor(t), weight=torch.tensor(w), reduction=red),
              lambda a: F.nll_loss(a, tt.tensor(t), weight=tt.tensor(w), reduction=red), x)
        _same(lambda a, b: TF.mse_loss(a, b, reduction=red, weight=torch.tensor(q)),
              lambda a, b: F.mse_loss(a, b, reduction=red, weight=tt.tensor(q)), x, y)
        _same(lambda a, b: TF.l1_loss(a, b, reduction=red, weight=torch.tensor(q)),
              lambda a, b: F.l1_loss(a, b, reduction=red, weight=tt.tensor(q)), x, y)
    _same(lambda a, b: TF.kl_div(TF.log_softmax(a, 1), b, reduction="batchmean"),
          lambda a, b: F.kl_div(F.log_softmax(a, 1), b, reduction="batchmean"), x, q)
    _same(lambda a, b: TF.kl_div(a, b, log_target=True), lambda a, b: F.kl_div(a, b, log_target=True), x, y)
    x3 = rng.standard_normal((3, 4, 5))  # (N, C, d): classes on dim 1
    t3 = rng.integers(0, 4, (3, 5))
    _same(lambda a: TF.nll_loss(a, torch.tensor(t3)), lambda a: F.nll_loss(a, tt.tensor(t3)), x3)
    _same(lambda a: torch.nn.CrossEntropyLoss(label_smoothing=0.1)(a, torch.tensor(t)),
          lambda a: nn.CrossEntropyLoss(label_smoothing=0.1)(a, tt.tensor(t)), x)
    _same(lambda a: torch.nn.NLLLoss(weight=torch.tensor(w))(a, torch.tensor(t)),
          lambda a: nn.NLLLoss(weight=tt.tensor(w))(a, tt.tensor(t)), x)
    for name in ("MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCEWithLogitsLoss"):
        _same(getattr(torch.nn, name)(), getattr(nn, name)(), x, q)
    _same(torch.nn.BCELoss(), nn.BCELoss(), p, q)
    assert list(nn.CrossEntropyLoss(weight=tt.ones(3)).state_dict()) == ["weight"]
    with pytest.raises(NotImplementedError, match="size_average"):
        nn.MSELoss(size_average=True)


def test_softmax_modules_take_torchs_implicit_dim(x):
    for name in ("Softmax", "LogSoftmax", "Softmin"):
        _same(getattr(torch.nn, name)(), getattr(nn, name)(), x)
        _same(getattr(torch.nn, name)(dim=0), getattr(nn, name)(dim=0), x)


def test_integer_arithmetic_is_torchs():
    a = np.random.default_rng(4).integers(-7, 9, (4, 5))
    b = np.where(a == 0, 3, a)
    for f in (lambda M, u, v: u + 3, lambda M, u, v: u * v - 2, lambda M, u, v: -u, lambda M, u, v: u // 3,
              lambda M, u, v: u % -3, lambda M, u, v: 7 // v, lambda M, u, v: M.div(u, v, rounding_mode="trunc"),
              lambda M, u, v: M.fmod(u, v), lambda M, u, v: u ** 2, lambda M, u, v: u / 2, lambda M, u, v: u + 0.5,
              lambda M, u, v: u.max(), lambda M, u, v: u.argmax(1), lambda M, u, v: u.cumsum(1),
              lambda M, u, v: (u > 0).sum(), lambda M, u, v: u.min(1, keepdim=True)):
        _same(lambda u, v: f(torch, u, v), lambda u, v: f(tt, u, v), a, b, grad=False)
    xf = np.random.default_rng(5).standard_normal((4, 5))
    _same(lambda u, v: u * v, lambda u, v: u * v, a, xf)                 # int * float tensor: float
    _same(lambda u, v: torch.maximum(u, v), lambda u, v: tt.maximum(u, v), a, xf)
    _same(lambda u, v: torch.minimum(v, u), lambda u, v: tt.minimum(v, u), a, xf)
    _same(lambda v: v // 0.3, lambda v: v // 0.3, xf, grad=False)  # (torch has no derivative for it)
    _same(lambda v: v % 0.7, lambda v: v % 0.7, xf)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        tt.tensor(a) // 0
    with pytest.raises(RuntimeError, match="bool tensor is not supported"):
        tt.tensor(a > 0) - tt.tensor(a > 1)


def test_tensor_methods_equal_torch(x):
    a = np.random.default_rng(6).integers(-3, 4, (6, 4))
    m = x > 0
    cases = [lambda M, t: M.flip(t, (0, 1)), lambda M, t: M.roll(t, 2, 1), lambda M, t: M.roll(t, 3),
             lambda M, t: t.repeat(2, 1, 3), lambda M, t: M.unbind(t, 1), lambda M, t: t.narrow(1, 1, 2),
             lambda M, t: M.movedim(t.reshape(2, 3, 4), 0, 2), lambda M, t: M.hstack([t, t]),
             lambda M, t: M.vstack([t, t[0]]), lambda M, t: M.mm(t, t.t()),
             lambda M, t: M.bmm(t.reshape(2, 3, 4), t.reshape(2, 4, 3)), lambda M, t: M.mv(t, t[0]),
             lambda M, t: M.dot(t[0], t[1]), lambda M, t: M.cumsum(t, 0), lambda M, t: M.sort(t, 1),
             lambda M, t: t.sort(0, descending=True), lambda M, t: t.lerp(t * 2, 0.3), lambda M, t: t.clamp_min(0.1),
             lambda M, t: M.masked_select(t, M.tensor(m)), lambda M, t: M.isfinite(t / t.round()),
             lambda M, t: M.prod(t, 1), lambda M, t: t.prod(), lambda M, t: t.std(0, unbiased=False),
             lambda M, t: M.var(t, False), lambda M, t: t.var(1, True, True),
             lambda M, t: M.meshgrid(t[0], t[1, :3], t[2, :2], indexing="xy"),
             lambda M, t: M.meshgrid(t[0], t[1, :3], indexing="ij")]
    for f in cases:
        _same(lambda t: f(torch, t), lambda t: f(tt, t), x)
    for f in (lambda M, t: M.nonzero(t), lambda M, t: M.nonzero(t, as_tuple=True), lambda M, t: t.argsort(1),
              lambda M, t: (t > 0).any(), lambda M, t: M.all(t > -3, 1), lambda M, t: M.count_nonzero(t, 0)):
        _same(lambda t: f(torch, t), lambda t: f(tt, t), a, grad=False)
    t = tt.tensor(x)
    assert t.new_zeros(2, 3).shape == (2, 3) and t.new_full((2,), 3.0).dtype == np.float64
    assert t.type() == "torch.DoubleTensor" and t.stride() == (4, 1) and t.element_size() == 8
    assert tt.equal(t, t * 1) and tt.allclose(t, t + 1e-9) and not tt.equal(t, t + 1)
    np.testing.assert_array_equal(tt.eye(3, 4).numpy(), np.eye(3, 4, dtype=np.float32))
    assert sorted(tt.randperm(7, generator=tt.Generator().manual_seed(1)).tolist()) == list(range(7))


def _inplace_program(M, x, m):
    w = M.tensor(x.copy(), requires_grad=True)
    h = w * 2
    h += 1
    h.mul_(3)
    h.masked_fill_(M.tensor(m), 0.5)
    h.clamp_(max=4.0)
    out = h.exp()
    out.sum().backward()
    with M.no_grad():
        w -= 0.1 * w.grad
        w.data.mul_(0.5)
        p = w.data
        p.add_(1.0)
    return out, w


def _read_then_in_place(M, x):
    """In-place ops on tensors recorded ops already read, where torch allows them (the readers'
    backward does not need the old value): the tensor changes under every name it has."""
    w = M.tensor(x.copy(), requires_grad=True)
    z = w * 2
    r = z * 3
    z.mul_(2)
    z2 = z
    z *= 2
    assert z is z2
    h = w.sin()
    s = h + 1                # add does not need h's value
    h.add_(1.5)
    (z.sum() + z2.sum() + r.sum() + (s * h).sum()).backward()
    return z, h, w.grad


def test_in_place_ops_follow_torchs_rules(x):
    m = x > 1
    for u, v in zip(_inplace_program(torch, x, m), _inplace_program(tt, x, m)):
        np.testing.assert_allclose(v.detach().numpy(), u.detach().numpy(), rtol=1e-12)
    for u, v in zip(_read_then_in_place(torch, x), _read_then_in_place(tt, x)):
        np.testing.assert_allclose(v.detach().numpy(), u.detach().numpy(), rtol=1e-12)
    w = tt.tensor(x, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        w.add_(1)


def test_in_place_op_on_a_value_a_backward_needs_keeps_the_old_value_for_it(x):
    """Where torch's backward raises (the op needed the value an in-place op changed), the graph
    keeps the old value for that op: the gradient is the one of the values computed."""
    w = tt.tensor(x, requires_grad=True)
    y = w.exp()          # exp's backward reads its output
    y.add_(1)
    h = w * 2
    a = h.sin()          # sin's backward reads h
    h.add_(1)
    (y.sum() + a.sum() + (h * h).sum()).backward()
    np.testing.assert_allclose(y.detach().numpy(), np.exp(x) + 1, rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), np.exp(x) + 2 * np.cos(2 * x) + 4 * (2 * x + 1), rtol=1e-12)


def test_deepcopy_and_module_dtype_and_hooks():
    m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    m2 = copy.deepcopy(m)
    assert m2[0].weight is not m[0].weight and isinstance(m2[0].weight, nn.Parameter)
    np.testing.assert_array_equal(m2[0].weight.detach().numpy(), m[0].weight.detach().numpy())
    with tt.no_grad():
        m2[0].weight.add_(1.0)
    assert not np.array_equal(m2[0].weight.detach().numpy(), m[0].weight.detach().numpy())
    w = m[0].weight
    m.double()
    assert m[0].weight is w and w.dtype == np.float64 and m[1].running_mean.dtype == np.float64
    seen = []
    h = m[0].register_forward_hook(lambda mod, args, out: seen.append(out.shape))
    m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    m(tt.ones(4, 3, dtype=tt.float64))
    h.remove()
    m(tt.ones(4, 3, dtype=tt.float64))
    assert seen == [(4, 2)]
    assert m.get_parameter("0.weight") is w and len(m[:1]) == 1


def _train(M, opt_fn, sched_fn=None, steps=12, plateau=False):
    rng = np.random.default_rng(3)
    W0, X, Y = rng.standard_normal((5, 3)), rng.standard_normal((8, 5)), rng.standard_normal((8, 3))
    w = M.tensor(W0, requires_grad=True)
    opt = opt_fn(M, [w])
    sch = sched_fn(M, opt) if sched_fn else None
    lrs = []
    for i in range(steps):
        opt.zero_grad()
        loss = ((M.tensor(X) @ w - M.tensor(Y)) ** 2).mean()
        loss.backward()
        opt.step()
        if sch is not None:
            sch.step(float(loss.item()) * (1 + (i > 4)) if plateau else None) if plateau else sch.step()
            lrs.append(sch.get_last_lr()[0])
    return w.detach().numpy(), lrs


OPTIMS = {
    "RMSprop": (lambda M, p: M.optim.RMSprop(p, lr=0.01), None),
    "RMSprop-momentum-centered": (lambda M, p: M.optim.RMSprop(p, lr=0.01, momentum=0.9, centered=True,
                                                              weight_decay=0.1), None),
    "Adagrad": (lambda M, p: M.optim.Adagrad(p, lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1,
                                             weight_decay=0.01), None),
    "Adam-amsgrad": (lambda M, p: M.optim.Adam(p, lr=0.05, weight_decay=0.01, amsgrad=True), None),
    "AdamW-amsgrad-maximize": (lambda M, p: M.optim.AdamW(p, lr=0.05, amsgrad=True, maximize=True), None),
    "AdamW-maximize-fused-arguments": (lambda M, p: M.optim.AdamW(p, lr=0.05, maximize=True, foreach=None), None),
    "Adamax": (lambda M, p: M.optim.Adamax(p, lr=0.05, weight_decay=0.01), None),
    "NAdam": (lambda M, p: M.optim.NAdam(p, lr=0.05, weight_decay=0.01), None),
    "NAdam-decoupled": (lambda M, p: M.optim.NAdam(p, lr=0.05, weight_decay=0.1, decoupled_weight_decay=True), None),
    "RAdam": (lambda M, p: M.optim.RAdam(p, lr=0.05, weight_decay=0.01), None),
    "RAdam-decoupled-maximize": (lambda M, p: M.optim.RAdam(p, lr=0.05, weight_decay=0.1, decoupled_weight_decay=True,
                                                            maximize=True), None),
    "Adadelta": (lambda M, p: M.optim.Adadelta(p, lr=0.5, rho=0.8, weight_decay=0.01), None),
    "MultiStepLR": (lambda M, p: M.optim.SGD(p, lr=0.1), lambda M, o: M.optim.lr_scheduler.MultiStepLR(o, [3, 3, 7])),
    "ExponentialLR": (lambda M, p: M.optim.SGD(p, lr=0.1), lambda M, o: M.optim.lr_scheduler.ExponentialLR(o, 0.8)),
    "ConstantLR": (lambda M, p: M.optim.SGD(p, lr=0.1), lambda M, o: M.optim.lr_scheduler.ConstantLR(o, 0.5, 4)),
    "MultiplicativeLR": (lambda M, p: M.optim.SGD(p, lr=0.1),
                         lambda M, o: M.optim.lr_scheduler.MultiplicativeLR(o, lambda e: 0.9)),
    "PolynomialLR": (lambda M, p: M.optim.SGD(p, lr=0.1), lambda M, o: M.optim.lr_scheduler.PolynomialLR(o, 8, 2.0)),
    "CosineAnnealingWarmRestarts": (lambda M, p: M.optim.SGD(p, lr=0.1, momentum=0.9),
                                    lambda M, o: M.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, 3, 2, 0.01)),
    "ReduceLROnPlateau": (lambda M, p: M.optim.SGD(p, lr=0.05),
                          lambda M, o: M.optim.lr_scheduler.ReduceLROnPlateau(o, patience=1, factor=0.5)),
}


@pytest.mark.parametrize("name", list(OPTIMS))
def test_optimizers_and_schedulers_equal_torch(name):
    o, s = OPTIMS[name]
    (wa, la), (wb, lb) = (_train(M, o, s, plateau=name == "ReduceLROnPlateau") for M in (torch, tt))
    np.testing.assert_allclose(wb, wa, rtol=1e-12, atol=1e-14)
    assert lb == pytest.approx(la, rel=1e-15, abs=0)
    if name == "ReduceLROnPlateau":
        assert min(la) < 0.05  # the plateau was met


def _copy_params(mt, mtt):
    sd = {k: v.detach().numpy() for k, v in mt.state_dict().items()}
    assert set(mtt.state_dict()) == set(sd)
    mtt.load_state_dict({k: tt.tensor(v) for k, v in sd.items()})


SEQ = {
    "LSTM": (lambda M: M.nn.LSTM(4, 6), lambda o: o[0]),
    "LSTM-2-layers-bidirectional-batch-first": (
        lambda M: M.nn.LSTM(4, 6, num_layers=2, bidirectional=True, batch_first=True), lambda o: o[1][1]),
    "GRU-2-layers": (lambda M: M.nn.GRU(4, 5, num_layers=2), lambda o: o[0]),
    "RNN-relu": (lambda M: M.nn.RNN(4, 5, nonlinearity="relu"), lambda o: o[1]),
    "MultiheadAttention-weights": (lambda M: M.nn.MultiheadAttention(4, 2), lambda o: o[1]),
    "TransformerEncoder": (lambda M: M.nn.TransformerEncoder(M.nn.TransformerEncoderLayer(4, 2, 8, 0.0), 2),
                           lambda o: o),
    "TransformerEncoderLayer-norm-first-gelu-batch-first": (
        lambda M: M.nn.TransformerEncoderLayer(4, 2, 8, 0.0, activation="gelu", batch_first=True, norm_first=True),
        lambda o: o),
}


@pytest.mark.parametrize("name", list(SEQ))
def test_sequence_modules_equal_torch(name):
    torch.set_default_dtype(torch.float64)
    tt.set_default_dtype(tt.float64)
    try:
        mk, out = SEQ[name]
        mt, mtt = mk(torch), mk(tt)
        _copy_params(mt, mtt)
        x = np.random.default_rng(7).standard_normal((5, 3, 4))
        args = (x, x, x) if name.startswith("Multihead") else (x,)
        A, B, ra, rb = _run(lambda *a: out(mt(*a)), lambda *a: out(mtt(*a)), args)
        np.testing.assert_allclose(rb.detach().numpy(), ra.detach().numpy(), rtol=1e-12, atol=1e-13)
        ra.pow(2).sum().backward()
        rb.pow(2).sum().backward()
        for n, p in mt.named_parameters():
            if p.grad is not None:
                np.testing.assert_allclose(mtt.get_parameter(n).grad.numpy(), p.grad.numpy(), rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(B[0].grad.numpy(), A[0].grad.numpy(), rtol=1e-10, atol=1e-13)
    finally:
        torch.set_default_dtype(torch.float32)
        tt.set_default_dtype(tt.float32)


def test_encoder_masks_equal_torch():
    torch.set_default_dtype(torch.float64)
    tt.set_default_dtype(tt.float64)
    try:
        mt = torch.nn.TransformerEncoderLayer(4, 2, 8, 0.0, batch_first=True)
        mtt = nn.TransformerEncoderLayer(4, 2, 8, 0.0, batch_first=True)
        _copy_params(mt, mtt)
        x = np.random.default_rng(8).standard_normal((2, 6, 4))
        mask = np.triu(np.ones((6, 6), bool), 1)
        kpm = np.zeros((2, 6), bool)
        kpm[1, 4:] = True
        a = mt(torch.tensor(x), src_mask=torch.tensor(mask), src_key_padding_mask=torch.tensor(kpm))
        b = mtt(tt.tensor(x), src_mask=tt.tensor(mask), src_key_padding_mask=tt.tensor(kpm))
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-12, atol=1e-13)
    finally:
        torch.set_default_dtype(torch.float32)
        tt.set_default_dtype(tt.float32)


def test_sdpa_with_masks_gqa_and_cross_attention_equal_torch():
    rng = np.random.default_rng(9)
    q, k, v = rng.standard_normal((2, 4, 5, 3)), rng.standard_normal((2, 2, 6, 3)), rng.standard_normal((2, 2, 6, 3))
    m = rng.random((5, 6)) > 0.3
    m[:, 0] = True
    fm = rng.standard_normal((5, 6))
    _same(lambda *a: TF.scaled_dot_product_attention(*a, attn_mask=torch.tensor(m), enable_gqa=True),
          lambda *a: F.scaled_dot_product_attention(*a, attn_mask=tt.tensor(m), enable_gqa=True), q, k, v)
    _same(lambda *a: TF.scaled_dot_product_attention(*a, attn_mask=torch.tensor(fm), enable_gqa=True),
          lambda *a: F.scaled_dot_product_attention(*a, attn_mask=tt.tensor(fm), enable_gqa=True), q, k, v)
    _same(lambda a, b, c: TF.scaled_dot_product_attention(a, b, c, is_causal=True),
          lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), q[:, :2], k, v)


def test_cuda_and_backends_answer_as_on_a_machine_without_cuda():
    assert tt.cuda.is_available() is False and tt.cuda.device_count() == 0
    tt.cuda.manual_seed_all(0)
    tt.backends.cudnn.benchmark = True
    with tt.set_grad_enabled(False):
        assert not tt.is_grad_enabled()
    assert tt.is_grad_enabled()
    assert tt.finfo(tt.float32).eps == np.finfo(np.float32).eps
    with pytest.raises(AttributeError, match="no int32 dtype: use tiletrain.int64"):
        tt.int32  # noqa: B018


@pytest.mark.parametrize("name,size", [("adaptive_avg_pool2d", (3, 2)), ("adaptive_max_pool2d", (3, 2)),
                                       ("adaptive_avg_pool1d", 3), ("adaptive_max_pool3d", (2, 3, 1))])
def test_adaptive_pooling_with_unequal_windows_equals_torch(name, size):
    shape = {"1d": (2, 3, 7), "2d": (2, 3, 7, 5), "3d": (1, 2, 5, 7, 3)}[name[-2:]]
    x = np.random.default_rng(10).standard_normal(shape)
    _same(lambda t: getattr(TF, name)(t, size), lambda t: getattr(F, name)(t, size), x)
    cls = "Adaptive" + ("Max" if "max" in name else "Avg") + "Pool" + name[-2:]
    _same(getattr(torch.nn, cls)(size), getattr(nn, cls)(size), x)


def test_nn_utils_vector_helpers_clip_value_and_format():
    for M in (torch, tt):
        m = M.nn.Linear(3, 2)
        with M.no_grad():
            m.weight.copy_(M.tensor(np.arange(6.0).reshape(2, 3), dtype=m.weight.dtype))
            m.bias.copy_(M.tensor([1.0, 2.0], dtype=m.bias.dtype))
        v = M.nn.utils.parameters_to_vector(m.parameters())
        assert v.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 1.0, 2.0]
        M.nn.utils.vector_to_parameters(v * 2, m.parameters())
        assert m.bias.tolist() == [2.0, 4.0]
        (m(M.ones(1, 3)) * 10).sum().backward()
        M.nn.utils.clip_grad_value_(m.parameters(), 3.0)
        assert m.weight.grad.tolist() == [[3.0] * 3] * 2
        assert f"{M.tensor(1.23456, dtype=M.float64):.3f}" == "1.235"


def test_data_samplers_concat_and_iterable_datasets_as_torch():
    import torch.utils.data as TD

    import tiletrain.utils.data as D

    def run(M, data):
        ds = data.ConcatDataset([data.TensorDataset(M.arange(5)), data.TensorDataset(M.arange(10, 13))])
        bs = data.BatchSampler(data.SequentialSampler(ds), 3, drop_last=False)
        rs = data.RandomSampler(ds, generator=M.Generator().manual_seed(0))

        class Stream(data.IterableDataset):
            def __iter__(self):
                return iter([(float(i), i) for i in range(5)])
        return (len(ds), int(ds[6][0]), list(bs), len(bs), [b[0].tolist() for b in data.DataLoader(ds, batch_sampler=bs)],
                sorted(rs), list(data.WeightedRandomSampler([0.0, 0.0, 1.0, 0.0], 5)),
                [(a.tolist(), b.tolist()) for a, b in data.DataLoader(Stream(), batch_size=2)],
                sorted(data.SubsetRandomSampler([4, 7, 9])))
    assert run(tt, D) == run(torch, TD)


def test_retain_grad_keeps_the_gradient_of_a_non_leaf_as_torch():
    x = np.random.default_rng(11).standard_normal((3, 4))
    got = []
    for M in (torch, tt):
        a = M.tensor(x, requires_grad=True)
        h = (a * 2).tanh()
        h.retain_grad()
        z = h * 3
        (z.sum() ** 2).backward()
        got.append((h.grad.numpy(), a.grad.numpy(), z.grad))
    np.testing.assert_allclose(got[1][0], got[0][0], rtol=1e-12)
    np.testing.assert_allclose(got[1][1], got[0][1], rtol=1e-12)
    assert got[0][2] is None and got[1][2] is None
    with pytest.raises(RuntimeError, match="requires_grad=False"):
        tt.ones(2).retain_grad()


CONV_T = [(2, (2, 4, 5, 6), (4, 3, 3, 3), dict(stride=2, padding=1, output_padding=1)),
          (2, (2, 4, 5, 6), (4, 1, 2, 3), dict(stride=(1, 2), groups=2, dilation=(2, 1))),
          (1, (2, 3, 7), (3, 2, 4), dict(stride=3, padding=2)),
          (3, (1, 2, 3, 4, 3), (2, 2, 2, 2, 2), dict(stride=2)),
          (2, (4, 5, 6), (4, 3, 3, 3), dict())]


@pytest.mark.parametrize("n,xs,ws,kw", CONV_T)
def test_conv_transpose_equals_torch(n, xs, ws, kw):
    rng = np.random.default_rng(12)
    x, w, b = rng.standard_normal(xs), rng.standard_normal(ws), rng.standard_normal(ws[1] * kw.get("groups", 1))
    name = f"conv_transpose{n}d"
    _same(lambda *a: getattr(TF, name)(*a, **kw), lambda *a: getattr(F, name)(*a, **kw), x, w, b, rtol=1e-11,
          atol=1e-12)


def test_conv_transpose_module_has_torchs_parameters():
    mt = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
    m = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
    assert {k: tuple(v.shape) for k, v in m.state_dict().items()} == \
        {k: tuple(v.shape) for k, v in mt.state_dict().items()}
    bound = 1 / np.sqrt(3 * 9)  # fan_in = weight.shape[1] * kernel size
    assert np.abs(m.weight.detach().numpy()).max() <= bound
    m = m.double()
    mt = mt.double()
    _copy_params(mt, m)
    x = np.random.default_rng(13).standard_normal((2, 4, 5, 5))
    np.testing.assert_allclose(m(tt.tensor(x)).detach().numpy(), mt(torch.tensor(x)).detach().numpy(), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("kw", [dict(size=(8, 11), mode="bicubic"), dict(size=(8, 11), mode="bicubic", align_corners=True),
                                dict(scale_factor=2, mode="bicubic"), dict(size=(3, 4), mode="bicubic"),
                                dict(scale_factor=(1.5, 0.6), mode="bicubic"), dict(size=(3, 4), mode="area"),
                                dict(size=(9, 13), mode="area"), dict(scale_factor=0.5, mode="area"),
                                dict(size=(3, 4), mode="nearest-exact"), dict(size=(9, 13), mode="nearest-exact"),
                                dict(scale_factor=1.7, mode="nearest-exact")])
def test_interpolate_bicubic_area_and_nearest_exact_equal_torch(kw):
    x = np.random.default_rng(15).standard_normal((2, 3, 5, 7))
    _same(lambda a: TF.interpolate(a, **kw), lambda a: F.interpolate(a, **kw), x, rtol=1e-11, atol=1e-13)
    if kw["mode"] != "bicubic":
        _same(lambda a: TF.interpolate(a, size=4, mode=kw["mode"]), lambda a: F.interpolate(a, size=4, mode=kw["mode"]),
              x[:, :, 0], rtol=1e-11, atol=1e-13)


def test_group_instance_norm_and_nearest_interpolation_equal_torch():
    rng = np.random.default_rng(14)
    x, w, b = rng.standard_normal((2, 6, 5, 7)), rng.standard_normal(6), rng.standard_normal(6)
    _same(lambda *a: TF.group_norm(a[0], 3, a[1], a[2]), lambda *a: F.group_norm(a[0], 3, a[1], a[2]), x, w, b,
          rtol=1e-11, atol=1e-12)
    _same(TF.instance_norm, F.instance_norm, x, rtol=1e-11, atol=1e-12)
    for kw in (dict(scale_factor=2), dict(size=(9, 4)), dict(scale_factor=(1.5, 0.5)),
               dict(scale_factor=2, mode="bilinear"), dict(size=(9, 4), mode="bilinear", align_corners=True),
               dict(size=(3, 11), mode="bilinear")):
        _same(lambda a: TF.interpolate(a, **kw), lambda a: F.interpolate(a, **kw), x, rtol=1e-11, atol=1e-13)
    _same(lambda a: TF.interpolate(a, scale_factor=3, mode="linear"),
          lambda a: F.interpolate(a, scale_factor=3, mode="linear"), x[:, :, 0], rtol=1e-11, atol=1e-13)
    with pytest.raises(NotImplementedError, match="antialias"):
        F.interpolate(tt.tensor(x), size=(2, 3), mode="bilinear", antialias=True)
    torch.set_default_dtype(torch.float64)
    tt.set_default_dtype(tt.float64)
    try:
        for mk in (lambda M: M.nn.GroupNorm(2, 6), lambda M: M.nn.InstanceNorm2d(6, affine=True),
                   lambda M: M.nn.Upsample(scale_factor=2)):
            mt, m = mk(torch), mk(tt)
            _copy_params(mt, m)
            _same(mt, m, x, rtol=1e-11, atol=1e-12)
    finally:
        torch.set_default_dtype(torch.float32)
        tt.set_default_dtype(tt.float32)


def test_compile_amp_and_thread_answers_let_torch_programs_run():
    m = nn.Linear(2, 2)
    assert tt.compile(m) is m and tt.compile()(m) is m
    tt.set_float32_matmul_precision("high")
    with pytest.warns(UserWarning, match="CUDA is not available"):
        scaler = tt.cuda.amp.GradScaler()
    loss = m(tt.ones(1, 2)).sum()
    opt = tt.optim.SGD(m.parameters(), lr=0.1)
    w0 = m.weight.detach().numpy()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    assert not np.array_equal(m.weight.detach().numpy(), w0)
    with tt.autocast("cpu", enabled=False):
        pass
    with pytest.raises(NotImplementedError, match="autocast is not supported"):
        tt.autocast("cpu", dtype=tt.bfloat16)
    assert tt.get_num_threads() >= 1


def test_unique_bincount_where_one_argument_and_embedding_from_pretrained():
    a = np.array([3, 1, 2, 3, 3, 0])
    got = []
    for M in (torch, tt):
        t = M.tensor(a)
        u, i, c = M.unique(t, return_inverse=True, return_counts=True)
        e = M.nn.Embedding.from_pretrained(M.tensor([[1.0, 2.0], [3.0, 4.0]]))
        got.append((u.tolist(), i.tolist(), c.tolist(), M.bincount(t).tolist(), t.bincount(minlength=6).tolist(),
                    [x.tolist() for x in M.where(t > 1)], e(M.tensor([1, 0])).tolist(), e.weight.requires_grad))
    assert got[0] == got[1]


def test_assignment_zero_fill_and_copy_in_the_graph_equal_torch():
    x = np.random.default_rng(15).standard_normal((4, 5))
    v = np.random.default_rng(16).standard_normal(5)
    got = []
    for M in (torch, tt):
        a, b = M.tensor(x, requires_grad=True), M.tensor(v, requires_grad=True)
        h = a * 2
        h[1] = b * 3
        h[:, 0] = 0.5
        c = a + 1
        c.zero_()
        d = a * 1
        d.copy_(b.expand(4, 5))
        e = a * 1
        e.fill_(2.0)
        (h.exp().sum() + (c + a).sum() + (d * d).sum() + (e * a).sum()).backward()
        got.append((h.detach().numpy(), a.grad.numpy(), b.grad.numpy()))
        z = M.ones(3)
        z.zero_()
        assert z.fill_(4.0).tolist() == [4.0, 4.0, 4.0]
    for u, w in zip(*got):
        np.testing.assert_allclose(w, u, rtol=1e-12)


def _values(ra, rb):
    u = ra.detach().numpy() if hasattr(ra, "detach") else np.asarray(ra)
    v = rb.numpy()
    assert v.dtype == u.dtype and v.shape == u.shape, (v.dtype, u.dtype, v.shape, u.shape)
    np.testing.assert_allclose(v, u, rtol=1e-6, atol=1e-7, equal_nan=True)


INTEGER_UNARY = [  # (what, f(module, int64 tensor)): torch keeps int64 or computes in the default float
    ("exp", lambda m, t: m.exp(t)), ("sqrt", lambda m, t: m.sqrt(t.abs())), ("sin", lambda m, t: t.sin()),
    ("sigmoid", lambda m, t: m.sigmoid(t)), ("log1p", lambda m, t: m.log1p(t.abs())), ("abs", lambda m, t: m.abs(t)),
    ("sign", lambda m, t: t.sign()), ("relu", lambda m, t: m.relu(t)), ("floor", lambda m, t: m.floor(t)),
    ("clamp", lambda m, t: t.clamp(-1, 2)), ("clamp_min", lambda m, t: t.clamp(min=0)),
    ("clamp float bound", lambda m, t: t.clamp(0.5, 2)), ("exp of bool", lambda m, t: m.exp(t > 0)),
    ("where", lambda m, t: m.where(t > 0, t, 0)), ("where float scalar", lambda m, t: m.where(t > 0, t, 0.5)),
    ("where int and float", lambda m, t: m.where(t > 0, t * 1.5, t)),
]


@pytest.mark.parametrize("what,f", INTEGER_UNARY, ids=[w for w, _ in INTEGER_UNARY])
def test_unary_ops_and_where_of_int64_tensors_are_torchs(what, f):
    a = np.array([-3, -1, 0, 2, 5])
    _values(f(torch, torch.tensor(a)), f(tt, tt.tensor(a)))


def test_gelu_of_int64_is_refused_as_torch_refuses_it():
    with pytest.raises(TypeError, match="gelu: input has dtype int64"):
        tt.nn.functional.gelu(tt.tensor([1, 2]))


def test_more_torch_functions_equal_torch_with_their_gradients():
    a = np.arange(12, dtype=np.float64).reshape(3, 4) / 7
    special = np.array([[1.0, np.nan, -np.inf], [np.inf, 2.0, -3.0]])
    _values(torch.nan_to_num(torch.tensor(special)), tt.nan_to_num(tt.tensor(special)))
    _values(torch.tensor(special).nan_to_num(1.5, 9.0, -9.0), tt.tensor(special).nan_to_num(1.5, 9.0, -9.0))
    _values(torch.isclose(torch.tensor([1.0, 2.0, np.nan]), torch.tensor([1.0, 2.1, np.nan]), equal_nan=True),
            tt.isclose(tt.tensor([1.0, 2.0, np.nan]), tt.tensor([1.0, 2.1, np.nan]), equal_nan=True))
    for m in (torch.triu_indices, torch.tril_indices):
        _values(m(3, 4, 1), getattr(tt, m.__name__)(3, 4, 1))
    _values(torch.argwhere(torch.tensor([[0, 1], [1, 0]])), tt.argwhere(tt.tensor([[0, 1], [1, 0]])))
    _values(torch.diag(torch.tensor(a), 1), tt.diag(tt.tensor(a), 1))
    _values(torch.diag(torch.tensor([1.0, 2.0]), -1), tt.diag(tt.tensor([1.0, 2.0]), -1))
    _values(torch.linalg.norm(torch.tensor(a)), tt.linalg.norm(tt.tensor(a)))
    _values(torch.linalg.vector_norm(torch.tensor(a), ord=1, dim=1), tt.linalg.vector_norm(tt.tensor(a), ord=1, dim=1))
    _values(torch.linalg.matrix_norm(torch.tensor(np.stack([a, a]))), tt.linalg.matrix_norm(tt.tensor(np.stack([a, a]))))
    with pytest.raises(NotImplementedError, match="ord=2"):
        tt.linalg.matrix_norm(tt.tensor(a), ord=2)
    _same(lambda t: torch.addmm(t[:, :3], t, t.T[:, :3], beta=0.5, alpha=2.0),
          lambda t: tt.addmm(t[:, :3], t, t.T[:, :3], beta=0.5, alpha=2.0), a)
    _same(lambda t: torch.addmv(t[0, :3], t[:, :3], t[1, :3]), lambda t: tt.addmv(t[0, :3], t[:, :3], t[1, :3]), a)
    _same(lambda t: torch.baddbmm(t[None, :, :3], t[None], t.T[None, :, :3]),
          lambda t: tt.baddbmm(t[None, :, :3], t[None], t.T[None, :, :3]), a)
    _same(lambda t: torch.nan_to_num(t / t.sum(1, keepdim=True)), lambda t: tt.nan_to_num(t / t.sum(1, keepdim=True)), a)
    _same(lambda t: t.index_fill(1, torch.tensor([0, 2]), -1.0) * t,
          lambda t: t.index_fill(1, tt.tensor([0, 2]), -1.0) * t, a)
    _same(lambda t: torch.diag(t) * 3, lambda t: tt.diag(t) * 3, a)
    _same(lambda t: torch.diag(t[0]), lambda t: tt.diag(t[0]), a)
    _same(lambda t: t.trace() * t.sum(), lambda t: t.trace() * t.sum(), a)
    _same(lambda t: torch.trace(t) * 2, lambda t: tt.trace(t) * 2, a)  # the trace package is callable
    with pytest.raises(TypeError, match="must be Tensor"):
        tt.trace(3)
    # addmm with beta=0 ignores input (a NaN there does not propagate)
    _values(torch.addmm(torch.full((3, 3), np.nan, dtype=torch.float64), torch.tensor(a), torch.tensor(a.T[:, :3]), beta=0),
            tt.addmm(tt.full((3, 3), np.nan, dtype=tt.float64), tt.tensor(a), tt.tensor(a.T[:, :3].copy()), beta=0))
    with pytest.raises(IndexError, match="index out of range"):
        tt.tensor(a).index_fill(0, tt.tensor([3]), 0.0)


DECODERS = {
    "Transformer": lambda M: M.nn.Transformer(4, 2, 1, 2, 8, 0.0),
    "Transformer-batch-first-norm-first-gelu": lambda M: M.nn.Transformer(4, 2, 2, 1, 8, 0.0, activation="gelu",
                                                                          batch_first=True, norm_first=True),
    "TransformerDecoder": lambda M: M.nn.TransformerDecoder(M.nn.TransformerDecoderLayer(4, 2, 8, 0.0), 2,
                                                            M.nn.LayerNorm(4)),
}


@pytest.mark.parametrize("name", list(DECODERS))
def test_transformer_and_decoder_equal_torch_with_masks(name):
    """Cross attention over a memory of another length, a causal target mask from
    generate_square_subsequent_mask and a memory padding mask; values and every gradient."""
    torch.set_default_dtype(torch.float64)
    tt.set_default_dtype(tt.float64)
    try:
        mt, mtt = DECODERS[name](torch), DECODERS[name](tt)
        _copy_params(mt, mtt)
        bf = name.endswith("batch-first-norm-first-gelu")
        rng = np.random.default_rng(3)
        src, tgt = rng.standard_normal((5, 3, 4)), rng.standard_normal((4, 3, 4))
        if bf:
            src, tgt = src.transpose(1, 0, 2).copy(), tgt.transpose(1, 0, 2).copy()
        pad = np.zeros((3, 5), bool)
        pad[1, 3:] = True

        def call(M, m, a, b):
            mask = M.nn.Transformer.generate_square_subsequent_mask(4)
            kw = dict(tgt_mask=mask, memory_key_padding_mask=M.tensor(pad))
            return m(a, b, **kw) if name.startswith("Transformer-") or name == "Transformer" else m(b, a, **kw)

        A, B, ra, rb = _run(lambda a, b: call(torch, mt, a, b), lambda a, b: call(tt, mtt, a, b), (src, tgt))
        np.testing.assert_allclose(rb.detach().numpy(), ra.detach().numpy(), rtol=1e-11, atol=1e-12)
        ra.pow(2).sum().backward()
        rb.pow(2).sum().backward()
        for n, p in mt.named_parameters():
            np.testing.assert_allclose(mtt.get_parameter(n).grad.numpy(), p.grad.numpy(), rtol=1e-9, atol=1e-12)
        for a, b in zip(A, B):
            np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=1e-9, atol=1e-12)
    finally:
        torch.set_default_dtype(torch.float32)
        tt.set_default_dtype(tt.float32)


def test_transformer_parameters_and_mask_are_torchs():
    m = tt.nn.Transformer(8, 2, 1, 1, 16)
    names = set(m.state_dict())
    assert names == set(torch.nn.Transformer(8, 2, 1, 1, 16).state_dict())
    np.testing.assert_array_equal(tt.nn.Transformer.generate_square_subsequent_mask(3).numpy(),
                                  torch.nn.Transformer.generate_square_subsequent_mask(3).numpy())
    with pytest.raises(RuntimeError, match="d_model"):
        m(tt.zeros(2, 1, 4), tt.zeros(2, 1, 8))


def test_slice_bounds_may_be_integer_tensors():
    data = tt.arange(20)
    i = tt.tensor([3, 7])[1]
    np.testing.assert_array_equal(data[i:i + 4].numpy(), np.arange(7, 11))
    np.testing.assert_array_equal(tt.ones(5, 6)[:, tt.tensor(2):].numpy(), np.ones((5, 4)))


@pytest.mark.parametrize("kw", [{}, {"reduction": "sum"}, {"reduction": "none"}, {"label_smoothing": 0.1},
                                {"weight": True}], ids=["mean", "sum", "none", "smoothing", "weight"])
@pytest.mark.parametrize("shape", [(4, 5), (2, 5, 3)], ids=["2d", "3d"])
def test_cross_entropy_with_probability_targets_equals_torch(kw, shape):
    rng = np.random.default_rng(0)
    p = rng.random(shape)
    p /= p.sum(1, keepdims=True)
    w = rng.random(5)

    def f(M):
        k = dict(kw, weight=M.tensor(w)) if "weight" in kw else kw
        return lambda t: M.nn.functional.cross_entropy(t, M.tensor(p), **k)
    _same(f(torch), f(tt), rng.standard_normal(shape))


def test_torch_idioms_of_training_scripts_equal_torch():
    a = np.random.default_rng(2).standard_normal((4, 6))
    _same(lambda t: torch.max(t, t.flip(0)), lambda t: tt.max(t, t.flip(0)), a)
    _same(lambda t: torch.min(t, torch.zeros(4, 6, dtype=t.dtype)), lambda t: tt.min(t, tt.zeros(4, 6, dtype=t.dtype)),
          a)
    _same(lambda t: t.clamp(min=t[0] * 0.5, max=t[1] + 1.0), lambda t: t.clamp(min=t[0] * 0.5, max=t[1] + 1.0), a)
    _same(lambda t: t.repeat_interleave(2, dim=0), lambda t: t.repeat_interleave(2, dim=0), a)
    _same(lambda t: torch.repeat_interleave(t[0], torch.tensor([1, 0, 2, 1, 1, 3])),
          lambda t: tt.repeat_interleave(t[0], tt.tensor([1, 0, 2, 1, 1, 3])), a)
    _same(lambda t: torch.cumprod(t, 1), lambda t: tt.cumprod(t, 1), a)
    _same(lambda t: torch.nn.functional.prelu(t, torch.tensor([0.1], dtype=t.dtype)),
          lambda t: tt.nn.functional.prelu(t, tt.tensor([0.1], dtype=t.dtype)), a)
    _same(lambda t: torch.nn.functional.prelu(t[None, :, :, None], torch.linspace(0.1, 0.6, 4, dtype=t.dtype)),
          lambda t: tt.nn.functional.prelu(t[None, :, :, None], tt.linspace(0.1, 0.6, 4, dtype=t.dtype)), a)
    _values(torch.repeat_interleave(torch.tensor([1, 2]), 2), tt.repeat_interleave(tt.tensor([1, 2]), 2))
    ids = np.arange(12).reshape(3, 4)
    for f in (lambda m, t: m.flip(t, [1]), lambda m, t: m.roll(t, 1, 1), lambda m, t: m.index_select(t > 5, 0, m.tensor([2, 0]))):
        _values(f(torch, torch.tensor(ids)), f(tt, tt.tensor(ids)))  # integer and bool tensors (token ids, masks)
    seq, v = np.array([1.0, 3.0, 5.0]), np.array([[2.0, 3.0], [5.0, 0.0]])
    for right in (False, True):
        _values(torch.searchsorted(torch.tensor(seq), torch.tensor(v), right=right),
                tt.searchsorted(tt.tensor(seq), tt.tensor(v), right=right))
        _values(torch.bucketize(torch.tensor(v), torch.tensor(seq), right=right),
                tt.bucketize(tt.tensor(v), tt.tensor(seq), right=right))
    idx = [[0], [1], [2]]
    _values(torch.zeros(3, 4).scatter_(1, torch.tensor(idx), 1.0), tt.zeros(3, 4).scatter_(1, tt.tensor(idx), 1.0))
    seqs = [np.ones((3, 2)), 2 * np.ones((1, 2))]
    for kw in ({}, {"batch_first": True, "padding_value": -1.0}, {"batch_first": True, "padding_side": "left"}):
        _values(torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s in seqs], **kw),
                tt.nn.utils.rnn.pad_sequence([tt.tensor(s) for s in seqs], **kw))
    for M, arg in ((lambda m: m.nn.ZeroPad2d((1, 0, 2, 1)), np.ones((1, 1, 2, 2))),
                   (lambda m: m.nn.ConstantPad1d(2, 3.5), np.ones((1, 2)))):
        _values(M(torch)(torch.tensor(arg)), M(tt)(tt.tensor(arg)))
    assert set(tt.nn.PReLU(3).state_dict()) == set(torch.nn.PReLU(3).state_dict())
    q = tt.nn.init.orthogonal_(tt.empty(3, 5), gain=2.0).numpy()
    np.testing.assert_allclose(q @ q.T, 4 * np.eye(3), atol=1e-5)
    z = tt.nn.init.trunc_normal_(tt.empty(2000), std=0.02, a=-0.04, b=0.04).numpy()
    assert z.min() >= -0.04 and z.max() <= 0.04 and abs(z.std() - 0.0176) < 0.002  # N(0, 0.02) cut at 2 sigma


def test_nadam_state_with_its_scalar_product_round_trips():
    rng = np.random.default_rng(5)
    w0, g = rng.standard_normal((3, 2)), rng.standard_normal((3, 2))

    def run(split):
        w = tt.tensor(w0, requires_grad=True)
        opt = tt.optim.NAdam([w], lr=0.1)
        for i in range(4):
            if i == split:
                sd = opt.state_dict()
                w = tt.tensor(w.detach().numpy(), requires_grad=True)
                opt = tt.optim.NAdam([w], lr=0.1)
                opt.load_state_dict(sd)
            w.grad = tt.tensor(g * (i + 1))
            opt.step()
        return w.detach().numpy()
    np.testing.assert_array_equal(run(2), run(-1))


def test_more_losses_pixel_shuffle_and_gumbel_softmax_are_torchs():
    rng = np.random.default_rng(4)
    a, b, c = (rng.standard_normal((5, 4)) for _ in range(3))
    y = np.array([1.0, -1.0, 1.0, -1.0, 1.0])
    for red in ("mean", "sum", "none"):
        _same(lambda x, z: TF.margin_ranking_loss(x[:, 0], z[:, 0], torch.tensor(y), 0.3, reduction=red),
              lambda x, z: F.margin_ranking_loss(x[:, 0], z[:, 0], tt.tensor(y), 0.3, reduction=red), a, b, rtol=1e-11)
        _same(lambda x, z: TF.cosine_embedding_loss(x, z, torch.tensor(y), 0.2, reduction=red),
              lambda x, z: F.cosine_embedding_loss(x, z, tt.tensor(y), 0.2, reduction=red), a, b, rtol=1e-11)
        for swap in (False, True):
            _same(lambda x, z, w: TF.triplet_margin_loss(x, z, w, 0.5, 3, swap=swap, reduction=red),
                  lambda x, z, w: F.triplet_margin_loss(x, z, w, 0.5, 3, swap=swap, reduction=red), a, b, c,
                  rtol=1e-10)
        for log_input, full in ((True, False), (False, True), (True, True)):
            t = np.abs(c) * 3
            _same(lambda x: TF.poisson_nll_loss(x.abs() + 0.1 if not log_input else x, torch.tensor(t), log_input, full,
                                                reduction=red),
                  lambda x: F.poisson_nll_loss(x.abs() + 0.1 if not log_input else x, tt.tensor(t), log_input, full,
                                               reduction=red), a, rtol=1e-11)
    assert isinstance(tt.nn.TripletMarginLoss(swap=True), tt.nn.Module) and tt.nn.CosineEmbeddingLoss().margin == 0
    x = rng.standard_normal((2, 8, 3, 3))
    _same(lambda t: TF.pixel_shuffle(t, 2), lambda t: F.pixel_shuffle(t, 2), x)
    _same(lambda t: TF.pixel_unshuffle(t, 3), lambda t: F.pixel_unshuffle(t, 3), x)
    g = F.gumbel_softmax(tt.tensor(rng.standard_normal((6, 5))), tau=0.5)
    np.testing.assert_allclose(g.numpy().sum(1), np.ones(6), rtol=1e-6)
    h = F.gumbel_softmax(tt.tensor(rng.standard_normal((6, 5)), requires_grad=True), hard=True)
    assert sorted(np.unique(h.detach().numpy())) == [0.0, 1.0] and (h.detach().numpy().sum(1) == 1).all()


def test_distributions_log_prob_entropy_and_kl_equal_torch():
    rng = np.random.default_rng(6)
    mu, s, v = rng.standard_normal((3, 4)), np.abs(rng.standard_normal((3, 4))) + 0.5, rng.standard_normal((3, 4))
    D, TD = tt.distributions, torch.distributions
    _same(lambda m, sc: TD.Normal(m, sc).log_prob(torch.tensor(v)), lambda m, sc: D.Normal(m, sc).log_prob(tt.tensor(v)),
          mu, s)
    _same(lambda m, sc: TD.Normal(m, sc).entropy(), lambda m, sc: D.Normal(m, sc).entropy(), mu, s)
    _same(lambda m, sc: TD.Normal(m, sc).cdf(torch.tensor(v)), lambda m, sc: D.Normal(m, sc).cdf(tt.tensor(v)), mu, s)
    _same(lambda m, sc: TD.kl_divergence(TD.Normal(m, sc), TD.Normal(m * 0.5, sc + 1)),
          lambda m, sc: D.kl_divergence(D.Normal(m, sc), D.Normal(m * 0.5, sc + 1)), mu, s)
    lg, k = rng.standard_normal((3, 5)), np.array([0, 4, 2])
    _same(lambda x: TD.Categorical(logits=x).log_prob(torch.tensor(k)), lambda x: D.Categorical(logits=x).log_prob(tt.tensor(k)),
          lg)
    _same(lambda x: TD.Categorical(logits=x).entropy(), lambda x: D.Categorical(logits=x).entropy(), lg)
    _same(lambda x: TD.Categorical(probs=x.softmax(-1)).entropy(), lambda x: D.Categorical(probs=x.softmax(-1)).entropy(),
          lg, rtol=1e-10)
    _same(lambda x: TD.kl_divergence(TD.Categorical(logits=x), TD.Categorical(logits=x.flip(-1))),
          lambda x: D.kl_divergence(D.Categorical(logits=x), D.Categorical(logits=x.flip(-1))), lg)
    b = (rng.random((3, 4)) > 0.5).astype(np.float64)
    _same(lambda x: TD.Bernoulli(logits=x).log_prob(torch.tensor(b)), lambda x: D.Bernoulli(logits=x).log_prob(tt.tensor(b)),
          v)
    _same(lambda x: TD.Bernoulli(logits=x).entropy(), lambda x: D.Bernoulli(logits=x).entropy(), v)
    _same(lambda x: TD.kl_divergence(TD.Bernoulli(logits=x), TD.Bernoulli(logits=-x)),
          lambda x: D.kl_divergence(D.Bernoulli(logits=x), D.Bernoulli(logits=-x)), v)
    _same(lambda lo: TD.Uniform(lo, lo + 2).log_prob(lo + 0.5), lambda lo: D.Uniform(lo, lo + 2).log_prob(lo + 0.5), mu)
    # samples: shapes, dtypes, supports (tiletrain's draws)
    x = D.Normal(tt.tensor(mu), tt.tensor(s)).rsample((2,))
    assert x.shape == (2, 3, 4) and x.requires_grad is False
    assert np.isnan(D.Categorical(logits=tt.tensor(lg)).mean.numpy()).all()  # torch's nan, one per batch element
    c = D.Categorical(logits=tt.tensor(lg)).sample((7,))
    assert c.shape == (7, 3) and c.dtype == np.int64 and 0 <= c.numpy().min() and c.numpy().max() < 5
    u = D.Uniform(0.0, 2.0).sample((100,)).numpy()
    assert u.min() >= 0 and u.max() < 2 and set(np.unique(D.Bernoulli(probs=0.3).sample((50,)).numpy())) <= {0.0, 1.0}
    with pytest.raises(NotImplementedError, match="kl_divergence"):
        D.kl_divergence(D.Normal(0.0, 1.0), D.Uniform(0.0, 1.0))


@pytest.mark.parametrize("kw", [{"max_norm": 1.0}, {"max_norm": 1.5, "norm_type": 1.0}], ids=["l2", "l1"])
def test_embedding_max_norm_renormalises_the_used_rows_as_torch(kw):
    w = np.random.default_rng(0).standard_normal((6, 4)) * 2
    ids = np.array([[0, 2, 2], [5, 1, 0]])
    et = torch.nn.Embedding(6, 4, **kw, dtype=torch.float64)
    et.weight.data = torch.tensor(w)
    e = tt.nn.Embedding(6, 4, **kw, dtype=tt.float64)
    e.load_state_dict({"weight": tt.tensor(w)})
    yt, y = et(torch.tensor(ids)), e(tt.tensor(ids))
    yt.pow(2).sum().backward()
    y.pow(2).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(e.weight.detach().numpy(), et.weight.detach().numpy(), rtol=1e-12)  # rows 3, 4 untouched
    np.testing.assert_allclose(e.weight.grad.numpy(), et.weight.grad.numpy(), rtol=1e-10)
    assert not tt.nn.Embedding(3, 2, _weight=tt.ones(3, 2), _freeze=True).weight.requires_grad


def test_unfold_of_a_tensor_and_im2col_equal_torch():
    x = np.random.default_rng(8).standard_normal((2, 3, 7, 6))
    _same(lambda t: t.unfold(3, 3, 2), lambda t: t.unfold(3, 3, 2), x)
    _same(lambda t: t.unfold(-2, 2, 1).sum(-1), lambda t: t.unfold(-2, 2, 1).sum(-1), x)
    for kw in ({"kernel_size": 3}, {"kernel_size": (2, 3), "stride": 2, "padding": 1},
               {"kernel_size": 2, "dilation": (2, 1), "padding": (0, 1), "stride": (1, 2)}):
        _same(lambda t: TF.unfold(t, **kw), lambda t: F.unfold(t, **kw), x)
        _same(lambda t: torch.nn.Unfold(**kw)(t[0]), lambda t: tt.nn.Unfold(**kw)(t[0]), x)
    _values(torch.arange(10).unfold(0, 4, 3), tt.arange(10).unfold(0, 4, 3))
    with pytest.raises(RuntimeError, match="maximum size for tensor at dimension 0 is 10"):
        tt.arange(10).unfold(0, 11, 1)


@pytest.mark.parametrize("dims,mode,padding,kw", [(2, "reflect", 1, {}), (2, "replicate", (1, 2), {}),
                                                  (2, "circular", 2, {}), (1, "reflect", 2, {"stride": 2}),
                                                  (2, "reflect", "same", {"dilation": 2}), (3, "replicate", 1, {}),
                                                  (2, "circular", "valid", {})])
def test_conv_padding_modes_equal_torch(dims, mode, padding, kw):
    """Conv*d(padding_mode='reflect'/'replicate'/'circular'): the input padded by F.pad's mode,
    then an unpadded convolution, as torch: outputs and gradients."""
    ref = getattr(torch.nn, f"Conv{dims}d")(2, 3, 3, padding=padding, padding_mode=mode, **kw).double()
    ours = getattr(nn, f"Conv{dims}d")(2, 3, 3, padding=padding, padding_mode=mode, **kw).double()
    _copy_params(ref, ours)
    a = np.random.default_rng(16).standard_normal((2, 2) + (6,) * dims)
    _same(ref, ours, a, rtol=1e-11, atol=1e-12)
    (ours(tt.tensor(a)) ** 2).sum().backward()
    (ref(torch.tensor(a)) ** 2).sum().backward()
    np.testing.assert_allclose(ours.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-11, atol=1e-12)
    with pytest.raises(ValueError, match="padding_mode"):
        getattr(nn, f"Conv{dims}d")(2, 3, 3, padding_mode="mirror")


def test_conv_transpose_output_size_equals_torch():
    """ConvTranspose2d(x, output_size=...): the output_padding that gives that size (2 or 4
    numbers, a torch.Size-like tuple), torch's range check."""
    ref = torch.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1).double()
    ours = nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1).double()
    _copy_params(ref, ours)
    a = np.random.default_rng(17).standard_normal((1, 2, 5, 5))
    for size in [(10, 10), (9, 10), (1, 3, 10, 9)]:
        _same(lambda x: ref(x, output_size=size), lambda x: ours(x, output_size=size), a, rtol=1e-11, atol=1e-12)
    with pytest.raises(ValueError, match="valid sizes range from"):
        ours(tt.tensor(a), output_size=(11, 11))
