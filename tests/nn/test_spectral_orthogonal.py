"""torch.nn.utils.spectral_norm / remove_spectral_norm (the hook form),
nn.utils.parametrizations.spectral_norm and orthogonal, and torch.linalg.matrix_exp, each
against torch itself: after the same seed the same u/v draws, state dicts, outputs and
gradients over several optimiser steps, in training and eval mode (float64)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tiletrain as tt


def _np(t):
    return np.asarray(t.detach().numpy() if hasattr(t, "detach") else t)


def _input(lib, shape):
    return lib.tensor(np.sin(np.arange(int(np.prod(shape))) * 0.7).reshape(shape), dtype=lib.float64)


LAYERS = {  # float64 from the start: the registration's power iterations run in float64
    "linear": (lambda L: L.nn.Linear(6, 4, dtype=L.float64), (5, 6)),
    "linear_wide": (lambda L: L.nn.Linear(3, 7, dtype=L.float64), (2, 3)),
    "conv2d": (lambda L: L.nn.Conv2d(2, 3, 3, dtype=L.float64), (2, 2, 5, 5)),
    "conv_transpose2d": (lambda L: L.nn.ConvTranspose2d(3, 2, 2, dtype=L.float64), (1, 3, 3, 3)),
    "conv1d": (lambda L: L.nn.Conv1d(4, 5, 2, dtype=L.float64), (2, 4, 6)),
    "linear_float32": (lambda L: L.nn.Linear(5, 4), (3, 5)),  # float32 draws and registration
}


def _train(lib, wrap, layer, steps=3, eval_too=True):
    """Seed, build, wrap, convert to float64, then SGD steps: every output, every gradient,
    the eval-mode output and the final state dict."""
    make, shape = LAYERS[layer]
    lib.manual_seed(11)
    m = wrap(lib, make(lib)).double()
    opt = lib.optim.SGD(m.parameters(), lr=0.05, momentum=0.5)
    x = _input(lib, shape)
    record = []
    for _ in range(steps):
        opt.zero_grad()
        y = m(x)
        (y * y).sum().backward()
        record.append(("out", _np(y)))
        record.extend((n, _np(p.grad)) for n, p in m.named_parameters())
        opt.step()
    if eval_too:
        m.eval()
        record.append(("eval", _np(m(x))))
        record.append(("eval again", _np(m(x))))
    return record, {k: _np(v) for k, v in m.state_dict().items()}


def _same_training(wrap, layer, **kw):
    """float32 registration: float32 products round differently from torch's (1e-5)."""
    (ra, sa), (rb, sb) = _train(torch, wrap, layer, **kw), _train(tt, wrap, layer, **kw)
    tol = dict(rtol=1e-5, atol=1e-6) if layer.endswith("float32") else dict(rtol=1e-10, atol=1e-12)
    assert [n for n, _ in ra] == [n for n, _ in rb]
    for (n, a), (_, b) in zip(ra, rb):
        np.testing.assert_allclose(b, a, err_msg=n, **tol)
    assert list(sb) == list(sa)
    for k in sa:
        np.testing.assert_allclose(sb[k], sa[k], err_msg=k, **tol)


# ---- spectral norm, the hook form -------------------------------------------------------------

@pytest.mark.parametrize("layer", list(LAYERS))
def test_spectral_norm_hook_trains_as_torch(layer):
    _same_training(lambda L, m: L.nn.utils.spectral_norm(m), layer)


@pytest.mark.parametrize("kw", [dict(n_power_iterations=3), dict(dim=1), dict(eps=1e-3, name="weight")])
def test_spectral_norm_hook_arguments(kw):
    _same_training(lambda L, m: L.nn.utils.spectral_norm(m, **kw), "conv2d")


def test_spectral_norm_hook_names_and_removal():
    for lib in (torch, tt):
        lib.manual_seed(5)
    mt = torch.nn.utils.spectral_norm(torch.nn.Linear(5, 3))
    m = tt.nn.utils.spectral_norm(tt.nn.Linear(5, 3))
    assert [n for n, _ in m.named_parameters()] == ["bias", "weight_orig"]
    assert [n for n, _ in m.named_buffers()] == ["weight_u", "weight_v"]
    np.testing.assert_allclose(_np(m.weight), _np(mt.weight), rtol=1e-6)  # the original until a forward
    m(tt.ones(2, 5)), mt(torch.ones(2, 5))
    torch.nn.utils.remove_spectral_norm(mt)
    assert tt.nn.utils.remove_spectral_norm(m) is m
    assert [n for n, _ in m.named_parameters()] == ["bias", "weight"] and not list(m.named_buffers())
    np.testing.assert_allclose(_np(m.weight), _np(mt.weight), rtol=1e-6)
    assert m.weight.requires_grad
    with pytest.raises(ValueError, match="spectral_norm of 'weight' not found"):
        tt.nn.utils.remove_spectral_norm(m)


def test_spectral_norm_hook_bad_input():
    m = tt.nn.utils.spectral_norm(tt.nn.Linear(3, 2))
    with pytest.raises(RuntimeError, match="two spectral_norm hooks"):
        tt.nn.utils.spectral_norm(m)
    with pytest.raises(ValueError, match="n_power_iterations"):
        tt.nn.utils.spectral_norm(tt.nn.Linear(3, 2), n_power_iterations=0)
    with pytest.raises(ValueError, match="bias_x"):
        tt.nn.utils.spectral_norm(tt.nn.Linear(3, 2), name="bias_x")


def test_spectral_norm_hook_two_forwards_one_backward():
    """The GAN pattern D(real) - D(fake): the second power iteration does not change what
    the first forward's backward reads."""
    def run(lib):
        lib.manual_seed(2)
        m = lib.nn.utils.spectral_norm(lib.nn.Linear(4, 3, dtype=lib.float64))
        a, b = _input(lib, (2, 4)), _input(lib, (3, 4)) * 0.5
        loss = m(a).sum() - (m(b) ** 2).sum()
        loss.backward()
        return [_np(loss), _np(m.weight_orig.grad), _np(m.bias.grad), _np(m.weight_u)]
    for a, b in zip(run(torch), run(tt)):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-13)


# ---- spectral norm, the parametrization -------------------------------------------------------

@pytest.mark.parametrize("layer", list(LAYERS))
def test_spectral_norm_parametrization_trains_as_torch(layer):
    _same_training(lambda L, m: L.nn.utils.parametrizations.spectral_norm(m), layer)


@pytest.mark.parametrize("kw", [dict(n_power_iterations=2), dict(dim=-1), dict(eps=0.1)])
def test_spectral_norm_parametrization_arguments(kw):
    _same_training(lambda L, m: L.nn.utils.parametrizations.spectral_norm(m, **kw), "conv1d")


def test_spectral_norm_parametrization_of_a_vector_and_removal():
    def run(lib, leave):
        lib.manual_seed(4)
        m = lib.nn.Linear(3, 4, dtype=lib.float64)
        P = lib.nn.utils.parametrizations
        P.spectral_norm(m, "bias")  # a 1-d tensor: normalised, no u/v
        P.spectral_norm(m)
        out = [_np(m(_input(lib, (2, 3)))), _np(m.bias)]
        keys = list(m.state_dict())
        lib.nn.utils.parametrize.remove_parametrizations(m, "weight", leave_parametrized=leave)
        return out + [_np(m.weight)], keys
    for leave in (True, False):
        (a, ka), (b, kb) = run(torch, leave), run(tt, leave)
        assert kb == ka
        for x, y in zip(a, b):
            np.testing.assert_allclose(y, x, rtol=1e-10, atol=1e-13)


def test_spectral_norm_parametrization_bad_input():
    P = tt.nn.utils.parametrizations
    with pytest.raises(IndexError, match="Dimension out of range"):
        P.spectral_norm(tt.nn.Linear(3, 2), dim=2)
    with pytest.raises(ValueError, match="n_power_iterations"):
        P.spectral_norm(tt.nn.Linear(3, 2), n_power_iterations=0)
    with pytest.raises(ValueError, match="no parameter or buffer with name 'w'"):
        P.spectral_norm(tt.nn.Linear(3, 2), "w")
