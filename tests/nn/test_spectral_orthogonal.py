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


# ---- orthogonal ---------------------------------------------------------------------------------

def _batched(L):
    """A module whose weight is a batch of two 4 x 3 matrices."""
    class Batched(L.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = L.nn.Parameter(L.randn(2, 4, 3, dtype=L.float64))

        def forward(self, x):
            return x @ self.weight
    return Batched()


ORTH_LAYERS = {
    "square": (lambda L: L.nn.Linear(4, 4, dtype=L.float64), (2, 4)),
    "tall": (lambda L: L.nn.Linear(3, 5, dtype=L.float64), (2, 3)),
    "wide": (lambda L: L.nn.Linear(5, 3, dtype=L.float64), (2, 5)),
    "batched": (_batched, (2, 3, 4)),
    "square_orthogonal_init": (None, (2, 4)),
}


def _orth_train(lib, layer, kw, steps=3):
    make, shape = ORTH_LAYERS[layer]
    if make is None:  # an orthogonal weight is kept as the base, not re-orthogonalised
        def make(L):
            m = L.nn.Linear(4, 4, dtype=L.float64)
            L.nn.init.orthogonal_(m.weight)
            return m
    lib.manual_seed(7)
    m = lib.nn.utils.parametrizations.orthogonal(make(lib), **kw)
    opt = lib.optim.Adam(m.parameters(), lr=0.05)
    x = _input(lib, shape)
    record = [("initial weight", _np(m.weight))]
    for _ in range(steps):
        opt.zero_grad()
        y = m(x)
        ((y - 0.3) ** 2).sum().backward()
        record.append(("out", _np(y)))
        record.extend((n, _np(p.grad)) for n, p in m.named_parameters())
        opt.step()
    record.append(("weight", _np(m.weight)))
    return record, {k: _np(v) for k, v in m.state_dict().items()}


@pytest.mark.parametrize("triv", [True, False])
@pytest.mark.parametrize("omap", [None, "matrix_exp", "cayley", "householder"])
@pytest.mark.parametrize("layer", list(ORTH_LAYERS))
def test_orthogonal_trains_as_torch(layer, omap, triv):
    kw = dict(orthogonal_map=omap, use_trivialization=triv)
    (ra, sa), (rb, sb) = _orth_train(torch, layer, kw), _orth_train(tt, layer, kw)
    assert [n for n, _ in rb] == [n for n, _ in ra]
    for (n, a), (_, b) in zip(ra, rb):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12, err_msg=n)
    assert list(sb) == list(sa)
    for k in sa:
        np.testing.assert_allclose(sb[k], sa[k], rtol=1e-10, atol=1e-12, err_msg=k)
    w = rb[-1][1]
    wt = np.swapaxes(w, -1, -2)
    gram = wt @ w if w.shape[-2] >= w.shape[-1] else w @ wt
    np.testing.assert_allclose(gram, np.broadcast_to(np.eye(gram.shape[-1]), gram.shape), atol=1e-12)


@pytest.mark.parametrize("omap", ["matrix_exp", "cayley", "householder"])
def test_orthogonal_assignment_is_the_right_inverse(omap):
    """module.weight = Q: a trivialization takes Q as its new base (Q orthogonalised when it
    is not); householder without one stores geqrf's reflectors."""
    def run(lib, triv):
        lib.manual_seed(3)
        m = lib.nn.utils.parametrizations.orthogonal(lib.nn.Linear(3, 5, dtype=lib.float64), orthogonal_map=omap,
                                                     use_trivialization=triv)
        with lib.no_grad():
            m.weight = lib.tensor(np.cos(np.arange(15.0) ** 2).reshape(5, 3), dtype=lib.float64)  # full rank
        return _np(m.weight), {k: _np(v) for k, v in m.state_dict().items()}
    for triv in ([True, False] if omap == "householder" else [True]):
        (wa, sa), (wb, sb) = run(torch, triv), run(tt, triv)
        np.testing.assert_allclose(wb, wa, rtol=1e-10, atol=1e-12)
        assert list(sb) == list(sa)
        for k in sa:
            np.testing.assert_allclose(sb[k], sa[k], rtol=1e-10, atol=1e-12, err_msg=k)


def test_orthogonal_float32():
    def run(lib):
        lib.manual_seed(1)
        m = lib.nn.utils.parametrizations.orthogonal(lib.nn.Linear(3, 3))
        y = m(lib.ones(2, 3))
        y.sum().backward()
        return _np(y), _np(m.parametrizations.weight.original.grad)
    for a, b in zip(run(torch), run(tt)):
        assert b.dtype == a.dtype == np.float32
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_orthogonal_bad_input():
    orth = tt.nn.utils.parametrizations.orthogonal
    with pytest.raises(ValueError, match="orthogonal_map has to be one of"):
        orth(tt.nn.Linear(3, 3), orthogonal_map="qr")
    with pytest.raises(ValueError, match="Expected a matrix or batch of matrices. Got a tensor of 1 dimensions"):
        orth(tt.nn.Linear(3, 3), "bias")
    with pytest.raises(ValueError, match="no parameter or buffer with name 'w'"):
        orth(tt.nn.Linear(3, 3), "w")
    m = orth(tt.nn.Linear(3, 4))
    with pytest.raises(ValueError, match=r"Expected a matrix or batch of matrices of shape \(4, 3\)"):
        with tt.no_grad():
            m.weight = tt.zeros(3, 3)
    m = orth(tt.nn.Linear(3, 3), use_trivialization=False)
    with pytest.raises(NotImplementedError, match="use_trivialization=False"):
        with tt.no_grad():
            m.weight = tt.zeros(3, 3)


# ---- matrix_exp, linalg.solve, linalg.householder_product ----------------------------------------

def _against_torch(fn_t, fn_tt, *arrays, double=False):
    """Values and gradients (and, with double, the gradient of a gradient) against torch."""
    outs = []
    for lib, fn in ((torch, fn_t), (tt, fn_tt)):
        xs = [lib.tensor(a, requires_grad=True) for a in arrays]
        y = fn(lib, *xs)
        w = lib.tensor(np.random.default_rng(5).standard_normal(tuple(y.shape)))
        grads = lib.autograd.grad((y * w).sum(), xs, create_graph=double)
        res = [_np(y)] + [_np(g) for g in grads]
        if double:
            res += [_np(g) for g in lib.autograd.grad(sum((g * g).sum() for g in grads), xs)]
        outs.append(res)
    for a, b in zip(*outs):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape,scale", [((3, 3), 0.2), ((5, 5), 3.0), ((2, 4, 4), 1.5), ((1, 1), 2.0),
                                         ((6, 6), 25.0), ((2, 2), 0.0)])
def test_matrix_exp_matches_torch(shape, scale):
    a = np.random.default_rng(int(scale * 10) + len(shape)).standard_normal(shape) * scale
    _against_torch(lambda L, x: L.matrix_exp(x), lambda L, x: L.matrix_exp(x), a)
    _against_torch(lambda L, x: L.linalg.matrix_exp(x), lambda L, x: x.matrix_exp(), a)


def test_matrix_exp_double_backward():
    a = np.random.default_rng(0).standard_normal((3, 3))
    _against_torch(lambda L, x: L.matrix_exp(x), lambda L, x: L.matrix_exp(x), a, double=True)


@pytest.mark.parametrize("sa,sb", [((4, 4), (4, 2)), ((4, 4), (4,)), ((2, 3, 3), (2, 3, 5)), ((2, 3, 3), (2, 3))])
def test_solve_matches_torch(sa, sb):
    rng = np.random.default_rng(sa[-1] + len(sb))
    a, b = rng.standard_normal(sa) + 3 * np.eye(sa[-1]), rng.standard_normal(sb)
    _against_torch(lambda L, x, y: L.linalg.solve(x, y), lambda L, x, y: L.linalg.solve(x, y), a, b,
                   double=len(sa) == 2)
    if len(sb) == len(sa):
        bt = np.swapaxes(b, -1, -2).copy()
        _against_torch(lambda L, x, y: L.linalg.solve(x, y, left=False), lambda L, x, y: L.linalg.solve(x, y, left=False),
                       a, bt)


def test_solve_bad_input():
    with pytest.raises(RuntimeError, match="singular"):
        tt.linalg.solve(tt.zeros(3, 3, dtype=tt.float64), tt.ones(3, 1, dtype=tt.float64))
    with pytest.raises(RuntimeError, match="square matrices"):
        tt.linalg.solve(tt.zeros(3, 2, dtype=tt.float64), tt.ones(3, 1, dtype=tt.float64))
    with pytest.raises(RuntimeError, match="Incompatible shapes"):
        tt.linalg.solve(tt.eye(3, dtype=tt.float64), tt.ones(4, 1, dtype=tt.float64))
    with pytest.raises(RuntimeError, match="square matrices"):
        tt.matrix_exp(tt.zeros(2, 3))


@pytest.mark.parametrize("sa,k", [((5, 3), 3), ((4, 4), 2), ((2, 5, 2), 2), ((3, 3), 1)])
def test_householder_product_matches_torch(sa, k):
    rng = np.random.default_rng(sa[-1] * 7 + k)
    a, tau = rng.standard_normal(sa), rng.standard_normal(sa[:-2] + (k,))
    f = (lambda L, x, t: L.linalg.householder_product(x, t))
    _against_torch(f, f, a, tau, double=len(sa) == 2)
