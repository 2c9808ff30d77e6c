"""Optimizers and gradient clipping against PyTorch's torch.optim on the same numbers."""
import numpy as np
import pytest

import tiletrain as tt
from tiletrain.optim import SGD, Adam, AdamW, clip_grad_norm_, cosine_with_warmup

import torch


def _problem(rng):
    w = rng.standard_normal((7, 5))
    b = rng.standard_normal(5)
    x = rng.standard_normal((6, 7))
    return w, b, x


def _run_tiletrain(make_opt, w, b, x, steps, clip=None):
    W = tt.from_numpy(w, (3, 2)).requires_grad_()
    B = tt.from_numpy(b, 2).requires_grad_()
    X = tt.from_numpy(x, (4, 3))
    opt = make_opt([W, B])
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        y = tt.ops.activations.affine(X, W, B)  # x @ w + b
        loss = tt.sum(y * y) * 0.5
        loss.backward()
        if clip is not None:
            clip_grad_norm_([W, B], clip)
        opt.step()
        losses.append(float(loss))
    return W.detach().numpy(), B.detach().numpy(), losses, opt


def _run_torch(make_opt, w, b, x, steps, clip=None):
    W = torch.tensor(w, requires_grad=True)
    B = torch.tensor(b, requires_grad=True)
    X = torch.tensor(x)
    opt = make_opt([W, B])
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        y = X @ W + B
        loss = 0.5 * (y * y).sum()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_([W, B], clip)
        opt.step()
        losses.append(loss.item())
    return W.detach().numpy(), B.detach().numpy(), losses


CASES = {
    "adamw": (lambda p: AdamW(p, lr=0.05, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1),
              lambda p: torch.optim.AdamW(p, lr=0.05, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)),
    "adam": (lambda p: Adam(p, lr=0.05, betas=(0.9, 0.95), weight_decay=0.1),   # L2 decay, not decoupled
             lambda p: torch.optim.Adam(p, lr=0.05, betas=(0.9, 0.95), weight_decay=0.1)),
    "adam_default_maximize": (lambda p: Adam(p, maximize=True),
                              lambda p: torch.optim.Adam(p, maximize=True)),
    "sgd": (lambda p: SGD(p, lr=0.01, weight_decay=0.01),
            lambda p: torch.optim.SGD(p, lr=0.01, weight_decay=0.01)),
    "sgd_momentum": (lambda p: SGD(p, lr=0.01, momentum=0.9, dampening=0.1, weight_decay=0.01),
                     lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    "sgd_nesterov": (lambda p: SGD(p, lr=0.01, momentum=0.9, nesterov=True),
                     lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9, nesterov=True)),
}


@pytest.mark.parametrize("clip", [None, 1.0])
@pytest.mark.parametrize("name", list(CASES))
def test_matches_torch(rng, name, clip):
    w, b, x = _problem(rng)
    ours, theirs = CASES[name]
    W1, B1, l1, _ = _run_tiletrain(ours, w, b, x, 6, clip)
    W2, B2, l2 = _run_torch(theirs, w, b, x, 6, clip)
    np.testing.assert_allclose(l1, l2, rtol=1e-10)
    np.testing.assert_allclose(W1, W2, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(B1, B2, rtol=1e-10, atol=1e-12)


def test_clip_grad_norm_returns_total_norm(rng):
    a = rng.standard_normal((5, 4))
    P = tt.from_numpy(a, (2, 3)).requires_grad_()
    tt.sum(P * P).backward()           # grad = 2a
    norm = clip_grad_norm_([P], 0.5)
    total = np.linalg.norm(2 * a)
    assert abs(float(norm) - total) < 1e-10 * total
    np.testing.assert_allclose(P.grad.numpy(), 2 * a * 0.5 / (total + 1e-6), rtol=1e-12)
    with pytest.raises(ValueError, match="max_norm must be > 0"):
        clip_grad_norm_([P], 0.0)
    assert float(clip_grad_norm_([tt.from_numpy(a)], 1.0)) == 0.0  # no gradient: a norm of 0, as torch


def test_state_dict_round_trip(rng):
    w, b, x = _problem(rng)
    W, B, _, opt = _run_tiletrain(CASES["adamw"][0], w, b, x, 3)
    sd = opt.state_dict()
    assert float(sd["state"][0]["step"]) == 3 and sd["state"][0]["exp_avg"].shape == w.shape
    W2 = tt.from_numpy(W, (3, 2)).requires_grad_()
    B2 = tt.from_numpy(B, 2).requires_grad_()
    opt2 = AdamW([W2, B2], lr=0.05, betas=(0.9, 0.95), weight_decay=0.1)
    opt2.load_state_dict(sd)
    sd2 = opt2.state_dict()
    np.testing.assert_array_equal(sd2["state"][1]["exp_avg_sq"], sd["state"][1]["exp_avg_sq"])
    bad = {"state": {0: {"step": 1, "exp_avg": np.zeros((2, 2)), "exp_avg_sq": np.zeros((2, 2))}},
           "param_groups": sd["param_groups"]}
    with pytest.raises(ValueError, match="has shape"):
        opt2.load_state_dict(bad)


def test_bad_optimizer_arguments(rng):
    P = tt.from_numpy(rng.standard_normal(3)).requires_grad_()
    with pytest.raises(ValueError, match="empty parameter list"):
        AdamW([])
    with pytest.raises(ValueError, match="lr must be >= 0"):
        AdamW([P], lr=-1.0)
    with pytest.raises(ValueError, match="betas must be in"):
        AdamW([P], betas=(1.0, 0.9))
    with pytest.raises(TypeError, match="not a tiletrain Tensor"):
        SGD([np.zeros(3)])
    with pytest.raises(ValueError, match="nesterov needs momentum"):
        SGD([P], nesterov=True)


def test_cosine_schedule():
    lrs = [cosine_with_warmup(s, lr=1.0, warmup=10, total=110, min_lr=0.1) for s in range(120)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert lrs[60] == pytest.approx(0.1 + 0.45 * (1 + np.cos(np.pi * 0.5)))
    assert lrs[110] == 0.1 and all(a >= b for a, b in zip(lrs[10:110], lrs[11:110]))


def test_adam_and_adamw_keep_torchs_group_keys(rng):
    w, b, x = _problem(rng)
    W = tt.from_numpy(w).requires_grad_()
    for mine, torchs in ((Adam, torch.optim.Adam), (tt.optim.AdamW, torch.optim.AdamW)):
        ours = mine([W], lr=1e-3).state_dict()["param_groups"][0]
        theirs = torchs([torch.tensor(w, requires_grad=True)], lr=1e-3).state_dict()["param_groups"][0]
        assert set(theirs) - {"decoupled_weight_decay"} <= set(ours)
    with pytest.raises(ValueError, match="compensation does not combine"):
        tt.optim.AdamW([W], amsgrad=True, compensation="sc", delay=2)


@pytest.mark.parametrize("name", ["SGD", "Adam", "RMSprop"])
def test_step_with_a_closure_as_torch(name):
    """opt.step(closure): the closure runs first with gradients enabled (even under no_grad),
    step returns its loss, and the update is torch's."""
    w0, x = np.array([0.5, -1.0, 2.0]), np.array([1.0, 2.0, -0.5])
    results = []
    for lib in (torch, tt):
        w = lib.tensor(w0.copy(), requires_grad=True)
        opt = getattr(lib.optim, name)([w], lr=0.1)
        xt = lib.tensor(x)
        calls = []

        def closure():
            opt.zero_grad()
            loss = ((w * xt).sum() - 1.0) ** 2 + (w * w).sum()
            loss.backward()
            calls.append(1)
            return loss

        with lib.no_grad():
            first = opt.step(closure)
        second = opt.step(closure)
        assert opt.step() is None
        results.append((first.item(), second.item(), w.detach().numpy().copy(), len(calls)))
    (a1, a2, aw, an), (b1, b2, bw, bn) = results
    assert an == bn == 2 and a1 != a2
    np.testing.assert_allclose([b1, b2], [a1, a2], rtol=1e-12)
    np.testing.assert_allclose(bw, aw, rtol=1e-12, atol=1e-15)
