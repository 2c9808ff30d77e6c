"""torch.autograd.functional (jacobian, hessian, vjp, jvp, vhp, hvp) against torch's in
float64: the same values and shapes, tuples nested as torch nests them, results detached
unless create_graph=True (then differentiable again), strict mode's error."""
import numpy as np
import pytest
import torch

import tiletrain as tt
import tiletrain.autograd.functional as AF

RNG = np.random.default_rng(0)
A, B = RNG.standard_normal(3), RNG.standard_normal((2, 3))


def _scalar(m):
    return lambda x, w: (m.tanh(w @ x) * x[:2]).sum() + (x ** 3).sum()


def _pair(m):
    return lambda x, w: (m.tanh(w @ x), w.sum(0) * x)


CASES = {
    "jacobian_one": lambda m: m.autograd.functional.jacobian(lambda x: m.sin(x) * x.sum(), m.tensor(A)),
    "jacobian_tuples": lambda m: m.autograd.functional.jacobian(_pair(m), (m.tensor(A), m.tensor(B))),
    "jacobian_unused": lambda m: m.autograd.functional.jacobian(lambda x, y: x * 2, (m.tensor(A), m.tensor(A))),
    "hessian_one": lambda m: m.autograd.functional.hessian(lambda x: (x ** 3).sum() * x[0], m.tensor(A)),
    "hessian_tuples": lambda m: m.autograd.functional.hessian(_scalar(m), (m.tensor(A), m.tensor(B))),
    "vjp": lambda m: m.autograd.functional.vjp(_pair(m), (m.tensor(A), m.tensor(B)),
                                               (m.ones(2, dtype=m.float64), m.tensor(A))),
    "vjp_scalar": lambda m: m.autograd.functional.vjp(lambda x: (x * x).sum(), m.tensor(A)),
    "jvp": lambda m: m.autograd.functional.jvp(_pair(m), (m.tensor(A), m.tensor(B)), (m.tensor(A), m.tensor(B))),
    "hvp": lambda m: m.autograd.functional.hvp(_scalar(m), (m.tensor(A), m.tensor(B)), (m.tensor(A), m.tensor(B))),
    "vhp": lambda m: m.autograd.functional.vhp(_scalar(m), (m.tensor(A), m.tensor(B)), (m.tensor(A), m.tensor(B))),
}


def _compare(ref, ours):
    assert isinstance(ours, tuple) == isinstance(ref, tuple)
    if isinstance(ref, tuple):
        assert len(ours) == len(ref)
        for u, v in zip(ref, ours):
            _compare(u, v)
        return
    assert tuple(ours.shape) == tuple(ref.shape)
    assert not ours.requires_grad
    np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", sorted(CASES))
def test_autograd_functional_equals_torch(name):
    _compare(CASES[name](torch), CASES[name](tt))


def test_create_graph_results_are_differentiable():
    out = []
    for m in (torch, tt):
        x = m.tensor(A, requires_grad=True)
        jac = m.autograd.functional.jacobian(lambda u: m.sin(u) * u.sum(), x, create_graph=True)
        (g,) = m.autograd.grad((jac * jac).sum(), x)
        out.append(g.numpy())
    np.testing.assert_allclose(out[1], out[0], rtol=1e-12)


def test_strict_mode_and_bad_arguments_raise():
    with pytest.raises(RuntimeError, match="independent of input 1"):
        AF.jacobian(lambda x, y: x * 2, (tt.tensor(A), tt.tensor(A)), strict=True)
    with pytest.raises(TypeError, match="tuple of Tensors"):
        AF.jacobian(lambda x: x, [1.0, 2.0])
    with pytest.raises(RuntimeError, match="single element"):
        AF.hessian(lambda x: x * 2, tt.tensor(A))
    with pytest.raises(RuntimeError, match="v can only be None"):
        AF.vjp(lambda x: x * 2, tt.tensor(A))
