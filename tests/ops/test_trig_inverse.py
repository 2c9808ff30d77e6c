"""asin, acos, atan, atan2, erfinv and erfc (their own kernels) against PyTorch: values and
gradients in float64 (1e-10) on tile grids with a smaller last tile, float32, atan2's
broadcasting, quadrants and signed zeros, the edges (+-1, outside the domain), the aliases
and in-place forms, and second derivatives against torch.autograd.grad(create_graph=True)."""
import math

import numpy as np
import pytest
import torch

import tiletrain as tt
from conftest import GRIDS_2D, tol

RTOL = 1e-10


def _data(rng, shape, domain):
    a = rng.standard_normal(shape) * 2
    return np.tanh(a) * 0.99 if domain == "unit" else a


# name -> (tiletrain fn, torch fn, input domain)
UNARY = {
    "asin": (tt.asin, torch.asin, "unit"),
    "acos": (tt.acos, torch.acos, "unit"),
    "atan": (tt.atan, torch.atan, "any"),
    "erfinv": (tt.erfinv, torch.erfinv, "unit"),
    "erfc": (tt.erfc, torch.erfc, "any"),
    "arcsin": (tt.arcsin, torch.arcsin, "unit"),
    "arccos": (tt.arccos, torch.arccos, "unit"),
    "arctan": (tt.arctan, torch.arctan, "any"),
    "method asin": (lambda x: x.asin(), lambda x: x.asin(), "unit"),
    "method erfinv": (lambda x: x.erfinv(), lambda x: x.erfinv(), "unit"),
    "method arctan": (lambda x: x.arctan(), lambda x: x.arctan(), "any"),
}


def _grads_match(y, ty, x, tx, rng, tiles):
    g = rng.standard_normal(y.shape)
    y.backward(tt.from_numpy(g, tiles))
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=RTOL, atol=0)


@pytest.mark.parametrize("shape,tiles", GRIDS_2D)
@pytest.mark.parametrize("name", UNARY)
def test_unary_against_torch(rng, name, shape, tiles):
    fn, ref, domain = UNARY[name]
    a = _data(rng, shape, domain)
    x = tt.from_numpy(a, tiles).requires_grad_()
    y = fn(x)
    tx = torch.tensor(a, requires_grad=True)
    ty = ref(tx)
    assert y.tiles == x.tiles and y.dtype == np.float64
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=RTOL, atol=0)
    _grads_match(y, ty, x, tx, rng, tiles)


@pytest.mark.parametrize("name", ["asin", "acos", "atan", "erfinv", "erfc"])
def test_unary_float32(rng, name):
    fn, ref, domain = UNARY[name]
    a = _data(rng, (9, 7), domain).astype(np.float32)
    x = tt.from_numpy(a, (4, 3)).requires_grad_()
    y = fn(x)
    assert y.dtype == np.float32
    tx = torch.tensor(a, requires_grad=True)
    ty = ref(tx)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=2e-6, atol=1e-6)
    g = rng.standard_normal((9, 7)).astype(np.float32)
    y.backward(tt.from_numpy(g, (4, 3)))
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), **tol(np.float32))


def test_integer_input_computes_in_the_default_dtype():
    for name in ("asin", "acos", "atan", "erfinv", "erfc"):
        y = getattr(tt, name)(tt.from_numpy(np.array([0, 1, -1, 2])))
        ty = getattr(torch, name)(torch.tensor([0, 1, -1, 2]))
        assert y.dtype == np.float32
        np.testing.assert_allclose(y.numpy(), ty.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["asin", "acos", "erfinv"])
def test_edges_of_the_domain(name):
    """+-1: torch's values and its infinite gradients; beyond: NaN; NaN stays NaN."""
    a = np.array([1.0, -1.0, 1.5, -2.0, np.nan, 0.0, -0.0, 1 - 2 ** -53])
    fn, ref, _ = UNARY[name]
    x = tt.from_numpy(a, (3,)).requires_grad_()
    tx = torch.tensor(a, requires_grad=True)
    y, ty = fn(x), ref(tx)
    np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())
    num = ~np.isnan(y.detach().numpy())  # (a NaN's sign bit means nothing)
    np.testing.assert_array_equal(np.signbit(y.detach().numpy()[num]), np.signbit(ty.detach().numpy()[num]))
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=RTOL, atol=0)
    if name == "erfinv":
        assert list(y.detach().numpy()[:2]) == [math.inf, -math.inf]
        assert np.isnan(y.detach().numpy()[2:5]).all()


def test_erfinv_near_one_and_zero(rng):
    """The tails (x within a few ulp of +-1) and tiny x, where a formula through erf loses
    every digit: relative 1e-13 against torch, and erf(erfinv(x)) == x."""
    a = np.concatenate([1 - np.ldexp(1.0, -np.arange(1, 54)), -(1 - np.ldexp(1.0, -np.arange(1, 54, 7))),
                        [1e-300, -1e-20, 1e-8, 0.4999999, 0.5, 0.9999], rng.uniform(-1, 1, 200)])
    y = tt.erfinv(tt.from_numpy(a, (64,))).numpy()
    np.testing.assert_allclose(y, torch.erfinv(torch.tensor(a)).numpy(), rtol=1e-13, atol=0)
    inner = np.abs(a) < 0.5
    np.testing.assert_allclose(np.vectorize(math.erf)(y[inner]), a[inner], rtol=1e-15, atol=0)


def test_erfc_tail_against_torch():
    """erfc on [-5, 30] to 1e-12 relative (1 - erf(x) would be 0 from x ~ 6 on); beyond
    the normal float64 range, to the smallest normal."""
    a = np.linspace(-5.0, 30.0, 701)
    x = tt.from_numpy(a, (128,)).requires_grad_()
    y = tt.erfc(x)
    tx = torch.tensor(a, requires_grad=True)
    ty = torch.erfc(tx)
    got, want = y.detach().numpy(), ty.detach().numpy()
    normal = want >= np.finfo(np.float64).tiny
    assert normal.sum() > 600 and want[a == 10.0][0] == pytest.approx(2.088487583762545e-45, rel=1e-12)
    np.testing.assert_allclose(got[normal], want[normal], rtol=1e-12, atol=0)
    np.testing.assert_allclose(got[~normal], want[~normal], rtol=0, atol=np.finfo(np.float64).tiny)
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=np.finfo(np.float64).tiny)


# (shape a, tiles a, shape b, tiles b): same layout, other tiles, broadcasting both ways, 0-d
LAYOUTS = [
    ((11, 7), (4, 3), (11, 7), (4, 3)),
    ((11, 7), (4, 3), (11, 7), (3, 5)),
    ((11, 7), (4, 3), (7,), (2,)),
    ((11, 7), (4, 3), (11, 1), (5, 1)),
    ((5, 1, 6), (2, 1, 4), (3, 1), (2, 1)),
    ((), (), (6, 4), (4, 3)),
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda l: f"{l[0]}x{l[2]}")
def test_atan2_broadcast_against_torch(rng, layout):
    sa, ta, sb, tb = layout
    a, b = np.asarray(rng.standard_normal(sa)), np.asarray(rng.standard_normal(sb))
    A = tt.from_numpy(a, ta or None).requires_grad_()
    B = tt.from_numpy(b, tb or None).requires_grad_()
    y = tt.atan2(A, B)
    TA, TB = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ty = torch.atan2(TA, TB)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=RTOL, atol=0)
    g = rng.standard_normal(y.shape)
    y.backward(tt.from_numpy(g, y.tiles))
    ty.backward(torch.tensor(g))
    assert A.grad.shape == A.shape and A.grad.tiles == A.tiles and B.grad.tiles == B.tiles
    np.testing.assert_allclose(A.grad.numpy(), TA.grad.numpy(), rtol=RTOL, atol=1e-15)
    np.testing.assert_allclose(B.grad.numpy(), TB.grad.numpy(), rtol=RTOL, atol=1e-15)


def test_atan2_quadrants_signed_zeros_and_gradient_at_the_origin():
    """Every quadrant, the axes with both signs of zero, infinities, NaN; the gradient where
    a^2 + b^2 is 0 (the origin, and underflow) is 0 with torch's signs."""
    z, inf = 0.0, math.inf
    pairs = [(1, 2), (1, -2), (-1, -2), (-1, 2), (z, 1), (-z, 1), (z, -1), (-z, -1), (1, z), (-1, -z),
             (z, z), (-z, z), (z, -z), (-z, -z), (inf, 1), (1, -inf), (inf, -inf), (np.nan, 1), (1e-200, 1e-200),
             (3.0, 0.0)]
    a, b = (np.array(v, dtype=np.float64) for v in zip(*pairs))
    A, B = tt.from_numpy(a, (7,)).requires_grad_(), tt.from_numpy(b, (7,)).requires_grad_()
    TA, TB = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    y, ty = tt.atan2(A, B), torch.atan2(TA, TB)
    np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())
    num = ~np.isnan(y.detach().numpy())  # (a NaN's sign bit means nothing)
    np.testing.assert_array_equal(np.signbit(y.detach().numpy()[num]), np.signbit(ty.detach().numpy()[num]))
    y.sum().backward()
    ty.sum().backward()
    for got, want in ((A.grad.numpy(), TA.grad.numpy()), (B.grad.numpy(), TB.grad.numpy())):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=0)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_atan2_dtypes_aliases_and_bad_input():
    a32 = np.array([1.0, -2.0, 0.5], dtype=np.float32)
    b64 = np.array([0.5, 3.0, -1.0])
    y = tt.arctan2(tt.from_numpy(a32), tt.from_numpy(b64))
    assert y.dtype == np.float64  # promotion, as torch
    np.testing.assert_allclose(y.numpy(), torch.arctan2(torch.tensor(a32), torch.tensor(b64)).numpy(), rtol=RTOL)
    yi = tt.from_numpy(np.array([1, -2, 0])).atan2(tt.from_numpy(np.array([0, 3, -1])))
    assert yi.dtype == np.float32
    np.testing.assert_allclose(yi.numpy(), torch.atan2(torch.tensor([1, -2, 0]), torch.tensor([0, 3, -1])).numpy())
    np.testing.assert_allclose(tt.from_numpy(a32).arctan2(tt.from_numpy(a32[::-1].copy())).numpy(),
                               np.arctan2(a32, a32[::-1]), rtol=1e-6)
    with pytest.raises(TypeError, match="argument 'other'"):
        tt.atan2(tt.from_numpy(a32), 2.0)
    with pytest.raises(TypeError, match="argument 'input'"):
        tt.atan2(2.0, tt.from_numpy(a32))
    with pytest.raises(ValueError, match="broadcast"):
        tt.atan2(tt.from_numpy(a32), tt.from_numpy(np.ones(4, np.float32)))


INPLACE = ["asin", "acos", "atan", "erfinv", "erfc", "arcsin", "arccos", "arctan"]


@pytest.mark.parametrize("name", INPLACE + ["atan2", "arctan2"])
def test_inplace_forms(rng, name):
    """x.name_() equals the function, and in the graph the gradient is torch's."""
    a = np.tanh(rng.standard_normal((11, 7))) * 0.9
    b = rng.standard_normal((7,))
    args_tt = (tt.from_numpy(b, (3,)),) if "2" in name else ()
    args_t = (torch.tensor(b),) if "2" in name else ()
    x = tt.from_numpy(a, (4, 3))
    assert getattr(x, name + "_")(*args_tt) is x
    np.testing.assert_allclose(x.numpy(), getattr(torch, name)(torch.tensor(a), *args_t).numpy(), rtol=RTOL)
    leaf = tt.from_numpy(a, (4, 3)).requires_grad_()
    tleaf = torch.tensor(a, requires_grad=True)
    h, th = leaf * 0.5, tleaf * 0.5
    getattr(h, name + "_")(*args_tt)
    getattr(th, name + "_")(*args_t)
    np.testing.assert_allclose(h.detach().numpy(), th.detach().numpy(), rtol=RTOL)
    g = rng.standard_normal((11, 7))
    h.backward(tt.from_numpy(g, (4, 3)))
    th.backward(torch.tensor(g))
    np.testing.assert_allclose(leaf.grad.numpy(), tleaf.grad.numpy(), rtol=RTOL)


# second derivatives: f(op(x)) with a cube after the op, so the gradient reaching its rule
# depends on x; grad_outputs u, then the gradient of <gradient, v>
SECOND = {
    "atan": lambda m, x, w: m.atan(x),
    "asin": lambda m, x, w: m.asin(x),
    "acos": lambda m, x, w: m.acos(x),
    "erfinv": lambda m, x, w: m.erfinv(x),
    "erfc": lambda m, x, w: m.erfc(x),
    "atan2": lambda m, x, w: m.atan2(x, w),
    "atan2 broadcast": lambda m, x, w: m.atan2(w[0], x),
}


@pytest.mark.parametrize("name", SECOND)
def test_second_derivative_against_torch(rng, name):
    fn = SECOND[name]
    a, c = np.tanh(rng.standard_normal((11, 7))) * 0.9, rng.standard_normal((11, 7))
    u, v = rng.standard_normal((11, 7)), rng.standard_normal((11, 7))
    x, w = tt.from_numpy(a, (4, 3)).requires_grad_(), tt.from_numpy(c, (4, 3)).requires_grad_()
    tx, tw = torch.tensor(a, requires_grad=True), torch.tensor(c, requires_grad=True)
    y, ty = fn(tt, x, w), fn(torch, tx, tw)
    y, ty = y * y * y, ty * ty * ty
    gs = tt.autograd.grad(y, [x, w], grad_outputs=tt.from_numpy(u, (4, 3)), create_graph=True, allow_unused=True)
    tgs = torch.autograd.grad(ty, [tx, tw], grad_outputs=torch.tensor(u), create_graph=True, allow_unused=True)
    for g, tg in zip(gs, tgs):
        assert (g is None) == (tg is None)
        if g is not None:
            np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=RTOL, atol=1e-12)
    s = sum((g * tt.from_numpy(v, g.tiles)).sum() for g in gs if g is not None)
    ts = sum((tg * torch.tensor(v)).sum() for tg in tgs if tg is not None)
    hs = tt.autograd.grad(s, [x, w], allow_unused=True)
    ths = torch.autograd.grad(ts, [tx, tw], allow_unused=True)
    for h, th in zip(hs, ths):
        if th is None:
            assert h is None or np.all(h.numpy() == 0)
        else:
            np.testing.assert_allclose(h.numpy(), th.numpy(), rtol=1e-9, atol=1e-12)
