"""torch.optim.LBFGS against torch's (float64): the losses of every step, the parameters,
the iteration and evaluation counts, with a fixed step and with the strong-Wolfe line search,
a short history (pairs dropped), a state_dict round trip, and torch's errors."""
import numpy as np
import pytest
import torch

import tiletrain as tt


def _problem(lib, seed=0):
    """A Rosenbrock-like sum over two parameter tensors plus a small quartic coupling."""
    rng = np.random.default_rng(seed)
    a = lib.tensor(rng.standard_normal((3, 2)) * 0.8, requires_grad=True)
    b = lib.tensor(rng.standard_normal(4) * 0.8, requires_grad=True)
    c = lib.tensor(rng.standard_normal((3, 4)))

    def f():
        x = a.reshape(-1)
        ros = (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()
        return ros + ((a @ b.reshape(2, 2)).pow(2).sum() - 1) ** 2 * 0.1 + (c @ b).pow(4).sum() * 0.01

    return [a, b], f


def _run(lib, steps, **kw):
    params, f = _problem(lib)
    opt = lib.optim.LBFGS(params, **kw)

    def closure():
        opt.zero_grad()
        loss = f()
        loss.backward()
        return loss

    losses = [opt.step(closure).item() for _ in range(steps)]
    st = opt.state[params[0]] if lib is torch else opt.state[id(params[0])]
    return losses, [p.detach().numpy().copy() for p in params], (st["func_evals"], st["n_iter"]), opt, closure


@pytest.mark.parametrize("kw", [dict(lr=0.5, max_iter=6, history_size=3),
                                dict(lr=1, max_iter=8, line_search_fn="strong_wolfe"),
                                dict(lr=1, max_iter=10, history_size=2, line_search_fn="strong_wolfe"),
                                dict(lr=0.1, max_iter=3, max_eval=2)])
def test_lbfgs_equals_torch(kw):
    ref = _run(torch, 4, **kw)
    ours = _run(tt, 4, **kw)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-9, atol=1e-12)
    for u, v in zip(ref[1], ours[1]):
        np.testing.assert_allclose(v, u, rtol=1e-8, atol=1e-10)
    assert ours[2] == ref[2]
    assert ref[0][-1] < ref[0][0]


def test_lbfgs_state_dict_round_trip_continues_the_same():
    _, _, _, opt, closure = _run(tt, 2, lr=1, max_iter=5, history_size=3, line_search_fn="strong_wolfe")
    sd = opt.state_dict()
    params, f = _problem(tt)
    with tt.no_grad():
        for p, q in zip(params, opt.param_groups[0]["params"]):
            p.copy_(q)
    fresh = tt.optim.LBFGS(params, lr=1, max_iter=5, history_size=3, line_search_fn="strong_wolfe")
    fresh.load_state_dict(sd)

    def closure2():
        fresh.zero_grad()
        loss = f()
        loss.backward()
        return loss

    a, b = opt.step(closure).item(), fresh.step(closure2).item()
    assert a == b
    np.testing.assert_array_equal(params[0].detach().numpy(), opt.param_groups[0]["params"][0].detach().numpy())


def test_lbfgs_refuses_what_torch_refuses():
    w = tt.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="strong_wolfe"):
        tt.optim.LBFGS([w], line_search_fn="backtracking")
    with pytest.raises(ValueError, match="parameter groups"):
        tt.optim.LBFGS([{"params": [w]}, {"params": [tt.zeros(2, requires_grad=True)]}])
    with pytest.raises(RuntimeError, match="closure"):
        tt.optim.LBFGS([w]).step()


def _objective(seed, k=1):
    """A smooth non-quadratic function of 5 variables (NumPy) and its gradient; k: the
    frequency of its sine term; k=0: least squares plus |x|_1 instead (the zoom then stalls:
    torch's insufficient-progress rule)."""
    rng = np.random.default_rng(seed)
    A, b = rng.standard_normal((5, 5)), rng.standard_normal(5)

    def f(x):
        r = A @ x - b
        if k == 0:  # least squares plus an L1 term: kinks that make the zoom stall
            return float(r @ r + np.abs(x).sum()), 2 * A.T @ r + np.sign(x)
        return float(np.log1p(r @ r) + 0.05 * (x ** 4).sum() + np.sin(k * x).sum()), \
            2 * A.T @ r / (1 + r @ r) + 0.2 * x ** 3 + k * np.cos(k * x)

    return f, rng.standard_normal(5)


@pytest.mark.parametrize("seed,k", [(s, 1) for s in range(6)] + [(0, 8), (0, 0), (1, 0)])
@pytest.mark.parametrize("t0", [1e-3, 0.05, 1.0, 3.0, 30.0])
def test_strong_wolfe_line_search_equals_torchs(seed, k, t0):
    """The line search alone (extrapolation from short steps, zoom from long ones) against
    torch.optim.lbfgs's: the same evaluation count, step, loss and gradient (to 1e-6: the zoom's
    cubic fits cancel, and the two libraries' dot products round differently)."""
    from torch.optim.lbfgs import _strong_wolfe
    from tiletrain.optim.line_search import strong_wolfe
    f, x = _objective(seed, k)
    f0, g0 = f(x)
    d = -g0
    gtd = float(g0 @ d)

    def torch_obj(xt, t, dt):
        fv, gv = f(xt.numpy() + float(t) * dt.numpy())
        return fv, torch.tensor(gv)

    ref = _strong_wolfe(torch_obj, torch.tensor(x), t0, torch.tensor(d), f0, torch.tensor(g0), torch.tensor(gtd))
    ours = strong_wolfe(lambda t: f(x + t * d), t0, d, f0, g0, gtd)
    assert ours[3] == ref[3]
    np.testing.assert_allclose([ours[0], float(ours[2])], [float(ref[0]), float(ref[2])], rtol=1e-6)
    np.testing.assert_allclose(ours[1], ref[1].numpy(), rtol=1e-6, atol=1e-9)
