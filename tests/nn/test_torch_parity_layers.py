"""torch's CyclicLR and ChainedScheduler, Bilinear, EmbeddingBag and weight_norm, each
against torch itself (float64; values and every gradient)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import tiletrain as tt
import tiletrain.nn as nn
import tiletrain.nn.functional as F
from test_torch_parity import _same  # values and every gradient against torch

TF = torch.nn.functional


def _copy_params(mt, mtt):
    sd = {k: v.detach().numpy() for k, v in mt.state_dict().items()}
    assert list(mtt.state_dict()) == list(sd)
    mtt.load_state_dict({k: tt.tensor(v) for k, v in sd.items()})


def _grads_equal(mt, mtt, rtol=1e-12, atol=1e-14):
    got = dict(mtt.named_parameters())
    names = [n for n, _ in mt.named_parameters()]
    assert names == list(got)
    for n, p in mt.named_parameters():
        np.testing.assert_allclose(got[n].grad.numpy(), p.grad.numpy(), rtol=rtol, atol=atol, err_msg=n)


# ---- CyclicLR and ChainedScheduler ---------------------------------------------------------------

def _schedule(M, opt_fn, sched_fn, steps=30):
    """Train a small least-squares model; the lrs and momenta after every step, the weights."""
    rng = np.random.default_rng(3)
    W0, X, Y = rng.standard_normal((5, 3)), rng.standard_normal((8, 5)), rng.standard_normal((8, 3))
    w = M.tensor(W0, requires_grad=True)
    opt = opt_fn(M, [w])
    sch = sched_fn(M, opt)
    seen = [(sch.get_last_lr()[0], _momentum(opt))]
    for _ in range(steps):
        opt.zero_grad()
        loss = ((M.tensor(X) @ w - M.tensor(Y)) ** 2).mean()
        loss.backward()
        opt.step()
        sch.step()
        seen.append((sch.get_last_lr()[0], _momentum(opt)))
    return w.detach().numpy(), seen, sch


def _momentum(opt):
    g = opt.param_groups[0]
    return g["betas"][0] if "betas" in g else g["momentum"]


SGD = lambda M, p: M.optim.SGD(p, lr=0.1, momentum=0.9)  # noqa: E731
ADAM = lambda M, p: M.optim.Adam(p, lr=0.1)  # noqa: E731
CYCLIC = {
    "triangular-SGD": (SGD, dict(base_lr=0.01, max_lr=0.1, step_size_up=4)),
    "triangular-Adam": (ADAM, dict(base_lr=0.01, max_lr=0.1, step_size_up=4, step_size_down=7)),
    "triangular2-SGD": (SGD, dict(base_lr=0.01, max_lr=0.1, step_size_up=3, mode="triangular2",
                                  base_momentum=0.7, max_momentum=0.95)),
    "triangular2-Adam": (ADAM, dict(base_lr=0.001, max_lr=0.05, step_size_up=5, step_size_down=2,
                                    mode="triangular2")),
    "exp_range-SGD": (SGD, dict(base_lr=0.01, max_lr=0.1, step_size_up=4, mode="exp_range", gamma=0.95)),
    "exp_range-Adam": (ADAM, dict(base_lr=0.01, max_lr=0.1, step_size_up=3, mode="exp_range", gamma=0.9)),
    "scale_fn-iterations-SGD": (SGD, dict(base_lr=0.01, max_lr=0.1, step_size_up=4,
                                          scale_fn=lambda x: 1.0 / (1 + 0.1 * x), scale_mode="iterations")),
    "no-momentum-cycling-SGD": (SGD, dict(base_lr=0.02, max_lr=0.2, step_size_up=5, cycle_momentum=False)),
}


@pytest.mark.parametrize("name", list(CYCLIC))
def test_cyclic_lr_equals_torch(name):
    opt_fn, kw = CYCLIC[name]
    sched = lambda M, o: M.optim.lr_scheduler.CyclicLR(o, **kw)  # noqa: E731
    (wa, sa, _), (wb, sb, _) = (_schedule(M, opt_fn, sched) for M in (torch, tt))
    assert sb == sa  # learning rates and momenta bit for bit
    np.testing.assert_allclose(wb, wa, rtol=1e-12, atol=1e-14)
    assert len({lr for lr, _ in sa}) >= 4   # the schedule moves


def test_cyclic_lr_state_dict_round_trips_and_bad_input_is_refused():
    _, _, sch = _schedule(tt, SGD, lambda M, o: M.optim.lr_scheduler.CyclicLR(o, 0.01, 0.1, 4), steps=5)
    _, _, torch_sch = _schedule(torch, SGD, lambda M, o: M.optim.lr_scheduler.CyclicLR(o, 0.01, 0.1, 4), steps=5)
    state = sch.state_dict()
    assert set(state) == set(torch_sch.state_dict()) - {"_get_lr_called_within_step"}  # (torch's base class)
    again = tt.optim.lr_scheduler.CyclicLR(tt.optim.SGD([tt.zeros(2, requires_grad=True)], lr=0.1, momentum=0.9),
                                           0.01, 0.1, 4)
    again.load_state_dict(state)
    assert again.last_epoch == 5 and again.get_last_lr() == sch.get_last_lr()
    p = [tt.zeros(2, requires_grad=True)]
    with pytest.raises(ValueError, match="optimizer must support momentum or beta1"):
        tt.optim.lr_scheduler.CyclicLR(tt.optim.Adagrad(p, lr=0.1), 0.01, 0.1)
    with pytest.raises(ValueError, match="mode is invalid and scale_fn is None"):
        tt.optim.lr_scheduler.CyclicLR(tt.optim.SGD(p, lr=0.1), 0.01, 0.1, mode="sine")
    with pytest.raises(ValueError, match="max_lr must have the same length as optimizer.param_groups"):
        tt.optim.lr_scheduler.CyclicLR(tt.optim.SGD(p, lr=0.1), 0.01, [0.1, 0.2])
    with pytest.raises(TypeError, match="is not an Optimizer"):
        tt.optim.lr_scheduler.CyclicLR(object(), 0.01, 0.1)


CHAINED = {
    "ConstantLR-ExponentialLR-SGD": (SGD, lambda M, o: [M.optim.lr_scheduler.ConstantLR(o, factor=0.1, total_iters=6),
                                                          M.optim.lr_scheduler.ExponentialLR(o, gamma=0.9)]),
    "CyclicLR-ExponentialLR-Adam": (ADAM, lambda M, o: [M.optim.lr_scheduler.CyclicLR(o, 0.01, 0.1, 3),
                                                         M.optim.lr_scheduler.ExponentialLR(o, gamma=0.95)]),
}


@pytest.mark.parametrize("name", list(CHAINED))
def test_chained_scheduler_equals_torch(name):
    opt_fn, parts = CHAINED[name]
    sched = lambda M, o: M.optim.lr_scheduler.ChainedScheduler(parts(M, o), optimizer=o)  # noqa: E731
    (wa, sa, ta), (wb, sb, tb) = (_schedule(M, opt_fn, sched) for M in (torch, tt))
    assert sb == sa
    np.testing.assert_allclose(wb, wa, rtol=1e-12, atol=1e-14)
    assert set(tb.state_dict()) == set(ta.state_dict()) - {"_get_lr_called_within_step"}
    assert len(tb.state_dict()["_schedulers"]) == 2


def test_chained_scheduler_refuses_what_torch_refuses():
    o1 = tt.optim.SGD([tt.zeros(2, requires_grad=True)], lr=0.1)
    o2 = tt.optim.SGD([tt.zeros(2, requires_grad=True)], lr=0.1)
    s1, s2 = tt.optim.lr_scheduler.ExponentialLR(o1, 0.9), tt.optim.lr_scheduler.ExponentialLR(o2, 0.9)
    with pytest.raises(ValueError, match="expects at least one scheduler"):
        tt.optim.lr_scheduler.ChainedScheduler([])
    with pytest.raises(ValueError, match="same optimizer"):
        tt.optim.lr_scheduler.ChainedScheduler([s1, s2])
    with pytest.raises(ValueError, match="ReduceLROnPlateau"):
        tt.optim.lr_scheduler.ChainedScheduler([s1, tt.optim.lr_scheduler.ReduceLROnPlateau(o1)])
    lrs = []
    for M in (torch, tt):   # optimizer=None: the first scheduler's
        o = M.optim.SGD([M.zeros(2, requires_grad=True)], lr=0.1)
        chained = M.optim.lr_scheduler.ChainedScheduler([M.optim.lr_scheduler.ExponentialLR(o, 0.9),
                                                         M.optim.lr_scheduler.StepLR(o, 2, 0.5)])
        assert chained.optimizer is o
        for _ in range(5):
            o.step()
            chained.step()
            lrs.append(chained.get_last_lr())
    assert lrs[5:] == lrs[:5]


# ---- Bilinear ------------------------------------------------------------------------------------

@pytest.mark.parametrize("lead", [(), (5,), (2, 3)], ids=["unbatched", "batch", "two-batch-dims"])
@pytest.mark.parametrize("bias", [True, False])
def test_bilinear_function_and_module_equal_torch(lead, bias):
    rng = np.random.default_rng(4)
    x1, x2 = rng.standard_normal(lead + (3,)), rng.standard_normal(lead + (4,))
    w, b = rng.standard_normal((6, 3, 4)), rng.standard_normal(6)
    if bias:
        _same(TF.bilinear, F.bilinear, x1, x2, w, b)
    else:
        _same(TF.bilinear, F.bilinear, x1, x2, w)
    mt, mtt = torch.nn.Bilinear(3, 4, 6, bias=bias).double(), nn.Bilinear(3, 4, 6, bias=bias, dtype=tt.float64)
    _copy_params(mt, mtt)
    _same(mt, mtt, x1, x2)
    ya, yb = mt(torch.tensor(x1), torch.tensor(x2)), mtt(tt.tensor(x1), tt.tensor(x2))
    ya.sum().backward()
    yb.sum().backward()
    _grads_equal(mt, mtt)
    assert repr(mtt) == repr(mt)


def test_bilinear_parameters_are_torchs_and_bad_shapes_raise():
    m = nn.Bilinear(16, 5, 7)
    assert m.weight.shape == (7, 16, 5) and m.bias.shape == (7,) and list(m.state_dict()) == ["weight", "bias"]
    w = m.weight.detach().numpy()
    assert np.abs(w).max() <= 0.25 and np.abs(w).max() > 0.2 and w.std() > 0.1   # U(-1/sqrt(16), 1/sqrt(16))
    assert nn.Bilinear(2, 3, 4, bias=False).bias is None
    a, b, w = tt.randn(2, 3, dtype=tt.float64), tt.randn(2, 4, dtype=tt.float64), tt.randn(5, 3, 4, dtype=tt.float64)
    with pytest.raises(RuntimeError, match="input batch dimensions do not match at dim 0"):
        F.bilinear(a, tt.randn(3, 4, dtype=tt.float64), w)
    with pytest.raises(RuntimeError, match="input2 size does not match weight size"):
        F.bilinear(a, tt.randn(2, 5, dtype=tt.float64), w)
    with pytest.raises(RuntimeError, match="input dimensions do not match"):
        F.bilinear(a, tt.randn(2, 1, 4, dtype=tt.float64), w)
    with pytest.raises(RuntimeError, match="bias size does not match weight size"):
        F.bilinear(a, b, w, tt.randn(4, dtype=tt.float64))


# ---- EmbeddingBag --------------------------------------------------------------------------------

V, C = 9, 4
IDS_2D = np.array([[1, 2, 4, 4], [0, 8, 3, 1], [5, 5, 2, 0]])
IDS_1D, OFFSETS = np.array([3, 1, 4, 1, 5, 8, 2, 6, 0, 7]), np.array([0, 3, 3, 7])   # bag 1 is empty
BAGS = {
    "2d": (IDS_2D, None, {}),
    "1d-offsets": (IDS_1D, OFFSETS, {}),
    "1d-include-last-offset": (IDS_1D, np.array([0, 2, 2, 6, 10]), {"include_last_offset": True}),
    "2d-padding": (IDS_2D, None, {"padding_idx": 4}),
    "1d-padding-negative": (IDS_1D, OFFSETS, {"padding_idx": -1}),   # row 8
    "2d-all-padding-bag": (np.array([[2, 2, 2], [1, 2, 3]]), None, {"padding_idx": 2}),
    "1d-every-id-padding": (np.array([2, 2, 2]), np.array([0, 1]), {"padding_idx": 2}),
}


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("bags", list(BAGS))
def test_embedding_bag_function_equals_torch(bags, mode):
    ids, offsets, kw = BAGS[bags]
    table = np.random.default_rng(5).standard_normal((V, C))

    def run(M, f, w):
        off = None if offsets is None else M.tensor(offsets)
        return f(M.tensor(ids), w, off, mode=mode, **kw)
    _same(lambda w: run(torch, TF.embedding_bag, w), lambda w: run(tt, F.embedding_bag, w), table)


@pytest.mark.parametrize("bags", ["2d", "1d-offsets", "2d-padding"])
def test_embedding_bag_per_sample_weights_equal_torch(bags):
    ids, offsets, kw = BAGS[bags]
    rng = np.random.default_rng(6)
    table, psw = rng.standard_normal((V, C)), rng.standard_normal(ids.shape)

    def run(M, f, w, p):
        off = None if offsets is None else M.tensor(offsets)
        return f(M.tensor(ids), w, off, mode="sum", per_sample_weights=p, **kw)
    _same(lambda w, p: run(torch, TF.embedding_bag, w, p), lambda w, p: run(tt, F.embedding_bag, w, p), table, psw)


@pytest.mark.parametrize("kw", [{"mode": "sum"}, {"mode": "max", "padding_idx": 3},
                                {"mode": "mean", "max_norm": 1.0, "include_last_offset": True}],
                         ids=["sum", "max-padding", "mean-max-norm-last-offset"])
def test_embedding_bag_module_equals_torch(kw):
    mt, mtt = torch.nn.EmbeddingBag(V, C, **kw).double(), nn.EmbeddingBag(V, C, dtype=tt.float64, **kw)
    if "padding_idx" in kw:
        assert not mtt.weight.detach().numpy()[kw["padding_idx"]].any()
    _copy_params(mt, mtt)
    offsets = np.array([0, 3, 3, 7, 10]) if kw.get("include_last_offset") else OFFSETS
    ya = mt(torch.tensor(IDS_1D), torch.tensor(offsets))
    yb = mtt(tt.tensor(IDS_1D), tt.tensor(offsets))
    np.testing.assert_allclose(yb.detach().numpy(), ya.detach().numpy(), rtol=1e-12, atol=1e-14)
    g = np.random.default_rng(7).standard_normal(tuple(ya.shape))
    ya.backward(torch.tensor(g))
    yb.backward(tt.tensor(g))
    _grads_equal(mt, mtt)
    np.testing.assert_allclose(mtt.weight.detach().numpy(), mt.weight.detach().numpy(), rtol=1e-12)  # max_norm's renorm
    assert repr(mtt) == repr(mt)


def test_bilinear_and_embedding_bag_take_odd_tilings():
    """Operands split into tiles with a smaller last tile give torch's values and gradients."""
    rng = np.random.default_rng(10)
    x1, x2, w, b = (rng.standard_normal(s) for s in ((7, 5), (7, 3), (4, 5, 3), (4,)))
    tiles = [(3, 2), (3, 2), (3, 2, 2), (3,)]
    A = [torch.tensor(a, requires_grad=True) for a in (x1, x2, w, b)]
    B = [tt.from_numpy(a, t).requires_grad_() for a, t in zip((x1, x2, w, b), tiles)]
    ya, yb = TF.bilinear(*A), F.bilinear(*B)
    table = rng.standard_normal((V, C))
    ta, tb = torch.tensor(table, requires_grad=True), tt.from_numpy(table, (4, 3)).requires_grad_()
    ea = TF.embedding_bag(torch.tensor(IDS_1D), ta, torch.tensor(OFFSETS), mode="max")
    eb = F.embedding_bag(tt.tensor(IDS_1D), tb, tt.tensor(OFFSETS), mode="max")
    for u, v in ((ya, yb), (ea, eb)):
        np.testing.assert_allclose(v.detach().numpy(), u.detach().numpy(), rtol=1e-12, atol=1e-14)
    ((ya ** 2).sum() + (ea ** 3).sum()).backward()
    ((yb ** 2).sum() + (eb ** 3).sum()).backward()
    for u, v in zip(A + [ta], B + [tb]):
        np.testing.assert_allclose(v.grad.numpy(), u.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_embedding_bag_refuses_what_torch_refuses_and_what_it_does_not_support():
    w = tt.randn(V, C, dtype=tt.float64)
    ids1, ids2 = tt.tensor(IDS_1D), tt.tensor(IDS_2D)
    with pytest.raises(ValueError, match="if input is 2D, then offsets has to be None"):
        F.embedding_bag(ids2, w, tt.tensor(OFFSETS))
    with pytest.raises(ValueError, match="offsets has to be a 1D Tensor but got None"):
        F.embedding_bag(ids1, w)
    with pytest.raises(RuntimeError, match=r"offsets\[0\] has to be 0"):
        F.embedding_bag(ids1, w, tt.tensor([1, 3]))
    with pytest.raises(RuntimeError, match=r"offsets\[-1\] can not be greater than input's length"):
        F.embedding_bag(ids1, w, tt.tensor([0, 11]))
    with pytest.raises(ValueError, match="the last offset must be the input's length 10"):
        F.embedding_bag(ids1, w, tt.tensor([0, 3, 9]), include_last_offset=True)
    with pytest.raises(ValueError, match="mode has to be one of sum, mean or max"):
        F.embedding_bag(ids2, w, mode="median")
    with pytest.raises(NotImplementedError, match="per_sample_weights is only supported for mode='sum'"):
        F.embedding_bag(ids2, w, per_sample_weights=tt.ones(3, 4, dtype=tt.float64))
    with pytest.raises(ValueError, match="must have the same shape as the input"):
        F.embedding_bag(ids2, w, mode="sum", per_sample_weights=tt.ones(3, 3, dtype=tt.float64))
    with pytest.raises(ValueError, match="max mode does not support sparse weights"):
        F.embedding_bag(ids2, w, mode="max", sparse=True)
    with pytest.raises(NotImplementedError, match="scale_grad_by_freq"):
        F.embedding_bag(ids2, w, scale_grad_by_freq=True)
    with pytest.raises(NotImplementedError, match="sparse"):
        F.embedding_bag(ids2, w, sparse=True)
    with pytest.raises(NotImplementedError, match="sparse"):
        nn.EmbeddingBag(V, C, sparse=True)
    with pytest.raises(RuntimeError, match="padding_idx must be within the number of embeddings"):
        F.embedding_bag(ids2, w, padding_idx=V)
    with pytest.raises(AssertionError, match="padding_idx must be within num_embeddings"):
        nn.EmbeddingBag(V, C, padding_idx=-V - 1)
    m = nn.EmbeddingBag.from_pretrained(w, mode="sum")
    assert not m.weight.requires_grad and m(ids2).shape == (3, C)


# ---- weight_norm ---------------------------------------------------------------------------------

LAYERS = {
    "Linear": (lambda M: M.nn.Linear(5, 3), (4, 5)),
    "Conv1d": (lambda M: M.nn.Conv1d(2, 3, 3), (2, 2, 7)),
    "Conv2d": (lambda M: M.nn.Conv2d(2, 4, 3, padding=1), (2, 2, 5, 5)),
}


def _wrapped_pair(layer, wrap, dim):
    build, _ = LAYERS[layer]
    mt, mtt = build(torch).double(), build(tt).double()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        _copy_params(mt, mtt)            # the same weights before wrapping: g and v follow from them
        wrap(torch)(mt, dim=dim)
        wrap(tt)(mtt, dim=dim)
    return mt, mtt


def _train_steps(mt, mtt, shape, steps=3):
    """Forward, backward and an SGD step, a few times: outputs and every gradient equal."""
    x = np.random.default_rng(8).standard_normal(shape)
    ot, ott = torch.optim.SGD(mt.parameters(), lr=0.05), tt.optim.SGD(mtt.parameters(), lr=0.05)
    for _ in range(steps):
        ot.zero_grad()
        ott.zero_grad()
        ya, yb = mt(torch.tensor(x)), mtt(tt.tensor(x))
        np.testing.assert_allclose(yb.detach().numpy(), ya.detach().numpy(), rtol=1e-12, atol=1e-14)
        (ya ** 2).mean().backward()
        (yb ** 2).mean().backward()
        _grads_equal(mt, mtt)
        ot.step()
        ott.step()


@pytest.mark.parametrize("dim", [0, 1, None, -2], ids=["dim0", "dim1", "whole", "dim-2"])
@pytest.mark.parametrize("layer", list(LAYERS))
def test_weight_norm_hook_form_equals_torch(layer, dim):
    mt, mtt = _wrapped_pair(layer, lambda M: M.nn.utils.weight_norm, dim)
    assert list(mtt.state_dict()) == list(mt.state_dict())
    assert [k for k in mtt.state_dict() if k.startswith("weight")] == ["weight_g", "weight_v"]
    for k, v in mt.state_dict().items():
        np.testing.assert_allclose(mtt.state_dict()[k], v.numpy(), rtol=1e-12, atol=1e-14, err_msg=k)
    _train_steps(mt, mtt, LAYERS[layer][1])
    torch.nn.utils.remove_weight_norm(mt)
    tt.nn.utils.remove_weight_norm(mtt)
    assert list(mtt.state_dict()) == list(mt.state_dict())
    assert isinstance(mtt.weight, nn.Parameter)
    np.testing.assert_allclose(mtt.weight.detach().numpy(), mt.weight.detach().numpy(), rtol=1e-12, atol=1e-14)
    _train_steps(mt, mtt, LAYERS[layer][1], steps=1)


@pytest.mark.parametrize("dim", [0, None], ids=["dim0", "whole"])
@pytest.mark.parametrize("layer", list(LAYERS))
def test_weight_norm_parametrization_equals_torch(layer, dim):
    mt, mtt = _wrapped_pair(layer, lambda M: M.nn.utils.parametrizations.weight_norm, dim)
    assert list(mtt.state_dict()) == list(mt.state_dict())
    assert type(mtt).__name__ == type(mt).__name__ == f"Parametrized{layer}"
    np.testing.assert_allclose(mtt.weight.detach().numpy(), mt.weight.detach().numpy(), rtol=1e-12, atol=1e-14)
    _train_steps(mt, mtt, LAYERS[layer][1])
    for M, m in ((torch, mt), (tt, mtt)):
        M.nn.utils.parametrize.remove_parametrizations(m, "weight")
    assert type(mtt).__name__ == layer and list(mtt.state_dict()) == list(mt.state_dict())
    np.testing.assert_allclose(mtt.weight.detach().numpy(), mt.weight.detach().numpy(), rtol=1e-12, atol=1e-14)


def test_weight_norm_refuses_what_torch_refuses():
    m = nn.Linear(3, 2)
    with pytest.warns(FutureWarning, match="parametrizations.weight_norm"):
        nn.utils.weight_norm(m)
    with pytest.raises(RuntimeError, match="Cannot register two weight_norm hooks on the same parameter weight"), \
            pytest.warns(FutureWarning):
        nn.utils.weight_norm(m)
    with pytest.raises(ValueError, match="weight_norm of 'bias' not found"):
        nn.utils.remove_weight_norm(m, "bias")
    with pytest.raises(IndexError, match="Dimension out of range"):
        nn.utils.parametrizations.weight_norm(nn.Linear(3, 2), dim=2)
    with pytest.raises(AttributeError, match="has no parameter 'kernel'"):
        nn.utils.parametrizations.weight_norm(nn.Linear(3, 2), name="kernel")
