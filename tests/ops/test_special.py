"""tiletrain.special against torch.special: values and gradients in float64 (1e-10), the
edges (0 for sinc/entr/xlog1py, the ends of ndtri's domain, the lower tail of ndtr),
float32 close, a smaller last tile, and second derivatives."""
import numpy as np
import pytest
import torch

import tiletrain as tt

RNG = np.random.default_rng(3)
UNARY = {
    "expit": RNG.normal(0, 3, (7, 5)),
    "logit": RNG.uniform(0.01, 0.99, (7, 5)),
    "erf": RNG.normal(0, 2, (7, 5)),
    "erfc": np.concatenate([RNG.normal(0, 2, 30), [-6.0, 8.0, 20.0, 26.0, 0.0]]).reshape(7, 5),
    "erfinv": RNG.uniform(-0.999, 0.999, (7, 5)),
    "exp2": RNG.normal(0, 2, (7, 5)),
    "expm1": RNG.normal(0, 1e-3, (7, 5)),
    "log1p": RNG.uniform(-0.5, 3, (7, 5)),
    "ndtr": np.concatenate([RNG.normal(0, 3, 30), [-30.0, -9.0, 0.0, 5.0, 12.0]]).reshape(7, 5),
    "ndtri": RNG.uniform(1e-6, 1 - 1e-6, (7, 5)),
    "log_ndtr": np.concatenate([RNG.normal(0, 3, 30), [-30.0, -9.0, 0.0, 5.0, 12.0]]).reshape(7, 5),
    "entr": np.concatenate([RNG.uniform(0.01, 3, 34), [0.5]]).reshape(7, 5),
    "sinc": np.concatenate([RNG.normal(0, 2, 34), [0.3]]).reshape(7, 5),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_values_and_gradients_equal_torchs(name):
    a = UNARY[name]
    x = tt.tensor(a, requires_grad=True, tiles=(4, 3))
    t = torch.tensor(a, requires_grad=True)
    y, ty = getattr(tt.special, name)(x), getattr(torch.special, name)(t)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-10, atol=1e-300)
    w = RNG.normal(size=a.shape)
    (y * tt.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-300)


def test_edges():
    S, T = tt.special, torch.special
    cases = [("sinc", [0.0, 1.0, -2.0, 0.5]), ("entr", [0.0, -1.0, 1.0, 2.0]),
             ("ndtri", [0.0, 1.0, 0.5, -0.1, 1.1]), ("ndtr", [-37.0, -38.5, 0.0, 40.0]),
             ("logit", [0.0, 1.0, 0.5])]
    for name, v in cases:
        a = np.array(v)
        np.testing.assert_allclose(getattr(S, name)(tt.tensor(a)).numpy(), getattr(T, name)(torch.tensor(a)).numpy(),
                                   rtol=1e-12, atol=0, err_msg=name)
    x, y = np.array([0.0, 0.0, 2.0, 3.0]), np.array([np.nan, 1.5, -0.5, 4.0])
    np.testing.assert_allclose(S.xlog1py(tt.tensor(x), tt.tensor(y)).numpy(),
                               T.xlog1py(torch.tensor(x), torch.tensor(y)).numpy(), rtol=1e-12)
    np.testing.assert_allclose(S.xlogy(tt.tensor(x + 1), tt.tensor(np.abs(y) + 1)).numpy(),
                               T.xlogy(torch.tensor(x + 1), torch.tensor(np.abs(y) + 1)).numpy(), rtol=1e-12)


def test_reductions_and_float32():
    a = RNG.normal(size=(6, 9))
    for name, kw in (("logsumexp", dict(dim=1)), ("softmax", dict(dim=0)), ("log_softmax", dict(dim=1))):
        np.testing.assert_allclose(getattr(tt.special, name)(tt.tensor(a), **kw).numpy(),
                                   getattr(torch.special, name)(torch.tensor(a), **kw).numpy(), rtol=1e-12)
    f = a.astype(np.float32)
    for name in ("ndtr", "expit", "sinc", "erfc"):
        np.testing.assert_allclose(getattr(tt.special, name)(tt.tensor(f)).numpy(),
                                   getattr(torch.special, name)(torch.tensor(f)).numpy(), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["ndtr", "ndtri", "sinc", "entr"])
def test_second_derivatives_equal_torchs(name):
    a = UNARY[name][:2]
    x, t = tt.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    (g,) = tt.autograd.grad(getattr(tt.special, name)(x).sum(), x, create_graph=True)
    (tg,) = torch.autograd.grad(getattr(torch.special, name)(t).sum(), t, create_graph=True)
    (h,) = tt.autograd.grad((g * g).sum(), x)
    (th,) = torch.autograd.grad((tg * tg).sum(), t)
    np.testing.assert_allclose(h.numpy(), th.numpy(), rtol=1e-9, atol=1e-300)


def test_bad_input_and_what_is_missing():
    with pytest.raises(TypeError, match="special.ndtr\\(\\): argument 'input' must be Tensor"):
        tt.special.ndtr(np.ones(3))
    with pytest.raises(AttributeError):
        tt.special.airy_ai  # noqa: B018 - not provided: AttributeError as for any missing name
