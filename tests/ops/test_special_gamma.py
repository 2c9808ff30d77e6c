"""The gamma family and the Bessel functions against torch (torch.lgamma/digamma/polygamma/
mvlgamma/i0/igamma/igammac, torch.special's gammaln, psi, multigammaln, gammainc/gammaincc,
zeta, i0e/i1/i1e, erfcx, bessel_j0/j1/y0/y1): values in float64 over wide ranges (tiny, huge,
negative arguments, the poles, inf and NaN) to 1e-10 relative, gradients and second derivatives
against torch.autograd, float32, tensors whose last tile is smaller, torch's argument errors.
Where torch's own values are off (its incomplete gamma's asymptotic band, its Bessel J/Y), the
values are checked against mpmath's (exact) as well, and against torch to torch's accuracy."""
import math

import mpmath
import numpy as np
import pytest
import torch

import tiletrain as tt

S, TS = tt.special, torch.special
RTOL = 1e-10
RNG = np.random.default_rng(17)
SHAPE, TILES = (37, 53), (16, 16)  # a smaller last tile along both axes


def _log_uniform(lo, hi, n):
    return 10.0 ** RNG.uniform(lo, hi, n)


def _grid(values):
    """values (at most SHAPE's size, padded by repeating them) as a (37, 53) array."""
    n = SHAPE[0] * SHAPE[1]
    return np.resize(np.asarray(values, dtype=np.float64), n).reshape(SHAPE)


def _non_integer(x, gap=1e-9):
    return x[np.abs(x - np.round(x)) > gap]


POSITIVE = np.concatenate([_log_uniform(-12, 4, 900), _log_uniform(4, 300, 150), RNG.uniform(0.5, 30, 300)])
NEGATIVE = -_non_integer(np.concatenate([_log_uniform(-12, 1.7, 300), RNG.uniform(0, 50, 300)]))
BESSEL = np.concatenate([_log_uniform(-12, np.log10(700), 700), RNG.uniform(15, 25, 150)])
BESSEL = np.concatenate([BESSEL, -BESSEL[::3]])

# name -> (tiletrain, torch, inputs)
UNARY = {
    "lgamma": (tt.lgamma, torch.lgamma, np.concatenate([POSITIVE, NEGATIVE])),
    "digamma": (tt.digamma, torch.digamma, np.concatenate([POSITIVE, NEGATIVE])),
    "polygamma1": (lambda x: tt.polygamma(1, x), lambda x: torch.polygamma(1, x), np.concatenate([POSITIVE, NEGATIVE])),
    "polygamma2": (lambda x: tt.polygamma(2, x), lambda x: torch.polygamma(2, x), np.concatenate([POSITIVE, NEGATIVE])),
    "polygamma5": (lambda x: tt.polygamma(5, x), lambda x: torch.polygamma(5, x), np.concatenate([POSITIVE, NEGATIVE])),
    "i0": (tt.i0, torch.i0, BESSEL),
    "i0e": (S.i0e, TS.i0e, np.concatenate([BESSEL, _log_uniform(2, 300, 200)])),
    "i1": (S.i1, TS.i1, BESSEL),
    "i1e": (S.i1e, TS.i1e, np.concatenate([BESSEL, -_log_uniform(2, 300, 200)])),
    "erfcx": (S.erfcx, TS.erfcx, np.concatenate([RNG.uniform(-26.5, 30, 800), _log_uniform(-12, 300, 300),
                                                 -_log_uniform(-12, 1.4, 200)])),
}
EDGES = [0.0, -0.0, 1.0, 2.0, -1.0, -2.0, -3.5, 10.0, 20.0, -20.0, 709.5, 710.0, np.inf, -np.inf, np.nan, 1e-300,
         1e300, 0.5, -0.5, 1e17]


def _both(a, tiles=TILES, grad=False):
    return tt.from_numpy(a, tiles).requires_grad_(grad), torch.tensor(a, requires_grad=grad)


@pytest.mark.parametrize("name", UNARY)
def test_values_over_wide_ranges_equal_torchs(name):
    fn, ref, x = UNARY[name]
    a = _grid(x)
    t, tx = _both(a)
    y = fn(t)
    assert y.shape == SHAPE and y.tiles == TILES and y.dtype == np.float64
    np.testing.assert_allclose(y.numpy(), ref(tx).numpy(), rtol=RTOL, atol=0)
    e = np.array(EDGES)  # the poles, 0 and -0, inf and NaN: torch's values exactly (NaN where torch's is)
    np.testing.assert_allclose(fn(tt.tensor(e)).numpy(), ref(torch.tensor(e)).numpy(), rtol=1e-13, atol=0)


GRAD = {  # name -> (tiletrain, torch, inputs whose gradients torch computes without cancellation)
    "lgamma": (tt.lgamma, torch.lgamma, np.concatenate([_log_uniform(-6, 6, 400), -_non_integer(RNG.uniform(0, 20, 99))])),
    "digamma": (tt.digamma, torch.digamma, np.concatenate([_log_uniform(-6, 6, 400), -_non_integer(RNG.uniform(0, 20, 99))])),
    "polygamma3": (lambda x: tt.polygamma(3, x), lambda x: torch.polygamma(3, x),
                   np.concatenate([_log_uniform(-3, 4, 400), -_non_integer(RNG.uniform(0, 20, 99))])),
    "i0": (tt.i0, torch.i0, RNG.uniform(-40, 40, 500)),
    "i0e": (S.i0e, TS.i0e, np.concatenate([RNG.uniform(-40, 40, 400), _log_uniform(-8, 3, 100)])),
    "i1": (S.i1, TS.i1, np.concatenate([RNG.uniform(-40, 40, 400), _log_uniform(-8, 3, 99), [0.0]])),
    "i1e": (S.i1e, TS.i1e, np.concatenate([RNG.uniform(-40, 40, 400), -_log_uniform(-8, 3, 99), [0.0]])),
    "erfcx": (S.erfcx, TS.erfcx, RNG.uniform(-20, 8, 500)),
    "mvlgamma": (lambda x: tt.mvlgamma(x, 4), lambda x: torch.mvlgamma(x, 4), RNG.uniform(1.6, 40, 500)),
}


@pytest.mark.parametrize("name", GRAD)
def test_gradients_equal_torchs(name):
    fn, ref, x = GRAD[name]
    a = _grid(x)
    t, tx = _both(a, grad=True)
    w = RNG.standard_normal(SHAPE)
    (fn(t) * tt.tensor(w)).sum().backward()
    (ref(tx) * torch.tensor(w)).sum().backward()
    assert t.grad.tiles == TILES
    np.testing.assert_allclose(t.grad.numpy(), tx.grad.numpy(), rtol=RTOL, atol=0)


SECOND = {  # name -> (tiletrain, torch, inputs)
    "lgamma": (tt.lgamma, torch.lgamma, [0.3, 1.7, 9.0, -2.5, 40.0]),
    "digamma": (tt.digamma, torch.digamma, [0.3, 1.7, 9.0, -2.5, 40.0]),
    "polygamma2": (lambda x: tt.polygamma(2, x), lambda x: torch.polygamma(2, x), [0.3, 1.7, 9.0, -2.5, 40.0]),
    "i0": (tt.i0, torch.i0, [0.3, -1.7, 9.0, 25.0, -30.0]),
    "i0e": (S.i0e, TS.i0e, [0.3, -1.7, 9.0, 25.0, -30.0]),
    "i1": (S.i1, TS.i1, [0.0, 0.3, -1.7, 9.0, 25.0]),
    "i1e": (S.i1e, TS.i1e, [0.0, 0.3, -1.7, 9.0, -30.0]),
    "erfcx": (S.erfcx, TS.erfcx, [-3.0, -0.5, 0.0, 1.5, 4.0]),
    "mvlgamma": (lambda x: S.multigammaln(x, 3), lambda x: TS.multigammaln(x, 3), [1.2, 3.3, 7.0, 20.0, 2.5]),
    "gammainc": (lambda x: S.gammainc(tt.tensor([0.5, 2.0, 7.0, 30.0, 1.0]), x),
                 lambda x: TS.gammainc(torch.tensor([0.5, 2.0, 7.0, 30.0, 1.0], dtype=torch.float64), x),
                 [0.2, 3.0, 5.0, 31.0, 0.9]),
    "gammaincc": (lambda x: S.gammaincc(tt.tensor([0.5, 2.0, 7.0, 30.0, 1.0]), x),
                  lambda x: TS.gammaincc(torch.tensor([0.5, 2.0, 7.0, 30.0, 1.0], dtype=torch.float64), x),
                  [0.2, 3.0, 5.0, 31.0, 0.9]),
    "zeta": (lambda q: S.zeta(tt.tensor([2.0, 3.5, 6.0, 2.0, 4.0]), q),
             lambda q: TS.zeta(torch.tensor([2.0, 3.5, 6.0, 2.0, 4.0], dtype=torch.float64), q), [0.3, 1.0, 4.5, 20.0, 2.0]),
}


@pytest.mark.parametrize("name", SECOND)
def test_second_derivatives_equal_torchs(name):
    fn, ref, x = SECOND[name]
    t, tx = _both(np.array(x), tiles=(3,), grad=True)
    (g,) = tt.autograd.grad(fn(t).sum(), t, create_graph=True)
    (tg,) = torch.autograd.grad(ref(tx).sum(), tx, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=RTOL, atol=0)
    (h,) = tt.autograd.grad((g * g).sum(), t)
    (th,) = torch.autograd.grad((tg * tg).sum(), tx)
    np.testing.assert_allclose(h.numpy(), th.numpy(), rtol=1e-9, atol=0)


FLOAT32 = {  # name -> (tiletrain, torch, inputs): torch computes these in float32 arithmetic (away from the
    # poles, where torch's float32 sin(pi x) leaves ~1e-3 in trigamma)
    "lgamma": (tt.lgamma, torch.lgamma, np.concatenate([RNG.uniform(0.01, 30, 200),
                                                        -_non_integer(RNG.uniform(0, 9, 80), 0.02)[:60]])),
    "digamma": (tt.digamma, torch.digamma, np.concatenate([RNG.uniform(0.01, 30, 200),
                                                           -_non_integer(RNG.uniform(0, 9, 80), 0.02)[:60]])),
    "polygamma2": (lambda x: tt.polygamma(2, x), lambda x: torch.polygamma(2, x), RNG.uniform(0.05, 30, 260)),
    "i0": (tt.i0, torch.i0, RNG.uniform(-30, 30, 260)),
    "i1e": (S.i1e, TS.i1e, RNG.uniform(-30, 30, 260)),
    "erfcx": (S.erfcx, TS.erfcx, RNG.uniform(-5, 30, 260)),
}


@pytest.mark.parametrize("name", FLOAT32)
def test_float32_values_and_gradients(name):
    fn, ref, x = FLOAT32[name]
    a = x.astype(np.float32).reshape(13, 20)
    t, tx = tt.from_numpy(a, (8, 6)).requires_grad_(), torch.tensor(a, requires_grad=True)
    y, ty = fn(t), ref(tx)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=2e-5, atol=1e-6)
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_polygamma_and_mvlgamma_arguments_and_forms():
    a = np.array([0.7, 2.5, 11.0])
    x, tx = tt.tensor(a), torch.tensor(a)
    with pytest.raises(TypeError, match="argument 'n' .* must be int, not float"):
        tt.polygamma(1.5, x)
    with pytest.raises(RuntimeError, match="does not support negative n"):
        tt.polygamma(-1, x)
    np.testing.assert_allclose(tt.polygamma(0, x).numpy(), torch.digamma(tx).numpy(), rtol=1e-15)
    np.testing.assert_allclose(x.polygamma(3).numpy(), tx.polygamma(3).numpy(), rtol=1e-14)
    np.testing.assert_allclose(S.polygamma(4, x).numpy(), TS.polygamma(4, tx).numpy(), rtol=1e-14)
    for method in ("lgamma", "digamma", "i0"):
        np.testing.assert_allclose(getattr(x, method)().numpy(), getattr(tx, method)().numpy(), rtol=1e-14)
        y = tt.tensor(a)
        assert getattr(y, method + "_")() is y
        np.testing.assert_allclose(y.numpy(), getattr(tx, method)().numpy(), rtol=1e-14)
    y = tt.tensor(a)
    y.polygamma_(2)
    np.testing.assert_allclose(y.numpy(), torch.polygamma(2, tx).numpy(), rtol=1e-14)
    np.testing.assert_allclose(S.psi(x).numpy(), TS.psi(tx).numpy(), rtol=1e-15)
    np.testing.assert_allclose(S.gammaln(x).numpy(), TS.gammaln(tx).numpy(), rtol=1e-15)
    # mvlgamma: torch checks p, and no longer the domain (x <= (p - 1)/2: the lgammas' values, inf at their poles)
    b = np.array([0.9, 1.0, 0.25, -3.3, 4.0])
    np.testing.assert_allclose(tt.mvlgamma(tt.tensor(b), 3).numpy(), torch.mvlgamma(torch.tensor(b), 3).numpy(),
                               rtol=1e-14)
    np.testing.assert_allclose(tt.tensor(b).mvlgamma(p=2).numpy(), torch.tensor(b).mvlgamma(p=2).numpy(), rtol=1e-14)
    with pytest.raises(RuntimeError, match="p has to be greater than or equal to 1"):
        tt.mvlgamma(tt.tensor(b), 0)
    with pytest.raises(TypeError, match="argument 'p' .* must be int"):
        tt.mvlgamma(tt.tensor(b), 2.0)


def test_integer_inputs_compute_in_the_default_dtype():
    ints = [1, 2, 5, 7]
    for fn, ref in ((tt.lgamma, torch.lgamma), (tt.digamma, torch.digamma), (tt.i0, torch.i0), (S.i1e, TS.i1e),
                    (S.erfcx, TS.erfcx), (S.bessel_j0, TS.bessel_j0), (lambda v: tt.polygamma(1, v), lambda v: torch.polygamma(1, v)),
                    (lambda v: tt.mvlgamma(v, 2), lambda v: torch.mvlgamma(v, 2)), (lambda v: S.zeta(v + 1, v), lambda v: TS.zeta(v + 1, v))):
        y, ty = fn(tt.tensor(ints)), ref(torch.tensor(ints))
        assert y.dtype == np.float32 and ty.dtype == torch.float32
        np.testing.assert_allclose(y.numpy(), ty.numpy(), rtol=2e-6, atol=1e-6)
    with pytest.raises(NotImplementedError, match="igamma_cpu\" not implemented for 'Long'"):
        tt.igamma(tt.tensor(ints), tt.tensor(ints))


def _gamma_band(a, x):
    """Where torch's incomplete gamma uses Temme's expansion (values within ~2e-9 there)."""
    r = np.abs(x - a) / a
    return ((a > 20) & (a < 200) & (r < 0.3)) | ((a > 200) & (r < 4.5 / np.sqrt(a)))


def test_incomplete_gamma_over_wide_ranges_equals_torchs():
    n = SHAPE[0] * SHAPE[1]
    a = np.concatenate([_log_uniform(-3, 4, n // 2), _log_uniform(-3, 1, n - n // 2)])
    x = np.concatenate([a[: n // 2] * _log_uniform(-3, 3, n // 2), _log_uniform(-8, 1.5, n - n // 2)])
    a[_gamma_band(a, x)] *= 3.0  # out of torch's asymptotic band (checked below)
    a, x = a.reshape(SHAPE), x.reshape(SHAPE)
    (ta, t_a), (tx, t_x) = _both(a), _both(x, tiles=(8, 24))
    for fn, ref in ((tt.igamma, torch.igamma), (S.gammaincc, TS.gammaincc)):
        y, ty = fn(ta, tx), ref(t_a, t_x).numpy()
        assert y.tiles == TILES
        tiny = np.abs(ty) < 1e-280  # (subnormal and underflowing results: absolute)
        np.testing.assert_allclose(y.numpy()[~tiny], ty[~tiny], rtol=RTOL, atol=0)
        np.testing.assert_allclose(y.numpy()[tiny], ty[tiny], rtol=0, atol=1e-290)
    ea = np.array([0.0, 0.0, 1.0, 1.0, -1.0, 1.0, np.inf, np.inf, 1.0, np.nan, np.nan, 0.0, np.inf, 2.0])
    ex = np.array([0.0, 1.0, 0.0, -1.0, 1.0, np.inf, 1.0, np.inf, np.nan, 0.0, np.inf, np.nan, np.nan, 3.0])
    for fn, ref in ((S.gammainc, TS.gammainc), (tt.igammac, torch.igammac)):
        np.testing.assert_allclose(fn(tt.tensor(ea), tt.tensor(ex)).numpy(), ref(torch.tensor(ea), torch.tensor(ex)).numpy(),
                                   rtol=1e-14, atol=0)


def test_incomplete_gamma_in_torchs_asymptotic_band_is_exact():
    a = np.concatenate([RNG.uniform(20.5, 199, 12), _log_uniform(2.4, 5, 8)])
    x = a * (1 + np.concatenate([RNG.uniform(-0.29, 0.29, 12), RNG.uniform(-4.4, 4.4, 8) / np.sqrt(a[12:])]))
    assert _gamma_band(a, x).all()
    ta, tx = tt.tensor(a), tt.tensor(x)
    mpmath.mp.dps = 30
    for fn, ref, upper in ((S.gammainc, TS.gammainc, False), (S.gammaincc, TS.gammaincc, True)):
        y = fn(ta, tx).numpy()
        exact = np.array([float(mpmath.gammainc(u, v, mpmath.inf, regularized=True) if upper
                                else mpmath.gammainc(u, 0, v, regularized=True)) for u, v in zip(a, x)])
        np.testing.assert_allclose(y, exact, rtol=2e-13, atol=0)
        np.testing.assert_allclose(y, ref(torch.tensor(a), torch.tensor(x)).numpy(), rtol=3e-9, atol=0)


def test_incomplete_gamma_of_large_shape_follows_the_uniform_expansion():
    """a > 1e6 near x = a: Temme's expansion with c0 and c1; here against the leading terms
    evaluated by mpmath at the same (a, x) (its next term is ~1e-15 of these values)."""
    a = np.array([2e6, 5e7, 1e9, 3e12, 1e20])
    x = a * (1 + np.array([-3.0, 1.0, -0.5, 4.0, 2.0]) / np.sqrt(a))
    mpmath.mp.dps = 40
    for upper in (False, True):
        y = (S.gammaincc if upper else S.gammainc)(tt.tensor(a), tt.tensor(x)).numpy()
        for u, v, got in zip(a, x, y):
            u, v = mpmath.mpf(u), mpmath.mpf(v)
            lam = v / u
            eta = mpmath.sign(lam - 1) * mpmath.sqrt(2 * (lam - 1 - mpmath.log(lam)))
            c0 = 1 / (lam - 1) - 1 / eta
            c1 = 1 / eta ** 3 - 1 / (lam - 1) ** 3 - 1 / (lam - 1) ** 2 - 1 / (12 * (lam - 1))
            r = mpmath.exp(-u * eta ** 2 / 2) / mpmath.sqrt(2 * mpmath.pi * u) * (c0 + c1 / u)
            q = mpmath.erfc(eta * mpmath.sqrt(u / 2)) / 2 + r
            assert got == pytest.approx(float(q if upper else 1 - q), rel=1e-13)


def test_incomplete_gamma_gradients_and_broadcasting():
    a = RNG.uniform(0.2, 12, (5, 1))
    x = RNG.uniform(0.05, 20, (1, 7))
    ta, t_a = _both(a, tiles=(2, 1))
    tx, t_x = _both(x, tiles=(1, 3), grad=True)
    for fn, ref in ((tt.igamma, torch.igamma), (tt.igammac, torch.igammac)):
        y, ty = fn(ta, tx), ref(t_a, t_x)
        assert y.shape == (5, 7)
        np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=RTOL)
        w = RNG.standard_normal((5, 7))
        (y * tt.tensor(w)).sum().backward()
        (ty * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(tx.grad.numpy(), t_x.grad.numpy(), rtol=RTOL)
        tx.grad, t_x.grad = None, None
    # float32 with float64 and int64 operands: torch's promotion
    f = tt.igamma(tt.tensor(a.astype(np.float32)), tt.tensor(x))
    assert f.dtype == np.float64
    np.testing.assert_allclose(tt.igamma(tt.tensor(a.astype(np.float32)), tt.tensor([1, 2, 3])).numpy(),
                               torch.igamma(torch.tensor(a.astype(np.float32)), torch.tensor([1, 2, 3])).numpy(), rtol=1e-5)
    # no gradient in the shape argument, as torch: an error at backward naming it
    la = tt.tensor(a, requires_grad=True)
    for fn, op in ((tt.igamma, "igamma"), (tt.igammac, "igammac")):
        y = fn(la, tt.tensor(x))
        with pytest.raises(NotImplementedError, match=f"the derivative for '{op}: input' is not implemented"):
            y.sum().backward()
    with pytest.raises(TypeError, match="argument 'other' .* must be Tensor"):
        tt.igamma(tt.tensor(a), 2.0)


def test_zeta_values_numbers_gradients():
    n = SHAPE[0] * SHAPE[1]
    s = np.concatenate([1 + _log_uniform(-6, 2, n // 2), np.round(RNG.uniform(2, 12, n - n // 2))])
    q = np.concatenate([_log_uniform(-6, 4, n // 2), -RNG.uniform(0, 30, n - n // 2)])
    ts, tq = tt.from_numpy(s.reshape(SHAPE), TILES), tt.from_numpy(q.reshape(SHAPE), TILES)
    y, ty = S.zeta(ts, tq).numpy(), TS.zeta(torch.tensor(s.reshape(SHAPE)), torch.tensor(q.reshape(SHAPE))).numpy()
    tiny = np.abs(ty) < 1e-280
    np.testing.assert_allclose(y[~tiny], ty[~tiny], rtol=RTOL, atol=0)
    es = np.array([1.0, 0.5, 2.0, 2.0, 2.0, 3.0, 2.5, np.inf, 2.0, np.nan, 3.0, 4.0])
    eq = np.array([1.0, 1.0, 0.0, -1.0, -1.5, -1.5, -1.5, 2.0, np.inf, 1.0, -1e5 - 0.5, -2e6 - 0.25])
    np.testing.assert_allclose(S.zeta(tt.tensor(es), tt.tensor(eq)).numpy(), TS.zeta(torch.tensor(es), torch.tensor(eq)).numpy(),
                               rtol=1e-13, atol=0)
    b = np.array([0.5, 1.0, 3.0])
    np.testing.assert_allclose(S.zeta(2.0, tt.tensor(b)).numpy(), TS.zeta(2.0, torch.tensor(b)).numpy(), rtol=1e-14)
    np.testing.assert_allclose(S.zeta(tt.tensor(b + 2), 3.0).numpy(), TS.zeta(torch.tensor(b + 2), 3.0).numpy(), rtol=1e-14)
    with pytest.raises(TypeError):
        S.zeta(2.0, 3.0)
    tq, t_q = _both(b, tiles=(2,), grad=True)
    S.zeta(tt.tensor(b + 2), tq).sum().backward()
    TS.zeta(torch.tensor(b + 2), t_q).sum().backward()
    np.testing.assert_allclose(tq.grad.numpy(), t_q.grad.numpy(), rtol=RTOL)
    with pytest.raises(NotImplementedError, match="the derivative for 'zeta' is not implemented"):
        S.zeta(tt.tensor(b + 2, requires_grad=True), tt.tensor(b)).sum().backward()


def test_bessel_j_y_are_exact_and_have_no_gradient():
    """bessel_j0/j1/y0/y1: the C library's values; torch's own are off by up to ~1e-6 absolute
    (between 2 and 25): against torch to that, against mpmath to 1e-13."""
    x = np.concatenate([RNG.uniform(0.01, 60, 300), [0.0, -3.0, np.inf, np.nan]])
    mpmath.mp.dps = 30
    for name, mfn in (("bessel_j0", lambda v: mpmath.besselj(0, v)), ("bessel_j1", lambda v: mpmath.besselj(1, v)),
                      ("bessel_y0", lambda v: mpmath.bessely(0, v)), ("bessel_y1", lambda v: mpmath.bessely(1, v))):
        t = tt.tensor(x, requires_grad=True)
        y = getattr(S, name)(t)
        assert not y.requires_grad and getattr(TS, name)(torch.tensor(x, requires_grad=True)).grad_fn is None
        np.testing.assert_allclose(y.numpy(), getattr(TS, name)(torch.tensor(x)).numpy(), rtol=0, atol=2e-6)
        exact = np.array([float(mfn(v)) for v in x[:40]])
        np.testing.assert_allclose(y.numpy()[:40], exact, rtol=1e-13, atol=1e-15)


def test_distributions_use_the_same_functions():
    c = np.array([0.4, 1.5, 7.0])
    g = tt.distributions.Gamma(tt.tensor(c, requires_grad=True), 2.0)
    tg = torch.distributions.Gamma(torch.tensor(c, requires_grad=True), 2.0)
    np.testing.assert_allclose(g.entropy().detach().numpy(), tg.entropy().detach().numpy(), rtol=1e-13)
    g.entropy().sum().backward()
    tg.entropy().sum().backward()  # trigamma's values: torch's (its series), equal
    np.testing.assert_allclose(g.concentration.grad.numpy(), tg.concentration.grad.numpy(), rtol=1e-13)


def test_special_namespace_names():
    for name in ("gammaln", "digamma", "psi", "polygamma", "multigammaln", "gammainc", "gammaincc", "zeta", "i0", "i0e",
                 "i1", "i1e", "erfcx", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1"):
        assert name in S.__all__ and callable(getattr(S, name)), name
    assert math.isinf(float(tt.lgamma(tt.tensor([0.0])).numpy()[0]))
