"""More of torch's top-level functions (tiletrain/ops/mathfns.py) and their Tensor methods,
each against torch itself in float64: values, dtypes and every gradient."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tiletrain as tt


def _same(fn_t, fn_tt, *arrays, rtol=1e-12, atol=1e-14, grad=True):
    """fn_t on torch tensors and fn_tt on tiletrain tensors agree: values, dtypes, and the
    gradient of every float operand for one random output weighting."""
    A = [torch.tensor(a, requires_grad=grad and a.dtype == np.float64) for a in arrays]
    B = [tt.tensor(a, requires_grad=grad and a.dtype == np.float64) for a in arrays]
    ra, rb = fn_t(*A), fn_tt(*B)
    ra, rb = (list(ra), list(rb)) if isinstance(ra, tuple) else ([ra], [rb])
    assert len(ra) == len(rb)
    for u, v in zip(ra, rb):
        assert tuple(v.shape) == tuple(u.shape)
        np.testing.assert_allclose(v.detach().numpy(), u.detach().numpy(), rtol=rtol, atol=atol)
        assert v.detach().numpy().dtype == u.detach().numpy().dtype
    if not (grad and ra[0].requires_grad):
        return
    w = np.random.default_rng(9).standard_normal(tuple(ra[0].shape))
    ra[0].backward(torch.tensor(w))
    rb[0].backward(tt.tensor(w))
    for a, b in zip(A, B):
        if a.grad is not None and b.grad is None:  # torch's zero gradient (copysign's other)
            assert not (a.grad != 0).any()
        elif a.grad is not None:
            np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=rtol, atol=atol)

R = np.random.default_rng(5)
X = R.standard_normal((4, 5)) * 2
Y = R.standard_normal((4, 5)) * 2
P = R.uniform(0.1, 0.9, (4, 5))        # in (0, 1): logit, atanh
G = R.uniform(1.1, 4.0, (4, 5))        # > 1: acosh
S = R.uniform(1e-6, 1e-3, (4, 5))      # small: sinh, asinh without cancellation

UNARY = [("sinh", X), ("sinh", S), ("cosh", X), ("asinh", X), ("asinh", S), ("acosh", G), ("atanh", P),
         ("exp2", X), ("erfc", P), ("deg2rad", X), ("rad2deg", X), ("frac", X * 3), ("logit", P), ("sgn", X)]


@pytest.mark.parametrize("name,a", UNARY, ids=[f"{n}{i}" for i, (n, _) in enumerate(UNARY)])
def test_unary_functions_and_methods_equal_torch(name, a):
    grad = name != "sgn"  # torch's sgn gradient is a ZeroTensor
    _same(getattr(torch, name), getattr(tt, name), a, grad=grad)
    _same(lambda t: getattr(t, name)(), lambda t: getattr(t, name)(), a, grad=grad)


BINARY = [("hypot", X, Y), ("logaddexp", X, Y), ("fmax", X, Y), ("fmin", X, Y), ("xlogy", X, G),
          ("copysign", X, Y), ("float_power", G, Y)]


@pytest.mark.parametrize("name,a,b", BINARY, ids=[n for n, _, _ in BINARY])
def test_binary_functions_and_methods_equal_torch(name, a, b):
    _same(getattr(torch, name), getattr(tt, name), a, b)
    _same(lambda s, t: getattr(s, name)(t), lambda s, t: getattr(s, name)(t), a, b)


def test_three_operand_functions_equal_torch():
    _same(lambda a, b, w: torch.lerp(a, b, w), lambda a, b, w: tt.lerp(a, b, w), X, Y, P)
    _same(lambda a, b: torch.lerp(a, b, 0.3), lambda a, b: tt.lerp(a, b, 0.3), X, Y)
    _same(lambda a, b, c: torch.addcmul(a, b, c, value=0.5), lambda a, b, c: tt.addcmul(a, b, c, value=0.5), X, Y, G)
    _same(lambda a, b, c: a.addcdiv(b, c, value=-2), lambda a, b, c: a.addcdiv(b, c, value=-2), X, Y, G)
    _same(lambda a: torch.clamp_min(a, 0.2), lambda a: tt.clamp_min(a, 0.2), X)
    _same(lambda a: torch.clamp_max(a, 0.2), lambda a: tt.clamp_max(a, 0.2), X)
    _same(lambda a: torch.logit(a, eps=0.2), lambda a: tt.logit(a, eps=0.2), P)


def test_nan_and_sign_edges_equal_torch():
    a = np.array([np.nan, 1.0, -0.0, 0.0, 2.0, np.nan])
    b = np.array([1.0, np.nan, 3.0, -1.0, 0.0, np.nan])
    for name in ("fmax", "fmin", "copysign", "xlogy"):
        _same(getattr(torch, name), getattr(tt, name), a, b, grad=False)
    _same(torch.signbit, tt.signbit, a)
    _same(torch.heaviside, tt.heaviside, np.array([-1.0, 0.0, 2.0]), np.array([0.5, 0.5, 0.5]), grad=False)
    _same(torch.nansum, tt.nansum, a, grad=False)
    _same(lambda t: torch.nanmean(t), lambda t: tt.nanmean(t), a, grad=False)
    with pytest.raises(RuntimeError):
        tt.nanmean(tt.tensor([1, 2]))


def test_nan_reductions_with_dims_equal_torch():
    a = X.copy()
    a[1, 2] = a[3, 0] = np.nan
    _same(lambda t: torch.nansum(t, 1), lambda t: tt.nansum(t, 1), a)
    _same(lambda t: t.nanmean(0, keepdim=True), lambda t: t.nanmean(0, keepdim=True), a)
    _same(lambda t: torch.aminmax(t), lambda t: tt.aminmax(t), X)
    _same(lambda t: tuple(torch.aminmax(t, dim=1, keepdim=True)),
          lambda t: tuple(tt.aminmax(t, dim=1, keepdim=True)), X)
    r = tt.aminmax(tt.tensor(X), dim=0)
    np.testing.assert_array_equal(r.min.numpy(), X.min(0))
    _same(torch.msort, tt.msort, X, grad=False)


@pytest.mark.parametrize("kw", [{}, {"n": 2}, {"dim": 0}, {"n": 3, "dim": 0}, {"prepend": "p", "append": "a"}])
def test_diff_equals_torch(kw):
    pre = R.standard_normal((4, 2))
    def call(lib, t, p):
        k = dict(kw)
        if "prepend" in k:
            k["prepend"], k["append"] = p, p
        return lib.diff(t, **k)
    _same(lambda t, p: call(torch, t, p), lambda t, p: call(tt, t, p), X, pre)


SHAPES = [("swapaxes", lambda m, t: m.swapaxes(t, 0, 1)),
          ("concat", lambda m, t: m.concat([t, t * 2], dim=1)),
          ("concatenate", lambda m, t: m.concatenate([t, t], axis=0)),
          ("tile", lambda m, t: m.tile(t, (2,))),
          ("tile2", lambda m, t: m.tile(t, (2, 1, 3))),
          ("unflatten", lambda m, t: m.unflatten(t.reshape(20), 0, (4, -1))),
          ("fliplr", lambda m, t: m.fliplr(t)),
          ("flipud", lambda m, t: m.flipud(t)),
          ("rot90", lambda m, t: m.rot90(t)),
          ("rot90_2", lambda m, t: m.rot90(t, 2)),
          ("rot90_3", lambda m, t: m.rot90(t, -1, (1, 0))),
          ("diagonal", lambda m, t: m.diagonal(t)),
          ("diagonal_off", lambda m, t: m.diagonal(t, 2)),
          ("diagonal_neg", lambda m, t: m.diagonal(t.reshape(2, 2, 5), -1, 2, 1)),
          ("diagflat", lambda m, t: m.diagflat(t[:2], 1)),
          ("dstack", lambda m, t: m.dstack([t, t * 2])),
          ("dstack_1d", lambda m, t: m.dstack([t[0], t[1]])),
          ("atleast_3d_2d", lambda m, t: m.atleast_3d((t, t[0]))[0] * 2),
          ("column_stack", lambda m, t: m.column_stack([t[0], t[1:3].T])),
          ("atleast_3d", lambda m, t: m.atleast_3d(t[0]) * 2),
          ("atleast_2d", lambda m, t: m.atleast_2d(t[0, 0]) * 2),
          ("take_along_dim", lambda m, t: m.take_along_dim(t, m.argsort(t, 1), 1)),
          ("take_along_dim_flat", lambda m, t: m.take_along_dim(t, m.argsort(t.reshape(-1))[:5])),
          ("tensor_split", lambda m, t: m.cat(m.tensor_split(t, 3, dim=1)[1:], 1)),
          ("tensor_split_idx", lambda m, t: m.tensor_split(t, (1, 3))[1]),
          ("hsplit", lambda m, t: m.hsplit(t.reshape(2, 10), 2)[1]),
          ("vsplit", lambda m, t: m.vsplit(t, [1])[1]),
          ("kron", lambda m, t: m.kron(t[:2, :3], t[2:, 1:])),
          ("kron_1d", lambda m, t: m.kron(t[0], t[1:3])),
          ("tensordot", lambda m, t: m.tensordot(t, t, dims=([1], [1]))),
          ("tensordot_int", lambda m, t: m.tensordot(t.reshape(2, 2, 5), t.reshape(2, 5, 2), dims=2)),
          ("inner", lambda m, t: m.inner(t, t[:2])),
          ("vdot", lambda m, t: m.vdot(t[0], t[1])),
          ("addbmm", lambda m, t: m.addbmm(t[:2, :2], t.reshape(2, 2, 5), t.reshape(2, 5, 2), beta=0.5, alpha=2))]


@pytest.mark.parametrize("name,fn", SHAPES, ids=[n for n, _ in SHAPES])
def test_shape_and_product_functions_equal_torch(name, fn):
    _same(lambda t: fn(torch, t), lambda t: fn(tt, t), X)


METHODS = [("diff", (1, 0)), ("tile", ((2, 2),)), ("take_along_dim", None), ("kron", None), ("inner", None),
           ("diagonal", (1,)), ("diagflat", ()), ("fliplr", ()), ("flipud", ()), ("rot90", (1, (0, 1))),
           ("nansum", ()), ("nanmean", ()), ("msort", ()), ("hsplit", (5,)), ("vsplit", (2,)),
           ("tensor_split", (2,)), ("swapaxes", (0, 1)), ("unflatten", (1, (5, 1))), ("aminmax", ())]


@pytest.mark.parametrize("name,args", METHODS, ids=[n for n, _ in METHODS])
def test_tensor_methods_exist_and_match(name, args):
    a, b = torch.tensor(X), tt.tensor(X)
    if name == "take_along_dim":
        args_t, args_b = (torch.argsort(a, 0), 0), (tt.argsort(b, 0), 0)
    elif args is None:
        args_t, args_b = (a,), (b,)
    else:
        args_t = args_b = args
    rt, rb = getattr(a, name)(*args_t), getattr(b, name)(*args_b)
    rt, rb = (rt, rb) if isinstance(rt, torch.Tensor) else (rt[0], rb[0])
    np.testing.assert_allclose(rb.numpy(), rt.numpy(), rtol=1e-12)


def test_bad_input_raises_torchs_errors():
    x = tt.tensor(X)
    with pytest.raises(RuntimeError):
        tt.fliplr(tt.tensor([1.0, 2.0]))
    with pytest.raises(RuntimeError):
        tt.rot90(x, 1, (0, 0))
    with pytest.raises(RuntimeError):
        tt.hsplit(x, 2)
    with pytest.raises(RuntimeError):
        tt.vsplit(tt.tensor([1.0, 2.0]), 2)
    with pytest.raises(RuntimeError):
        tt.unflatten(x, 1, (2, 2))
    with pytest.raises(RuntimeError):
        tt.tensordot(x, x, dims=([0], [1]))
    with pytest.raises(RuntimeError):
        tt.inner(x, tt.tensor(np.ones((2, 3))))
    with pytest.raises(RuntimeError):
        tt.diagonal(x, 0, 1, 1)
    with pytest.raises(TypeError):
        tt.heaviside(x, 0.5)


def test_orders_equal_torch():
    a = X.copy()
    a[2, 1] = a[2, 3]  # a tie
    for name in ("cummax", "cummin"):
        _same(lambda t: tuple(getattr(torch, name)(t, 1)), lambda t: tuple(getattr(tt, name)(t, 1)), a)
        _same(lambda t: getattr(t, name)(0).values, lambda t: getattr(t, name)(0).values, a)
        r, q = getattr(torch, name)(torch.tensor(a), 1), getattr(tt, name)(tt.tensor(a), 1)
        np.testing.assert_array_equal(q.indices.numpy(), r.indices.numpy())
    n = np.array([1.0, 3.0, np.nan, 2.0, np.nan, 0.5])
    _same(lambda t: tuple(torch.cummax(t, 0)), lambda t: tuple(tt.cummax(t, 0)), n, grad=False)
    _same(lambda t: torch.kthvalue(t, 2, 1).values, lambda t: tt.kthvalue(t, 2, 1).values, X)
    _same(lambda t: tuple(t.kthvalue(3, 0, True)), lambda t: tuple(t.kthvalue(3, 0, True)), X)
    _same(torch.median, tt.median, X)
    _same(torch.median, tt.median, X[:, :3])
    _same(lambda t: tuple(torch.median(t, 1)), lambda t: tuple(tt.median(t, 1)), X)
    _same(lambda t: tuple(t.median(0, keepdim=True)), lambda t: tuple(t.median(0, keepdim=True)), X)
    _same(torch.median, tt.median, n, grad=False)
    with pytest.raises(IndexError):
        tt.kthvalue(tt.tensor(X), 9, 1)
    with pytest.raises(IndexError):
        tt.cummax(tt.tensor(X), 2)


BUILDERS = [("block_diag", lambda m, t: m.block_diag(t[:2, :3], t[2, 0], t[3, 1:3])),
            ("cartesian_prod", lambda m, t: m.cartesian_prod(t[0, :2], t[1, :3], t[2, :2])),
            ("matrix_power", lambda m, t: m.matrix_power(t[:, :4] / 3, 5)),
            ("matrix_power0", lambda m, t: m.matrix_power(t[:, :4], 0) + t[:, :4]),
            ("matrix_power_m", lambda m, t: t[:, :4].matrix_power(2)),
            ("diag_embed", lambda m, t: m.diag_embed(t)),
            ("diag_embed_off", lambda m, t: m.diag_embed(t, 1, 0, 2)),
            ("diag_embed_neg", lambda m, t: t.diag_embed(-2)),
            ("cross", lambda m, t: m.cross(t[:3], t[1:], dim=0)),
            ("cross_method", lambda m, t: t[:, :3].cross(t[:, 2:], dim=1)),
            ("cdist2", lambda m, t: m.cdist(t[:2], t[2:])),
            ("cdist1", lambda m, t: m.cdist(t[:2], t[1:], p=1)),
            ("cdist3", lambda m, t: m.cdist(t[:2], t[2:], p=3.5)),
            ("cdist_inf", lambda m, t: m.cdist(t[:2].reshape(1, 2, 5), t[2:].reshape(1, 2, 5), p=float("inf"))),
            ("cdist0", lambda m, t: m.cdist(t[:2], t[2:], p=0))]


@pytest.mark.parametrize("name,fn", BUILDERS, ids=[n for n, _ in BUILDERS])
def test_builders_and_distances_equal_torch(name, fn):
    _same(lambda t: fn(torch, t), lambda t: fn(tt, t), X, grad=name != "cdist0")


def test_logspace_and_cross_default_dim_equal_torch():
    for args, kw in [((0, 2, 5), {}), ((-1.0, 1.0, 4), {"base": 2.0}), ((1, 3, 3), {"dtype": torch.float64})]:
        kt = dict(kw)
        if "dtype" in kt:
            kt["dtype"] = tt.float64
        a, b = torch.logspace(*args, **kw), tt.logspace(*args, **kt)
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-6 if a.dtype == torch.float32 else 1e-13)
        assert b.numpy().dtype == a.numpy().dtype
    with pytest.warns(UserWarning):
        c = tt.cross(tt.tensor(X[:3, :3]), tt.tensor(Y[:3, :3]))
    with pytest.warns(UserWarning):
        ct = torch.cross(torch.tensor(X[:3, :3]), torch.tensor(Y[:3, :3]))
    np.testing.assert_allclose(c.numpy(), ct.numpy(), rtol=1e-12)
    with pytest.raises(RuntimeError):
        tt.cross(tt.tensor(X), tt.tensor(Y), dim=1)
    with pytest.raises(RuntimeError):
        tt.block_diag(tt.tensor(np.ones((2, 2, 2))))
    with pytest.raises(RuntimeError):
        tt.cdist(tt.tensor(X), tt.tensor(X[:, :2]))
    with pytest.raises(RuntimeError):
        tt.matrix_power(tt.tensor(X), 2)


INPLACE = [("sinh_", X, ()), ("cosh_", X, ()), ("asinh_", X, ()), ("acosh_", G, ()), ("atanh_", P, ()),
           ("exp2_", X, ()), ("erfc_", P, ()), ("frac_", X, ()), ("deg2rad_", X, ()), ("rad2deg_", X, ()),
           ("logit_", P, (0.2,)), ("sgn_", X, ()), ("hypot_", X, (Y,)), ("xlogy_", X, (G,)),
           ("copysign_", X, (Y,)), ("heaviside_", np.array([-1.0, 0.0, 3.0]), (np.array([0.5, 0.7, 0.1]),))]


@pytest.mark.parametrize("name,a,args", INPLACE, ids=[n for n, _, _ in INPLACE])
def test_inplace_methods_equal_torch(name, a, args):
    def call(lib, b, *ops):
        b = b * 1.0  # a non-leaf, so the in-place method is allowed in the graph
        r = getattr(b, name)(*[lib.tensor(o) if isinstance(o, np.ndarray) else o for o in ops])
        assert r is b
        return r
    grad = name not in ("sgn_", "heaviside_", "copysign_", "asinh_", "acosh_", "atanh_")  # (torch: no gradient)
    _same(lambda b: call(torch, b, *args), lambda b: call(tt, b, *args), a, grad=grad)


def test_zero_points_have_torchs_gradients():
    z = np.array([0.0, -0.5, 2.0])
    _same(torch.asinh, tt.asinh, z)
    _same(lambda a: torch.cdist(a, a), lambda a: tt.cdist(a, a), X[:3])
    _same(lambda a: torch.cdist(a, a, p=3.0), lambda a: tt.cdist(a, a, p=3.0), X[:3])


def test_integer_orders_infinities_and_diff_operands_as_torch():
    k = np.array([[3, 1, 2, 5], [1, 1, 0, 2]])
    _same(torch.median, tt.median, k)
    _same(lambda t: tuple(torch.cummax(t, 1)), lambda t: tuple(tt.cummax(t, 1)), k)
    _same(lambda t: tuple(torch.cummin(t, 1)), lambda t: tuple(tt.cummin(t, 1)), k)
    _same(lambda t: tuple(torch.kthvalue(t, 2)), lambda t: tuple(tt.kthvalue(t, 2)), k[:, ::3])
    inf = np.array([-np.inf, np.inf, 1.0, 2.0])
    _same(torch.logaddexp, tt.logaddexp, inf, inf.copy(), grad=False)
    _same(torch.logaddexp, tt.logaddexp, X, X.copy())  # ties: torch's half-and-half gradient
    with pytest.raises(RuntimeError):
        tt.diff(tt.tensor([1.0, 4.0]), prepend=tt.tensor(2.0))
