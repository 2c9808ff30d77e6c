"""The PyTorch surface a ported program uses (issue: ordinary PyTorch programs run with only
the import changed), each checked against torch itself in float64."""
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

import tiletrain as tt
import tiletrain.nn.functional as F
from tiletrain import nn

TOL = dict(rtol=1e-12, atol=1e-12)


def T(a, tiles=None):
    return tt.from_numpy(np.array(a, order="C"), tiles)


def close(ours, ref, **kw):
    ref = ref.detach().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    np.testing.assert_allclose(ours.detach().numpy() if isinstance(ours, tt.Tensor) else np.asarray(ours), ref,
                               **(kw or TOL))


# -- names, dtypes, devices ---------------------------------------------------------------

def test_nn_functional_is_functional():
    import tiletrain.functional
    assert F is tiletrain.functional and tt.nn.functional is tiletrain.functional


def test_default_dtype():
    assert tt.get_default_dtype() == np.float32
    try:
        tt.set_default_dtype(tt.float64)
        assert tt.get_default_dtype() == np.float64
        assert tt.zeros(2).dtype == np.float64 and tt.tensor([1.5]).dtype == np.float64
        assert tt.randn(3).dtype == np.float64 and nn.Linear(2, 3).weight.dtype == np.float64
        assert tt.tensor([1]).dtype == np.int64
        with pytest.raises(TypeError, match="floating-point"):
            tt.set_default_dtype(tt.int64)
    finally:
        tt.set_default_dtype(tt.float32)
    assert tt.ones(2).dtype == np.float32 and nn.LayerNorm(4).weight.dtype == np.float32


def test_device_to_contiguous():
    x = tt.arange(6, dtype=tt.float64, device="cpu").view(2, 3)
    assert x.device == tt.device("cpu") and str(x.device) == "cpu" and x.device == "cpu"
    assert x.to("cpu") is x and x.to(tt.device("cpu")) is x and x.contiguous() is x and x.cpu() is x
    assert x.to("cpu", tt.float32).dtype == np.float32 and x.to(dtype=tt.float64) is x
    assert x.to(tt.zeros(1, dtype=tt.float32)).dtype == np.float32
    assert tt.zeros(2, device=tt.device("cpu:0")).shape == (2,)
    with pytest.raises(RuntimeError, match="ncuda"):
        x.to("cuda")
    with pytest.raises(RuntimeError, match="ncuda"):
        tt.zeros(2, device="cuda")
    m = nn.Linear(2, 2)
    assert m.to("cpu") is m and m.to(tt.float32) is m
    w = m.weight
    w0 = w.detach().numpy()
    assert m.to(tt.float64) is m and m.weight is w and w.dtype == np.float64 and w.requires_grad  # in place, as torch
    np.testing.assert_array_equal(w.detach().numpy(), w0.astype(np.float64))
    assert m.float().weight.dtype == np.float32 and m.double().bias.dtype == np.float64
    with pytest.raises(TypeError, match="floating point dtypes"):
        m.to(tt.int64)


def test_axis_alias(rng):
    a = rng.standard_normal((3, 4))
    x, r = T(a), torch.from_numpy(a)
    close(x.sum(axis=0), r.sum(axis=0))
    close(tt.mean(x, axis=1, keepdim=True), torch.mean(r, axis=1, keepdim=True))
    close(x.amax(axis=1), r.amax(axis=1))
    close(F.softmax(x, axis=-1), torch.softmax(r, axis=-1))
    close(tt.cat([x, x], axis=1), torch.cat([r, r], axis=1))
    with pytest.raises(TypeError, match="alias"):
        x.sum(dim=0, axis=0)


def test_sum_mean_of_bool_and_int(rng):
    a = rng.standard_normal((5, 6))
    x, r = T(a), torch.from_numpy(a)
    for ours, ref in [((x > 0).sum(), (r > 0).sum()), ((x > 0).sum(dim=1), (r > 0).sum(dim=1)),
                      (x.long().sum(0, keepdim=True), r.long().sum(0, keepdim=True))]:
        assert ours.dtype == np.int64 and ref.dtype == torch.int64
        assert ours.shape == tuple(ref.shape)
        np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    with pytest.raises(RuntimeError, match="could not infer output dtype"):
        (x > 0).mean()
    with pytest.raises(RuntimeError, match="could not infer output dtype"):
        x.long().mean()
    close((x > 0).float().mean(), (r > 0).float().mean(), rtol=1e-7)
    close(x.long().mean(dtype=tt.float64), r.long().mean(dtype=torch.float64))


def test_binary_ops_and_losses_retile(rng):
    """Tiling is never a correctness rule: operands with different tilings are retiled."""
    a, b = rng.standard_normal((6, 8)), rng.standard_normal((6, 8))
    xa, xb = T(a, (2, 8)), T(b, (3, 4))
    ra, rb = torch.from_numpy(a), torch.from_numpy(b)
    for op in ("add", "sub", "mul", "div", "maximum", "minimum"):
        close(getattr(tt, op)(xa, xb), getattr(torch, op)(ra, rb))
    close(xa ** T(np.abs(b) + 0.5, (6, 1)), ra ** (rb.abs() + 0.5))
    close(F.mse_loss(xa, xb), torch.nn.functional.mse_loss(ra, rb))
    close(F.l1_loss(xa, xb, reduction="sum"), torch.nn.functional.l1_loss(ra, rb, reduction="sum"))
    t = rng.random((6, 8))
    close(F.binary_cross_entropy_with_logits(xa, T(t, (6, 2))),
          torch.nn.functional.binary_cross_entropy_with_logits(ra, torch.from_numpy(t)))
    y = rng.integers(0, 8, 6)
    close(F.cross_entropy(xa, T(y, (4,))), torch.nn.functional.cross_entropy(ra, torch.from_numpy(y)))


def test_runtime_starts_on_first_use(tmp_path):
    code = ("import tiletrain as tt\n"
            "assert not tt.is_initialized()\n"
            "x = tt.ones(3) * 2\n"
            "assert tt.is_initialized() and tt.current().auto_started\n"
            "print(float(x.sum()))\n"
            "try:\n"
            "    tt.init(ncpu=1)\n"
            "except RuntimeError as e:\n"
            "    assert 'first tensor' in str(e), e\n"
            "tt.shutdown()\n"
            "try:\n"
            "    tt.zeros(2)\n"
            "except RuntimeError as e:\n"
            "    assert 'not initialised' in str(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "STARPU_NCPU": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "6.0"


# -- ops: einsum, tril/triu, topk, multinomial, indexing ------------------------------------

@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("ik,kj,jl->il", [(2, 3), (3, 4), (4, 2)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("bnd,d->bn", [(2, 3, 4), (4,)]),
    ("...ij,...jk->...ik", [(2, 2, 3), (2, 3, 2)]),
    ("...ij,...jk", [(2, 1, 2, 3), (4, 3, 2)]),
    ("b...,b...->b", [(2, 3, 4), (2, 3, 4)]),
    ("i...->...i", [(2, 3, 4)]),
    ("...i->i", [(2, 3)]),
    ("ij...,j...->i...", [(2, 3), (3,)]),
    ("bh...d,bhd->bh...", [(2, 3, 4, 5), (2, 3, 5)]),
    ("...,...", [(3,), (3,)]),
])
def test_einsum_matches_torch(rng, eq, shapes):
    arrays = [rng.standard_normal(s) for s in shapes]
    xs = [T(a).requires_grad_() for a in arrays]
    rs = [torch.from_numpy(a).requires_grad_() for a in arrays]
    y, ry = tt.einsum(eq, *xs), torch.einsum(eq, *rs)
    close(y, ry)
    g = rng.standard_normal(tuple(ry.shape))
    y.backward(T(g))
    ry.backward(torch.from_numpy(g))
    for x, r in zip(xs, rs):
        close(x.grad, r.grad)


def test_einsum_errors():
    x = tt.zeros(2, 3)
    with pytest.raises(ValueError, match="ellipsis"):
        tt.einsum("......i->i", x)
    with pytest.raises(RuntimeError, match="broadcast"):
        tt.einsum("...i,...i->i", x, tt.zeros(4, 3))
    with pytest.raises(NotImplementedError, match="diagonal"):
        tt.einsum("ii->i", tt.zeros(2, 2))
    with pytest.raises(ValueError, match="operand"):
        tt.einsum("ij,jk->ik", x)


@pytest.mark.parametrize("diagonal", [-1, 0, 2])
def test_tril_triu(rng, diagonal):
    a = rng.standard_normal((2, 4, 5))
    for name in ("tril", "triu"):
        x = T(a).requires_grad_()
        r = torch.from_numpy(a).requires_grad_()
        y, ry = getattr(tt, name)(x, diagonal), getattr(torch, name)(r, diagonal)
        close(y, ry)
        close(getattr(x, name)(diagonal), ry)
        y.sum().backward()
        ry.sum().backward()
        close(x.grad, r.grad)
    np.testing.assert_array_equal(tt.tril(tt.ones(4, 4, dtype=tt.int64)).numpy(),
                                  torch.tril(torch.ones(4, 4, dtype=torch.long)).numpy())


def test_outer(rng):
    a, b = rng.standard_normal(5), rng.standard_normal(3)
    x, y = T(a, (2,)).requires_grad_(), T(b).requires_grad_()
    rx, ry = torch.from_numpy(a).requires_grad_(), torch.from_numpy(b).requires_grad_()
    out, ref = tt.outer(x, y), torch.outer(rx, ry)
    close(out, ref)
    close(x.outer(y), ref)
    close(tt.ger(x, y), ref)
    g = rng.standard_normal((5, 3))
    out.backward(T(g))
    ref.backward(torch.from_numpy(g))
    close(x.grad, rx.grad)
    close(y.grad, ry.grad)
    with pytest.raises(RuntimeError, match="1-D"):
        tt.outer(tt.zeros(2, 2), tt.zeros(2))


def test_true_division_of_integer_tensors():
    """int64 / number, number / int64, int64 / int64: the default float dtype, as torch;
    int64 / float32 tensor: float32."""
    try:
        for dt, rdt in ((tt.float32, torch.float32), (tt.float64, torch.float64)):
            tt.set_default_dtype(dt)
            torch.set_default_dtype(rdt)
            i, ri = tt.arange(0, 8, 2), torch.arange(0, 8, 2)
            j, rj = tt.arange(1, 5), torch.arange(1, 5)
            for ours, ref in ((i / 8, ri / 8), (3 / j, 3 / rj), (i / j, ri / rj),
                              (tt.div(i, 3), torch.div(ri, 3))):
                assert ours.dtype == np.dtype(str(ref.dtype).replace("torch.", ""))
                close(ours, ref)
        out = tt.arange(4) / tt.ones(4, dtype=tt.float32)
        assert out.dtype == np.float32
    finally:
        tt.set_default_dtype(tt.float32)
        torch.set_default_dtype(torch.float32)


def test_topk(rng):
    a = rng.standard_normal((4, 7))
    x, r = T(a).requires_grad_(), torch.from_numpy(a).requires_grad_()
    for k, dim, largest in [(3, -1, True), (2, 0, False), (7, 1, True)]:
        v, i = tt.topk(x, k, dim=dim, largest=largest)
        rv, ri = torch.topk(r, k, dim=dim, largest=largest)
        close(v, rv)
        np.testing.assert_array_equal(i.numpy(), ri.numpy())
    v, _ = x.topk(3)
    rv, _ = r.topk(3)
    (v * v).sum().backward()
    (rv * rv).sum().backward()
    close(x.grad, r.grad)
    with pytest.raises(RuntimeError, match="out of range"):
        tt.topk(x, 8)


def test_multinomial_generator():
    p = np.array([[0.1, 0.2, 0.7, 0.0], [0.25, 0.25, 0.25, 0.25]])
    x = T(p)
    a = tt.multinomial(x, 5, replacement=True, generator=tt.Generator().manual_seed(7)).numpy()
    b = tt.multinomial(x, 5, replacement=True, generator=tt.Generator().manual_seed(7)).numpy()
    assert a.dtype == np.int64 and a.shape == (2, 5)
    np.testing.assert_array_equal(a, b)  # reproducible for a seed
    assert (a[0] != 3).all()  # zero weight never drawn
    s = tt.multinomial(x, 3, generator=tt.Generator().manual_seed(1)).numpy()
    assert all(len(set(row)) == 3 for row in s) and (s[0] != 3).all()  # without replacement
    draws = tt.multinomial(T(p[0]), 20000, replacement=True, generator=tt.Generator().manual_seed(3)).numpy()
    freq = np.bincount(draws, minlength=4) / draws.size
    np.testing.assert_allclose(freq, p[0], atol=0.015)
    ref = torch.multinomial(torch.from_numpy(p[0]), 20000, replacement=True,
                            generator=torch.Generator().manual_seed(3)).numpy()
    np.testing.assert_allclose(freq, np.bincount(ref, minlength=4) / ref.size, atol=0.02)
    with pytest.raises(RuntimeError, match="without replacement"):
        tt.multinomial(x, 4)
    with pytest.raises(RuntimeError, match="element < 0"):
        tt.multinomial(T(np.array([0.5, -0.1])), 1)


def _setitem_cases(mod, x, mask, idx):
    x[0] = 1.5
    x[:, 2] = mod.arange(4, dtype=x.dtype) * 2.0
    x[1:3, ::2] = -3.0
    x[mask] = 9.0
    x[idx] = x[idx] * 0.5
    x[:, [0, -1]] = 4.25
    x[2, 1] = mod.tensor(7.0, dtype=x.dtype)
    x[..., 3] = mod.ones(4, dtype=x.dtype)
    return x


def test_setitem_matches_torch(rng):
    a = rng.standard_normal((4, 5))
    m = rng.random((4, 5)) > 0.6
    idx = np.array([3, 0])
    ours = _setitem_cases(tt, T(a.copy()), T(m), T(idx))
    ref = _setitem_cases(torch, torch.from_numpy(a.copy()), torch.from_numpy(m), torch.from_numpy(idx))
    close(ours, ref)
    # a view shares the tiles: it sees the assignment (as torch)
    base = T(np.zeros((2, 3)))
    view = base.detach()
    base[0, 1] = 5.0
    assert view.numpy()[0, 1] == 5.0
    # integer tensors
    t = tt.tensor([[1, 2, 3], [4, 5, 6]])
    t[t > 3] = 0
    t[:, 0] = 9
    np.testing.assert_array_equal(t.numpy(), [[9, 2, 3], [9, 0, 0]])


def test_setitem_converts_values():
    for mod in (tt, torch):
        x = mod.zeros(2, 3, dtype=mod.float64)
        x[:, 1] = mod.tensor([3, 4])        # int64 values into a float tensor
        x[0] = True
        y = mod.tensor([1, 2, 3])
        y[1] = mod.tensor(2.7, dtype=mod.float64)  # truncated toward zero
        b = mod.zeros(3) > 1
        b[1] = True
        if mod is tt:
            ours = (x.numpy(), y.numpy(), b.numpy())
        else:
            ref = (x.numpy(), y.numpy(), b.numpy())
    for o, r in zip(ours, ref):
        assert o.dtype == r.dtype
        np.testing.assert_array_equal(o, r)


def test_setitem_and_autograd(rng):
    w = tt.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        w[0] = 1.0
    with tt.no_grad():
        w[0] = 1.0  # allowed under no_grad, as torch
    np.testing.assert_array_equal(w.detach().numpy(), [1, 0, 0])
    grads = []
    for M in (tt, torch):  # into a tensor an op made: allowed, the gradient skips the assigned element
        v = M.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = v * 2
        y[1] = 0.0
        (y * y).sum().backward()
        grads.append(v.grad.numpy())
    np.testing.assert_array_equal(grads[0], grads[1])


def test_advanced_getitem(rng):
    a = rng.standard_normal((4, 6))
    x, r = T(a).requires_grad_(), torch.from_numpy(a).requires_grad_()
    m = a > 0.3
    for ours, ref in [(x[:, [-1]], r[:, [-1]]), (x[[2, 0]], r[[2, 0]]), (x[T(m)], r[torch.from_numpy(m)]),
                      (x[1, T(np.array([5, 1]))], r[1, torch.tensor([5, 1])])]:
        close(ours, ref)
    (x[:, [1, 1, 3]] ** 2).sum().backward()
    (r[:, [1, 1, 3]] ** 2).sum().backward()
    close(x.grad, r.grad)


# -- nn --------------------------------------------------------------------------------------

def _modules(mod):
    class Net(mod.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = mod.nn.ModuleDict({"fc": mod.nn.Linear(4, 5), "ln": mod.nn.LayerNorm(5)})
            self.head = mod.nn.Linear(5, 2, bias=False)
            self.register_buffer("mask", mod.tril(mod.ones(3, 3)), persistent=False)
            self.register_buffer("scale", mod.ones(2))

        def forward(self, x):
            return self.head(self.body["ln"](self.body["fc"](x))) * self.scale
    return Net()


def test_module_surface():
    ours, ref = _modules(tt), _modules(torch)
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in ref.named_modules()]
    assert sorted(ours.state_dict()) == sorted(ref.state_dict())  # mask is not persistent
    assert "mask" in dict(ours.named_buffers())
    seen = []
    ours.apply(lambda m: seen.append(type(m).__name__))
    ref_seen = []
    ref.apply(lambda m: ref_seen.append(type(m).__name__))
    assert seen == ref_seen
    assert ours.eval() is ours and not ours.body["fc"].training
    ours.train()
    assert ours.body.fc.training and len(ours.body) == 2 and "ln" in ours.body
    ours.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    out, rout = ours(tt.from_numpy(x)), ref(torch.from_numpy(x))
    close(out, rout, rtol=1e-5, atol=1e-6)
    out.sum().backward()
    ours.zero_grad(set_to_none=False)
    assert all(float(abs(p.grad).sum()) == 0 for p in ours.parameters())
    ours.zero_grad()
    assert all(p.grad is None for p in ours.parameters())


def test_nn_init_fan_rules():
    for shape in [(64, 48), (16, 8, 3, 3)]:
        w = tt.empty(*shape, dtype=tt.float64)
        fan_in = shape[1] * int(np.prod(shape[2:]))
        fan_out = shape[0] * int(np.prod(shape[2:]))
        for fn, bound in [(lambda t: nn.init.kaiming_uniform_(t, a=math.sqrt(5)),
                           torch.nn.init.calculate_gain("leaky_relu", math.sqrt(5)) * math.sqrt(3 / fan_in)),
                          (nn.init.xavier_uniform_, math.sqrt(6 / (fan_in + fan_out))),
                          (lambda t: nn.init.kaiming_uniform_(t, mode="fan_out", nonlinearity="relu"),
                           math.sqrt(2) * math.sqrt(3 / fan_out))]:
            a = fn(w).numpy()
            assert np.abs(a).max() <= bound and np.abs(a).max() > 0.9 * bound
            assert abs(a.std() - bound / math.sqrt(3)) < 0.1 * bound
    w = tt.empty(200, 100, dtype=tt.float64)
    a = nn.init.normal_(w, mean=1.0, std=0.02).numpy()
    assert abs(a.mean() - 1.0) < 1e-3 and abs(a.std() - 0.02) < 1e-3
    np.testing.assert_array_equal(nn.init.zeros_(w).numpy(), 0)
    np.testing.assert_array_equal(nn.init.ones_(w).numpy(), 1)
    for nl, p in [("relu", None), ("tanh", None), ("leaky_relu", 0.2), ("selu", None), ("linear", None)]:
        assert nn.init.calculate_gain(nl, p) == torch.nn.init.calculate_gain(nl, p)
    with pytest.raises(ValueError, match="fewer than 2"):
        nn.init.xavier_uniform_(tt.zeros(3))


def test_grad_modes_as_decorators():
    x = tt.ones(2, requires_grad=True)

    @tt.no_grad()
    def f(t):
        return t * 2

    @tt.inference_mode()
    def g(t):
        return t * 3

    assert not f(x).requires_grad and not g(x).requires_grad
    with tt.inference_mode():
        assert not (x * 2).requires_grad
    with tt.inference_mode(False):
        assert (x * 2).requires_grad
    assert (x * 2).requires_grad


def test_save_load(tmp_path):
    m = _modules(tt)
    opt = tt.optim.AdamW(m.parameters(), lr=0.1)
    m(tt.ones(2, 4)).sum().backward()
    opt.step()
    tt.save({"model": m.state_dict(), "opt": opt.state_dict(), "step": 3, "t": tt.arange(3.0)},
            tmp_path / "ckpt.pt")
    back = tt.load(tmp_path / "ckpt.pt")
    assert back["step"] == 3 and isinstance(back["t"], tt.Tensor)
    np.testing.assert_array_equal(back["t"].numpy(), [0, 1, 2])
    m2 = _modules(tt)
    m2.load_state_dict(back["model"])
    for (n, p), (n2, p2) in zip(m.named_parameters(), m2.named_parameters()):
        assert n == n2
        np.testing.assert_array_equal(p.detach().numpy(), p2.detach().numpy())
    opt2 = tt.optim.AdamW(m2.parameters(), lr=0.1)
    opt2.load_state_dict(back["opt"])
    assert opt2.state_dict()["state"].keys() == opt.state_dict()["state"].keys()
    import pickle
    with open(tmp_path / "evil.pt", "wb") as f:
        pickle.dump({"format": "tiletrain.save/1", "obj": print}, f)
    with pytest.raises(pickle.UnpicklingError, match="not allowed"):
        tt.load(tmp_path / "evil.pt")


# -- optim -----------------------------------------------------------------------------------

def test_clip_grad_norm_matches_torch(rng):
    arrays = [rng.standard_normal(s) for s in [(4, 3), (3,), (2, 2, 2)]]
    grads = [rng.standard_normal(a.shape) * 3 for a in arrays]
    ps = [nn.Parameter(a) for a in arrays]
    rps = [torch.nn.Parameter(torch.from_numpy(a)) for a in arrays]
    for p, rp, g in zip(ps, rps, grads):
        p.grad, rp.grad = T(g), torch.from_numpy(g.copy())
    n = tt.nn.utils.clip_grad_norm_((p for p in ps), 1.0)
    rn = torch.nn.utils.clip_grad_norm_(rps, 1.0)
    close(n, rn)
    for p, rp in zip(ps, rps):
        close(p.grad, rp.grad)
    assert float(tt.nn.utils.clip_grad_norm_([nn.Parameter(np.zeros(2))], 1.0)) == 0.0


@pytest.mark.parametrize("norm_type", [1, 3.5, float("inf"), float("-inf"), 0, 2.0])
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm_of_any_order_matches_torch(rng, norm_type, max_norm):
    """norm_type other than 2 (and 2 with error_if_nonfinite): torch's total norm and
    scaled gradients; a non-finite norm raises torch's error and leaves the gradients."""
    arrays = [rng.standard_normal(s) * 3 for s in [(4, 3), (3,), (2, 2, 2)]]
    out = []
    for m in (torch, tt):
        ps = [m.tensor(a.copy(), requires_grad=True) for a in arrays]
        for p, a in zip(ps, arrays):
            p.grad = m.tensor(a * 1.5)
        n = m.nn.utils.clip_grad_norm_(ps, max_norm, norm_type=norm_type, error_if_nonfinite=norm_type == 2.0)
        out.append((float(n), [p.grad.numpy().copy() for p in ps]))
    assert out[1][0] == pytest.approx(out[0][0], rel=1e-14)
    for a, b in zip(out[0][1], out[1][1]):
        np.testing.assert_allclose(b, a, rtol=1e-14, atol=1e-15)
    if norm_type > 0:  # an infinite gradient makes the norm infinite
        p = tt.tensor([1.0, 2.0], requires_grad=True)
        p.grad = tt.tensor([float("inf"), 1.0])
        with pytest.raises(RuntimeError, match="non-finite"):
            tt.nn.utils.clip_grad_norm_([p], 1.0, norm_type=norm_type, error_if_nonfinite=True)
        assert p.grad.numpy()[1] == 1.0


def _schedules(mod, name):
    p = [mod.nn.Parameter(mod.zeros(2, dtype=mod.float64)), mod.nn.Parameter(mod.zeros(3, dtype=mod.float64))]
    groups = [{"params": [p[0]]}, {"params": [p[1]], "lr": 0.05}]
    S = mod.optim.lr_scheduler
    opt = (mod.optim.SGD(groups, lr=0.1, momentum=0.9) if name != "onecycle_adam"
           else mod.optim.AdamW(groups, lr=0.1))
    make = {
        "lambda": lambda: S.LambdaLR(opt, lambda e: 0.9 ** e),
        "lambda_list": lambda: S.LambdaLR(opt, [lambda e: 1 / (e + 1), lambda e: e * 0.5]),
        "step": lambda: S.StepLR(opt, step_size=3, gamma=0.5),
        "cosine": lambda: S.CosineAnnealingLR(opt, T_max=7, eta_min=0.001),
        "linear": lambda: S.LinearLR(opt),
        "linear_args": lambda: S.LinearLR(opt, start_factor=0.1, end_factor=0.7, total_iters=4),
        "sequential": lambda: S.SequentialLR(opt, [S.LinearLR(opt, start_factor=0.2, total_iters=3),
                                                   S.CosineAnnealingLR(opt, T_max=10)], milestones=[4]),
        "onecycle": lambda: S.OneCycleLR(opt, max_lr=[1.0, 0.5], total_steps=20),
        "onecycle_adam": lambda: S.OneCycleLR(opt, max_lr=0.3, epochs=4, steps_per_epoch=5, pct_start=0.25,
                                              anneal_strategy="linear", three_phase=True),
    }[name]
    s = make()
    out = [s.get_last_lr()]
    moms = []
    for _ in range(19):
        opt.step()
        s.step()
        out.append(s.get_last_lr())
        g = opt.param_groups[0]
        moms.append(g.get("betas", (g.get("momentum"),))[0])
    return out, moms


@pytest.mark.parametrize("name", ["lambda", "lambda_list", "step", "cosine", "linear", "linear_args",
                                  "sequential", "onecycle", "onecycle_adam"])
def test_lr_schedulers_match_torch(name):
    ours, ref = _schedules(tt, name), _schedules(torch, name)
    assert ours == ref  # the same recurrences: bit-for-bit


def test_optimizer_groups_and_state_dict(rng):
    a, b = rng.standard_normal((3, 4)), rng.standard_normal(4)
    g1, g2 = rng.standard_normal((3, 4)), rng.standard_normal(4)

    def run(mod, steps, state=None):
        p = [mod.nn.Parameter(mod.tensor(a)), mod.nn.Parameter(mod.tensor(b))]
        opt = mod.optim.AdamW([{"params": [p[0]], "weight_decay": 0.1}, {"params": [p[1]], "lr": 0.01}],
                              lr=0.05, weight_decay=0.0)
        if state is not None:
            opt.load_state_dict(state)
            for q, v in zip(p, state["_values"]):
                with mod.no_grad():
                    q.copy_(mod.tensor(v))
        for _ in range(steps):
            p[0].grad, p[1].grad = mod.tensor(g1), mod.tensor(g2)
            opt.step()
        sd = opt.state_dict()
        sd["_values"] = [q.detach().numpy() for q in p]
        return [q.detach().numpy() for q in p], sd

    full, _ = run(tt, 4)
    ref, _ = run(torch, 4)
    for x, y in zip(full, ref):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12)
    p = [nn.Parameter(np.zeros(2)), nn.Parameter(np.zeros(3))]
    opt = tt.optim.SGD([p[0]], lr=0.1)
    opt.add_param_group({"params": p[1], "lr": 0.5})
    ref = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    ref.add_param_group({"params": torch.nn.Parameter(torch.zeros(3)), "lr": 0.5})
    assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in ref.param_groups]
    with pytest.raises(ValueError, match="more than one"):
        opt.add_param_group({"params": [p[0]]})
    _, half = run(tt, 2)
    assert [g["weight_decay"] for g in half["param_groups"]] == [0.1, 0.0]
    assert [g["lr"] for g in half["param_groups"]] == [0.05, 0.01]
    resumed, _ = run(tt, 2, state={k: v for k, v in half.items()})
    for x, y in zip(resumed, full):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12)


# -- utils.data --------------------------------------------------------------------------------

def test_dataloader(rng):
    x, y = rng.standard_normal((10, 3)), rng.integers(0, 5, 10)
    ds, rds = tt.utils.data.TensorDataset(x, y), torch.utils.data.TensorDataset(torch.from_numpy(x),
                                                                                 torch.from_numpy(y))
    ours = list(tt.utils.data.DataLoader(ds, batch_size=4))
    ref = list(torch.utils.data.DataLoader(rds, batch_size=4))
    assert len(ours) == len(ref) == 3
    for (a, b), (ra, rb) in zip(ours, ref):
        close(a, ra)
        np.testing.assert_array_equal(b.numpy(), rb.numpy())
        assert b.dtype == np.int64
    assert len(tt.utils.data.DataLoader(ds, batch_size=4, drop_last=True)) == 2
    assert len(list(tt.utils.data.DataLoader(ds, batch_size=4, drop_last=True))) == 2

    def order(seed):
        dl = tt.utils.data.DataLoader(ds, batch_size=3, shuffle=True, generator=tt.Generator().manual_seed(seed),
                                      collate_fn=lambda batch: [float(s[0][0]) for s in batch])
        return [v for batch in dl for v in batch]
    assert order(1) == order(1) and order(1) != order(2)
    assert sorted(order(1)) == sorted(x[:, 0].tolist())

    class Squares(tt.utils.data.Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return {"x": np.full(2, float(i)), "n": i}
    batch = next(iter(tt.utils.data.DataLoader(Squares(), batch_size=5)))
    np.testing.assert_array_equal(batch["n"].numpy(), np.arange(5))
    assert batch["x"].shape == (5, 2)
    with pytest.raises(NotImplementedError, match="num_workers"):
        tt.utils.data.DataLoader(ds, num_workers=2)
    a, b = tt.utils.data.random_split(ds, [7, 3], generator=tt.Generator().manual_seed(0))
    assert (len(a), len(b)) == (7, 3)
    firsts = [float(a[i][0][0]) for i in range(7)] + [float(b[i][0][0]) for i in range(3)]
    assert sorted(firsts) == sorted(x[:, 0])  # a partition of the dataset
    assert [len(s) for s in tt.utils.data.random_split(ds, [0.5, 0.5])] == [5, 5]


def test_cross_entropy_label_smoothing_edges():
    """label_smoothing with 1-D logits (a 0-d target), every target ignored (nan, as torch),
    eps = 1: torch's values."""
    import torch.nn.functional as TF
    x = np.random.default_rng(2).standard_normal((3, 4))
    for logits, target, kw in ((x[0], np.array(2), {}), (x, np.array([-100, -100, -100]), {}),
                               (x, np.array([1, -100, 3]), {"reduction": "sum"}),
                               (x, np.array([1, 0, 3]), {"reduction": "none"})):
        for eps in (0.3, 1.0):
            ours = F.cross_entropy(T(logits), tt.tensor(target), label_smoothing=eps, **kw)
            ref = TF.cross_entropy(torch.from_numpy(logits), torch.from_numpy(target), label_smoothing=eps, **kw)
            np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-12, atol=1e-12, equal_nan=True)


def test_layer_norm_and_rms_norm_modules_match_torch():
    """nn.LayerNorm / nn.RMSNorm with torch's arguments (normalized_shape an int or a tuple,
    elementwise_affine, bias, RMSNorm's eps=None): the same state-dict entries, values and
    gradients."""
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 5))
    cases = [((5,), {}), ((4, 5), {}), (5, {"elementwise_affine": False}), ((4, 5), {"bias": False, "eps": 1e-3})]
    try:
        tt.set_default_dtype(tt.float64)
        torch.set_default_dtype(torch.float64)
        for name in ("LayerNorm", "RMSNorm"):
            for shape, kw in cases:
                if name == "RMSNorm":
                    kw = {k: v for k, v in kw.items() if k != "bias"}
                ours, ref = getattr(nn, name)(shape, **kw), getattr(torch.nn, name)(shape, **kw)
                assert sorted(ours.state_dict()) == sorted(ref.state_dict())
                w = np.random.default_rng(4).standard_normal(ref.weight.shape) if ref.weight is not None else None
                if w is not None:
                    with torch.no_grad():
                        ref.weight.copy_(torch.from_numpy(w))
                    ours.load_state_dict({k: tt.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
                X, rX = T(x, (1, 2, 3, 2)).requires_grad_(), torch.from_numpy(x).requires_grad_()
                y, ry = ours(X), ref(rX)
                close(y, ry, rtol=1e-12, atol=1e-12)
                g = np.cos(x)
                y.backward(T(g))
                ry.backward(torch.from_numpy(g))
                close(X.grad, rX.grad, rtol=1e-10, atol=1e-12)
                if w is not None:
                    close(ours.weight.grad, ref.weight.grad, rtol=1e-10, atol=1e-12)
    finally:
        tt.set_default_dtype(tt.float32)
        torch.set_default_dtype(torch.float32)
    with pytest.raises(TypeError, match="normalized_shape must be a positive int"):
        nn.LayerNorm(0)


def test_embedding_module_init_and_padding_idx():
    """nn.Embedding as torch's: N(0, 1) initial values, padding_idx's row zero and never
    updated (its positions give the table no gradient)."""
    emb = nn.Embedding(400, 50, padding_idx=-2, dtype=np.float64)
    w = emb.weight.detach().numpy()
    assert emb.padding_idx == 398 and (w[398] == 0).all() and "padding_idx=398" in repr(emb)
    assert abs(w.std() - 1.0) < 0.02 and abs(w.mean()) < 0.02  # torch's default N(0, 1)
    ids = np.array([[1, 398, 7], [398, 398, 2]])
    emb(ids).sum().backward()
    g = emb.weight.grad.numpy()
    assert (g[398] == 0).all() and (g[1] == 1).all() and (g[0] == 0).all()
    with pytest.raises(ValueError, match="padding_idx must be within num_embeddings"):
        nn.Embedding(4, 2, padding_idx=4)
    with pytest.raises(NotImplementedError, match="scale_grad_by_freq and sparse"):
        F.embedding(tt.tensor([0]), emb.weight, sparse=True)


def test_relu_silu_accept_inplace():
    """F.relu / F.silu take torch's inplace flag; the result is returned (a new tensor, as
    nn.ReLU(inplace=True))."""
    a = np.array([-1.5, 0.0, 2.0])
    for name in ("relu", "silu"):
        for inplace in (False, True):
            close(getattr(F, name)(T(a), inplace=inplace), getattr(torch.nn.functional, name)(torch.from_numpy(a)))
        with pytest.raises(TypeError, match=f"{name}: inplace must be a bool"):
            getattr(F, name)(T(a), 1)


def test_adaptive_avg_pool_modules():
    """nn.AdaptiveAvgPool2d((1, 1)) + torch.flatten(x, 1), as ResNet's head: torch's values;
    sizes that are not multiples of the output's pool torch's unequal windows."""
    x = np.random.default_rng(5).standard_normal((2, 3, 6, 4))
    close(tt.flatten(nn.AdaptiveAvgPool2d((1, 1))(T(x)), 1),
          torch.flatten(torch.nn.AdaptiveAvgPool2d((1, 1))(torch.from_numpy(x)), 1))
    close(nn.AdaptiveAvgPool2d(2)(T(x)), torch.nn.AdaptiveAvgPool2d(2)(torch.from_numpy(x)))
    close(nn.AdaptiveAvgPool3d((1, 2, 2))(T(x)), torch.nn.AdaptiveAvgPool3d((1, 2, 2))(torch.from_numpy(x)))
    close(F.adaptive_avg_pool2d(T(x), 4), torch.nn.functional.adaptive_avg_pool2d(torch.from_numpy(x), 4))
    with pytest.raises(ValueError, match="output_size must be a positive int"):
        F.adaptive_avg_pool2d(T(x), (1, 0))


def test_torch_constants():
    """torch.pi, torch.e, torch.inf, torch.nan and torch.newaxis, as physics-informed and
    masking code uses them."""
    import math

    import torch
    for name in ("pi", "e", "inf"):
        assert getattr(tt, name) == getattr(torch, name)
    assert math.isnan(tt.nan) and tt.newaxis is torch.newaxis is None
    x = tt.linspace(0, 1, 5, dtype=tt.float64)
    ref = torch.sin(torch.pi * torch.linspace(0, 1, 5, dtype=torch.float64))
    np.testing.assert_allclose(tt.sin(tt.pi * x).numpy(), ref.numpy(), rtol=1e-15, atol=1e-15)
    assert x[:, tt.newaxis].shape == (5, 1)
