"""torch.distributions' families beyond Normal/Uniform/Bernoulli/Categorical, each against
torch itself in float64: log_prob, entropy, mean, mode, variance, stddev, cdf, icdf and
kl_divergence, values and gradients with respect to the parameters; batch and event shapes;
tiletrain's own draws checked by their moments (fixed seed, tolerant bounds); the Gamma, Beta
and Dirichlet draws and their reparameterised gradients equal torch's after the same seed."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import tiletrain as tt
from tiletrain.distributions import _dirichlet_grad_np, _standard_gamma_grad_np

TD, D = torch.distributions, tt.distributions
rng = np.random.default_rng(11)
SHAPE = (3, 4)


def _pos(shape=SHAPE, lo=0.3, hi=3.0):
    return rng.uniform(lo, hi, shape)


def _check(fn_t, fn_tt, arrays, rtol=1e-12, atol=1e-13, grad_rtol=None):
    """fn over torch and tiletrain leaves made from arrays: equal values and equal gradients
    of a random weighting of the result with respect to every array."""
    A = [torch.tensor(a, requires_grad=True) for a in arrays]
    B = [tt.tensor(a, requires_grad=True) for a in arrays]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ra, rb = fn_t(*A), fn_tt(*B)
    assert tuple(rb.shape) == tuple(ra.shape)
    assert rb.detach().numpy().dtype == ra.detach().numpy().dtype
    np.testing.assert_allclose(rb.detach().numpy(), ra.detach().numpy(), rtol=rtol, atol=atol)
    if not ra.requires_grad:
        return
    w = np.random.default_rng(9).standard_normal(tuple(ra.shape))
    ra.backward(torch.tensor(w))
    rb.backward(tt.tensor(w))
    for a, b in zip(A, B):
        if a.grad is not None:
            # grad_rtol (also an absolute bound): a looser bound where a case needs one
            np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=grad_rtol or rtol, atol=grad_rtol or atol)


def _tril(d=3, batch=(2,)):
    m = np.tril(rng.standard_normal(batch + (d, d))) * 0.5
    idx = np.arange(d)
    m[..., idx, idx] = rng.uniform(0.5, 1.5, batch + (d,))
    return m


def _spd(d=3, batch=(2,)):
    a = rng.standard_normal(batch + (d, d))
    return a @ np.swapaxes(a, -1, -2) + np.eye(d)


def _simplex(shape=SHAPE):
    x = rng.uniform(0.1, 1.0, shape)
    return x / x.sum(-1, keepdims=True)


def _onehot(shape=SHAPE):
    return np.eye(shape[-1])[rng.integers(0, shape[-1], shape[:-1])]


U = rng.uniform(0.05, 0.95, SHAPE)
COUNTS = rng.integers(0, 6, SHAPE).astype(np.float64)
# id: (constructor(D, *params), params, value (a numpy array), what to compare, gradient rtol)
CASES = {
    "exponential": (lambda d, r: d.Exponential(r), [_pos()], _pos(),
                    ["log_prob", "entropy", "mean", "mode", "variance", "stddev", "cdf", "icdf"], None),
    "laplace": (lambda d, m, s: d.Laplace(m, s), [rng.standard_normal(SHAPE), _pos()], rng.standard_normal(SHAPE),
                ["log_prob", "entropy", "mean", "mode", "variance", "stddev", "cdf", "icdf"], None),
    "lognormal": (lambda d, m, s: d.LogNormal(m, s), [rng.standard_normal(SHAPE) * 0.5, _pos(hi=1.0)], _pos(),
                  ["log_prob", "entropy", "mean", "mode", "variance", "stddev", "cdf", "icdf"], None),
    "normal": (lambda d, m, s: d.Normal(m, s), [rng.standard_normal(SHAPE), _pos()], rng.standard_normal(SHAPE),
               ["log_prob", "entropy", "cdf", "icdf"], None),
    "gamma": (lambda d, c, r: d.Gamma(c, r), [_pos(), _pos()], _pos(),
              ["log_prob", "entropy", "mean", "mode", "variance", "stddev"], None),
    "beta": (lambda d, a, b: d.Beta(a, b), [_pos(), _pos()], U, ["log_prob", "entropy", "mean", "mode", "variance"],
             None),
    "dirichlet": (lambda d, c: d.Dirichlet(c), [_pos()], _simplex(),
                  ["log_prob", "entropy", "mean", "mode", "variance"], None),
    "poisson": (lambda d, r: d.Poisson(r), [_pos(hi=6.0)], COUNTS, ["log_prob", "mean", "mode", "variance"], None),
    "binomial_probs": (lambda d, p: d.Binomial(7, probs=p), [U], COUNTS,
                       ["log_prob", "entropy", "mean", "mode", "variance"], None),
    "binomial_logits": (lambda d, lg: d.Binomial(torch.full(SHAPE, 7.0, dtype=torch.float64) if d is TD else
                                                 tt.full(SHAPE, 7.0, dtype=tt.float64), logits=lg),
                        [rng.standard_normal(SHAPE)], COUNTS, ["log_prob", "entropy", "mean", "mode", "variance"],
                        None),
    "geometric_probs": (lambda d, p: d.Geometric(probs=p), [U], COUNTS,
                        ["log_prob", "entropy", "mean", "mode", "variance"], None),
    "geometric_logits": (lambda d, lg: d.Geometric(logits=lg), [rng.standard_normal(SHAPE)], COUNTS,
                         ["log_prob", "entropy", "mean", "variance"], None),
    "onehot_logits": (lambda d, lg: d.OneHotCategorical(logits=lg), [rng.standard_normal(SHAPE)], _onehot(),
                      ["log_prob", "entropy", "mean", "mode", "variance"], None),
    "onehot_probs": (lambda d, p: d.OneHotCategorical(probs=p), [_simplex()], _onehot(),
                     ["log_prob", "entropy", "mean", "variance"], None),
    "independent": (lambda d, m, s: d.Independent(d.Normal(m, s), 1), [rng.standard_normal(SHAPE), _pos()],
                    rng.standard_normal(SHAPE), ["log_prob", "entropy", "mean", "mode", "variance"], None),
    "mvn_scale_tril": (lambda d, m, L: d.MultivariateNormal(m, scale_tril=L), [rng.standard_normal((2, 3)), _tril()],
                       rng.standard_normal((4, 2, 3)),
                       ["log_prob", "entropy", "mean", "mode", "variance", "covariance_matrix", "precision_matrix"],
                       1e-10),
    "mvn_covariance": (lambda d, m, c: d.MultivariateNormal(m, covariance_matrix=c), [rng.standard_normal(3), _spd()],
                       rng.standard_normal((4, 2, 3)), ["log_prob", "entropy", "variance", "scale_tril"], 1e-10),
    "mvn_precision": (lambda d, m, c: d.MultivariateNormal(m, precision_matrix=c),
                      [rng.standard_normal((2, 3)), _spd()],
                      rng.standard_normal((2, 3)), ["log_prob", "entropy", "variance", "scale_tril",
                                                     "covariance_matrix"], 1e-10),
}
CHECKS = [(case, what) for case, spec in CASES.items() for what in spec[3]]


@pytest.mark.parametrize("case,what", CHECKS, ids=[f"{c}-{w}" for c, w in CHECKS])
def test_family_values_and_gradients_equal_torch(case, what):
    ctor, params, value, _, grad_rtol = CASES[case]
    if what == "icdf":
        value = U

    def run(d, T):
        def fn(*ps):
            dist = ctor(d, *ps)
            if what in ("log_prob", "cdf", "icdf"):
                return getattr(dist, what)(T(value))
            r = getattr(dist, what)
            return r() if callable(r) else r
        return fn
    rtol = 1e-10 if case.startswith("mvn") else 1e-12  # a Cholesky / inverse of torch's own algebra
    _check(run(TD, torch.tensor), run(D, tt.tensor), params, rtol=rtol, grad_rtol=grad_rtol)


def test_gamma_cdf_equals_torch():
    """gammainc(concentration, rate * value): values and the gradient in rate and value; none in
    the concentration (torch's NotImplementedError, at backward)."""
    c, r, v = _pos(), _pos(), _pos(hi=6.0)
    _check(lambda r_, v_: TD.Gamma(torch.tensor(c), r_).cdf(v_), lambda r_, v_: D.Gamma(tt.tensor(c), r_).cdf(v_),
           [r, v])
    for d, T in ((TD, torch.tensor), (D, tt.tensor)):
        y = d.Gamma(T(c, requires_grad=True), T(r)).cdf(T(v))
        with pytest.raises(NotImplementedError, match="the derivative for 'igamma: input' is not implemented"):
            y.sum().backward()


@pytest.mark.parametrize("case", list(CASES))
def test_family_shapes_equal_torch(case):
    ctor, params, *_ = CASES[case]
    a, b = ctor(TD, *map(torch.tensor, params)), ctor(D, *map(tt.tensor, params))
    assert b.batch_shape == tuple(a.batch_shape) and b.event_shape == tuple(a.event_shape)
    s = b.sample((5,))
    assert tuple(s.shape) == tuple(a.sample((5,)).shape) and s.dtype == np.float64


KL = {
    "exponential": (lambda d, r: (d.Exponential(r), d.Exponential(r * 0.5 + 1)), [_pos()], None),
    "laplace": (lambda d, m, s: (d.Laplace(m, s), d.Laplace(m * 0.3 - 1, s + 0.5)),
                [rng.standard_normal(SHAPE), _pos()], None),
    "lognormal": (lambda d, m, s: (d.LogNormal(m, s), d.LogNormal(-m, s * 2)), [rng.standard_normal(SHAPE), _pos()],
                  None),
    "gamma": (lambda d, c, r: (d.Gamma(c, r), d.Gamma(r + 0.5, c)), [_pos(), _pos()], None),
    "beta": (lambda d, a, b: (d.Beta(a, b), d.Beta(b * 2, a + 1)), [_pos(), _pos()], None),
    "dirichlet": (lambda d, c: (d.Dirichlet(c), d.Dirichlet(c.flip(-1) + 0.5)), [_pos()], None),
    "poisson": (lambda d, r: (d.Poisson(r), d.Poisson(r * 0.5 + 0.2)), [_pos()], None),
    "binomial": (lambda d, p: (d.Binomial(5, probs=p), d.Binomial(5, probs=1 - p)), [U], None),
    "geometric": (lambda d, p: (d.Geometric(probs=p), d.Geometric(probs=1 - p)), [U], None),
    "onehot": (lambda d, lg: (d.OneHotCategorical(logits=lg), d.OneHotCategorical(logits=lg.flip(-1))),
               [rng.standard_normal(SHAPE)], None),
    "independent": (lambda d, m, s: (d.Independent(d.Normal(m, s), 1), d.Independent(d.Normal(-m, s + 1), 1)),
                    [rng.standard_normal(SHAPE), _pos()], None),
    "mvn": (lambda d, m, L, c: (d.MultivariateNormal(m, scale_tril=L),
                                d.MultivariateNormal(m * 0.5, covariance_matrix=c)),
            [rng.standard_normal((2, 3)), _tril(), _spd()], 1e-10),
}


@pytest.mark.parametrize("case", list(KL))
def test_kl_divergence_equals_torch(case):
    pair, params, grad_rtol = KL[case]
    rtol = 1e-10 if case == "mvn" else 1e-12
    _check(lambda *p: TD.kl_divergence(*pair(TD, *p)), lambda *p: D.kl_divergence(*pair(D, *p)), params, rtol=rtol,
           grad_rtol=grad_rtol)


# id: (distribution, expected mean, expected variance), numbers from the formulas
MOMENTS = {
    "exponential": (lambda: D.Exponential(tt.tensor([2.0], dtype=tt.float64)), 0.5, 0.25),
    "laplace": (lambda: D.Laplace(tt.tensor([1.0], dtype=tt.float64), 2.0), 1.0, 8.0),
    "lognormal": (lambda: D.LogNormal(tt.tensor([0.2], dtype=tt.float64), 0.5), np.exp(0.2 + 0.125),
                  np.expm1(0.25) * np.exp(0.4 + 0.25)),
    "gamma": (lambda: D.Gamma(tt.tensor([3.0], dtype=tt.float64), 2.0), 1.5, 0.75),
    "beta": (lambda: D.Beta(tt.tensor([2.0], dtype=tt.float64), 3.0), 0.4, 6 / (25 * 6)),
    "poisson": (lambda: D.Poisson(tt.tensor([4.0], dtype=tt.float64)), 4.0, 4.0),
    "binomial": (lambda: D.Binomial(10, probs=tt.tensor([0.3], dtype=tt.float64)), 3.0, 2.1),
    "geometric": (lambda: D.Geometric(probs=tt.tensor([0.25], dtype=tt.float64)), 3.0, 12.0),
}


@pytest.mark.parametrize("case", list(MOMENTS))
def test_draws_have_the_family_moments(case):
    make, mean, var = MOMENTS[case]
    tt.manual_seed(0)
    n = 40000
    x = make().sample((n,)).numpy().ravel()
    assert abs(x.mean() - mean) < 5 * np.sqrt(var / n)
    assert abs(x.var() / var - 1) < 0.1


def test_dirichlet_onehot_and_mvn_draws():
    tt.manual_seed(1)
    c = np.array([1.0, 2.0, 5.0])
    x = D.Dirichlet(tt.tensor(c)).sample((20000,)).numpy()
    np.testing.assert_allclose(x.sum(-1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(x.mean(0), c / c.sum(), atol=0.01)
    p = np.array([0.2, 0.5, 0.3])
    h = D.OneHotCategorical(probs=tt.tensor(p)).sample((20000,)).numpy()
    assert set(np.unique(h)) == {0.0, 1.0} and (h.sum(-1) == 1).all()
    np.testing.assert_allclose(h.mean(0), p, atol=0.015)
    cov = np.array([[2.0, 0.6], [0.6, 1.0]])
    mvn = D.MultivariateNormal(tt.tensor([1.0, -1.0], dtype=tt.float64), covariance_matrix=tt.tensor(cov))
    y = mvn.sample((40000,))
    np.testing.assert_allclose(y.numpy().mean(0), [1.0, -1.0], atol=0.03)
    np.testing.assert_allclose(np.cov(y.numpy().T), cov, atol=0.06)


def test_rsample_is_differentiable_where_torch_reparameterises():
    for name in ("Exponential", "Laplace", "LogNormal", "MultivariateNormal", "Gamma", "Beta", "Dirichlet", "Poisson",
                 "Binomial", "Geometric", "OneHotCategorical"):
        assert getattr(D, name).has_rsample is getattr(TD, name).has_rsample, name
    tt.manual_seed(2)
    rate = tt.tensor([0.5, 2.0], dtype=tt.float64, requires_grad=True)
    x = D.Exponential(rate).rsample((3,))
    x.sum().backward()
    np.testing.assert_allclose(rate.grad.numpy(), -(x.detach().numpy() / rate.detach().numpy()).sum(0), rtol=1e-12)  # x = e / rate
    loc, scale = tt.tensor([0.0, 1.0], dtype=tt.float64, requires_grad=True), tt.tensor([1.0, 2.0], dtype=tt.float64,
                                                                                           requires_grad=True)
    y = D.LogNormal(loc, scale).rsample()
    y.sum().backward()
    np.testing.assert_allclose(loc.grad.numpy(), y.detach().numpy(), rtol=1e-12)
    L = tt.tensor(_tril(2, ()), requires_grad=True)
    D.MultivariateNormal(tt.zeros(2, dtype=tt.float64), scale_tril=L).rsample((4,)).sum().backward()
    assert L.grad is not None and np.isfinite(L.grad.numpy()).all()
    assert D.Independent(D.Normal(loc, scale), 1).has_rsample


def test_expand_equals_torch():
    r = np.array([0.5, 1.5, 2.5, 3.0])
    a, b = TD.Exponential(torch.tensor(r)).expand((3, 4)), D.Exponential(tt.tensor(r)).expand((3, 4))
    assert b.batch_shape == tuple(a.batch_shape) == (3, 4)
    np.testing.assert_allclose(b.log_prob(tt.tensor(r)).numpy(), a.log_prob(torch.tensor(r)).numpy(), rtol=1e-12)
    c = _pos((4,))
    a, b = TD.Dirichlet(torch.tensor(c)).expand((2,)), D.Dirichlet(tt.tensor(c)).expand((2,))
    assert (b.batch_shape, b.event_shape) == (tuple(a.batch_shape), tuple(a.event_shape))
    i = D.Independent(D.Normal(tt.zeros(4, dtype=tt.float64), 1.0), 1).expand((3,))
    assert i.batch_shape == (3,) and i.event_shape == (4,)
    m = D.MultivariateNormal(tt.zeros(2, dtype=tt.float64), scale_tril=tt.eye(2, dtype=tt.float64)).expand((5,))
    assert m.batch_shape == (5,) and m.log_prob(tt.zeros(2, dtype=tt.float64)).shape == (5,)


def test_unsupported_requests_raise_clear_errors():
    with pytest.raises(ValueError, match="Exactly one of covariance_matrix"):
        D.MultivariateNormal(tt.zeros(2), covariance_matrix=tt.eye(2), scale_tril=tt.eye(2))
    with pytest.raises(ValueError, match="Either `probs` or `logits`"):
        D.Geometric()
    with pytest.raises(NotImplementedError, match="entropy"):
        D.Poisson(2.0).entropy()
    with pytest.raises(NotImplementedError, match="Inhomogeneous total count"):
        D.Binomial(tt.tensor([2.0, 3.0]), probs=tt.tensor([0.5, 0.5])).entropy()
    with pytest.raises(NotImplementedError, match="q.total_count > p.total_count"):
        D.kl_divergence(D.Binomial(2, probs=0.5), D.Binomial(3, probs=0.5))
    with pytest.raises(NotImplementedError, match="kl_divergence"):
        D.kl_divergence(D.Gamma(2.0, 1.0), D.Exponential(1.0))
    with pytest.raises(NotImplementedError, match="icdf is not available"):
        D.Poisson(1.0).icdf(0.5)
    np.testing.assert_allclose(D.Exponential(tt.tensor([2.0], dtype=tt.float64)).perplexity().numpy(),
                               TD.Exponential(torch.tensor([2.0], dtype=torch.float64)).perplexity().numpy(), rtol=1e-12)
    inf = D.kl_divergence(D.Binomial(3, probs=tt.tensor([0.5])), D.Binomial(2, probs=tt.tensor([0.5])))
    assert np.isinf(inf.numpy()).all()  # torch: inf where p.total_count > q.total_count


def test_edge_values_equal_torch():
    c = np.array([[0.5, 0.7, 0.9], [0.5, 2.0, 3.0]])  # row 0: every concentration < 1
    np.testing.assert_allclose(D.Dirichlet(tt.tensor(c)).mode.numpy(), TD.Dirichlet(torch.tensor(c)).mode.numpy())
    a, b = np.array([0.5, 2.0, 0.7]), np.array([0.8, 3.0, 4.0])
    np.testing.assert_allclose(D.Beta(tt.tensor(a), tt.tensor(b)).mode.numpy(),
                               TD.Beta(torch.tensor(a), torch.tensor(b)).mode.numpy())
    p, v = np.array([1.0, 1.0, 0.5]), np.array([0.0, 2.0, 0.0])
    np.testing.assert_allclose(D.Geometric(probs=tt.tensor(p)).log_prob(tt.tensor(v)).numpy(),
                               TD.Geometric(probs=torch.tensor(p)).log_prob(torch.tensor(v)).numpy())
    r, k = np.array([0.0, 1.5]), np.array([0.0, 0.0])
    np.testing.assert_allclose(D.Poisson(tt.tensor(r)).log_prob(tt.tensor(k)).numpy(),
                               TD.Poisson(torch.tensor(r), validate_args=False).log_prob(torch.tensor(k)).numpy())
    b = D.Binomial(tt.tensor([3, 4]), probs=0.25)  # an int64 count with a number: the default float dtype
    a = TD.Binomial(torch.tensor([3.0, 4.0]), probs=0.25)  # (torch refuses an int64 count here)
    assert b.total_count.dtype == np.float32 and b.probs.dtype == np.float32
    np.testing.assert_allclose(b.log_prob(tt.tensor([1.0, 2.0])).numpy(), a.log_prob(torch.tensor([1.0, 2.0])).numpy(),
                               rtol=1e-6)
    b64 = D.Binomial(tt.tensor([3.0, 4.0], dtype=tt.float64), probs=0.25)
    assert b64.probs.dtype == np.float64 == TD.Binomial(torch.tensor([3.0, 4.0], dtype=torch.float64),
                                                           probs=0.25).probs.numpy().dtype
    n, q = np.array([4.0, 4.0]), np.array([0.3, 0.6])
    np.testing.assert_allclose(D.Binomial(tt.tensor(n), probs=tt.tensor(q)).mode.numpy(),
                               TD.Binomial(torch.tensor(n), probs=torch.tensor(q)).mode.numpy())


def test_the_first_four_families_modes_variances_and_expand_equal_torch():
    p = np.array([0.2, 0.5, 0.7])
    for what in ("mode", "variance", "mean"):
        np.testing.assert_allclose(getattr(D.Bernoulli(probs=tt.tensor(p)), what).numpy(),
                                   getattr(TD.Bernoulli(probs=torch.tensor(p)), what).numpy(), rtol=1e-12)
    lg = rng.standard_normal((2, 5))
    for what in ("mode", "variance", "mean"):
        np.testing.assert_allclose(getattr(D.Categorical(logits=tt.tensor(lg)), what).numpy(),
                                   getattr(TD.Categorical(logits=torch.tensor(lg)), what).numpy())
    assert np.isnan(D.Uniform(tt.tensor([0.0, 1.0]), 2.0).mode.numpy()).all()
    for make in (lambda d, T: d.Normal(T(p), 1.0), lambda d, T: d.Uniform(T(p), 2.0),
                 lambda d, T: d.Bernoulli(logits=T(p)), lambda d, T: d.Categorical(probs=T(p)),
                 lambda d, T: d.Binomial(4, probs=T(p)), lambda d, T: d.OneHotCategorical(logits=T(p)),
                 lambda d, T: d.Geometric(probs=T(p)), lambda d, T: d.Beta(T(p), 1.5)):
        base = make(TD, torch.tensor)
        a = base.expand((2,) + tuple(base.batch_shape))
        b = make(D, tt.tensor).expand((2,) + tuple(base.batch_shape))
        assert (b.batch_shape, b.event_shape) == (tuple(a.batch_shape), tuple(a.event_shape))
        v = a.sample()
        np.testing.assert_allclose(b.log_prob(tt.tensor(v.numpy())).numpy(), a.log_prob(v).numpy(), rtol=1e-12)


# ---- Gamma, Beta, Dirichlet: torch's draws and implicit gradients -----------------------------

def _gamma_family_draws(lib, dt, seed):
    """rsample of the three families (one shared stream), their gradients, then sample()."""
    lib.manual_seed(seed)
    c = lib.tensor([[0.4, 2.0, 9.5, 0.01], [30.0, 0.05, 1.0, 250.0]], dtype=dt, requires_grad=True)
    r = lib.tensor([1.5, 0.7, 2.0, 1e-3], dtype=dt, requires_grad=True)
    fam = D if lib is tt else TD
    g = fam.Gamma(c, r).rsample((4,))
    d = fam.Dirichlet(c).rsample((3,))
    b = fam.Beta(c, r).rsample((2,))
    ws = [lib.tensor(np.cos(np.arange(x.numel()) * 0.7).reshape(tuple(x.shape)), dtype=dt) for x in (g, d, b)]
    loss = (g * ws[0]).sum() + (d * ws[1]).sum() + (b * ws[2]).sum()
    grads = lib.autograd.grad(loss, [c, r])
    draws = [fam.Gamma(c, r).sample((2,)), fam.Dirichlet(c).sample(), fam.Beta(r, 2.0).sample((3,))]
    return [x.detach().numpy() for x in (g, d, b, *grads, *draws)]


@pytest.mark.parametrize("seed", [0, 7, 2024])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gamma_beta_dirichlet_draws_and_gradients_are_torchs(dtype, seed):
    """The draws to the last bit; the gradients (torch's approximations of d sample / d
    concentration) to 1e-12 in float64, 1e-5 in float32 (torch's float32 arithmetic)."""
    ours = _gamma_family_draws(tt, getattr(tt, dtype), seed)
    theirs = _gamma_family_draws(torch, getattr(torch, dtype), seed)
    names = ["gamma", "dirichlet", "beta", "d/d concentration", "d/d rate", "Gamma.sample", "Dirichlet.sample",
             "Beta.sample"]
    for name, a, b in zip(names, theirs, ours):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        if name.startswith("d/d"):
            tol = 1e-12 if dtype == "float64" else 1e-5
            np.testing.assert_allclose(b, a, rtol=tol, atol=tol * np.abs(a).max(), err_msg=name)
        else:
            np.testing.assert_array_equal(b, a, err_msg=name)
    assert D.Gamma(2.0, 1.0).has_rsample and D.Beta(2.0, 1.0).has_rsample and D.Dirichlet(tt.ones(2)).has_rsample


def test_standard_gamma_gradient_is_torchs_in_every_branch():
    """Small samples (series), large concentrations near and away from the mean (saddle
    point), the rational fit elsewhere: torch._standard_gamma_grad to 1e-10."""
    g = np.random.default_rng(3)
    alpha = np.concatenate([g.uniform(0.01, 8, 2000), g.uniform(8, 300, 2000), np.full(50, 20.0)])
    x = np.concatenate([g.gamma(alpha[:4000]), np.linspace(18.0, 22.0, 50)])
    x = np.concatenate([x, [0.3, 0.79999]])
    alpha = np.concatenate([alpha, [2.0, 0.5]])
    expect = torch._standard_gamma_grad(torch.tensor(alpha), torch.tensor(x)).numpy()
    np.testing.assert_allclose(_standard_gamma_grad_np(alpha, x), expect, rtol=1e-10, atol=0)


def test_dirichlet_gradient_is_torchs_in_every_branch():
    """x near 0, near 1, both concentrations large, and the rational correction:
    torch._dirichlet_grad to 1e-10."""
    g = np.random.default_rng(4)
    alpha, beta = np.exp(g.uniform(-4, 5, 5000)), np.exp(g.uniform(-4, 5, 5000))
    x = np.clip(g.beta(alpha, beta), 1e-300, 1 - 1e-16)
    total = alpha + beta
    expect = torch._dirichlet_grad(torch.tensor(x), torch.tensor(alpha), torch.tensor(total)).numpy()
    np.testing.assert_allclose(_dirichlet_grad_np(x, alpha, total), expect, rtol=1e-10, atol=0)
