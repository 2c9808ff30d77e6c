"""tiletrain.nn.Module, Parameter and the basic layers."""
import numpy as np
import pytest

import tiletrain as tt
from tiletrain import nn


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.b = nn.Parameter(np.zeros(3))
        self.first = nn.Linear(3, 4, tiles=(3, 2), dtype=np.float64, rng=np.random.default_rng(0))
        self.a = nn.Parameter(np.ones(2))
        self.note = "not registered"
        self.plain = tt.from_numpy(np.ones(2)).requires_grad_()  # a Tensor, not a Parameter
        self.blocks = nn.ModuleList([nn.LayerNorm(4, tile=3, dtype=np.float64),
                                     nn.LayerNorm(4, bias=False, tile=3, dtype=np.float64)])

    def forward(self, x):
        return self.blocks[1](self.blocks[0](self.first(x)))


def test_parameter_is_a_tensor_that_requires_grad():
    p = nn.Parameter(np.arange(6.0).reshape(2, 3), tiles=(1, 2))
    assert isinstance(p, tt.Tensor) and isinstance(p, nn.Parameter)
    assert p.requires_grad and p.is_leaf and p.grad is None
    assert p.tiles == (1, 2) and p.dtype == np.float64
    np.testing.assert_array_equal(p.detach().numpy(), np.arange(6.0).reshape(2, 3))
    t = tt.from_numpy(np.ones((2, 2), np.float32))
    q = nn.Parameter(t)  # shares t's tiles
    assert q.shape == (2, 2) and q.dtype == np.float32
    import torch
    assert repr(q) == repr(torch.nn.Parameter(torch.ones(2, 2)))
    frozen = nn.Parameter(t, False)  # torch's Parameter(data, requires_grad)
    assert not frozen.requires_grad and repr(frozen) == "Parameter containing:\n" + repr(t)
    del t
    np.testing.assert_array_equal(q.detach().numpy(), np.ones((2, 2)))
    with pytest.raises(TypeError, match="float32 or float64"):
        nn.Parameter(np.arange(3))
    with pytest.raises(TypeError, match="Tensor or a numpy"):
        nn.Parameter([1.0, 2.0])
    with pytest.raises(ValueError, match="already has tiles"):
        nn.Parameter(tt.from_numpy(np.ones(4), 2), tiles=4)


def test_registration_order_names_and_modules():
    m = Toy()
    names = [n for n, _ in m.named_parameters()]
    # own parameters first (in assignment order), then submodules in assignment order
    assert names == ["b", "a", "first.weight", "first.bias", "blocks.0.weight", "blocks.0.bias",
                     "blocks.1.weight"]
    assert [p for p in m.parameters()] == [p for _, p in m.named_parameters()]
    assert [n for n, _ in m.named_modules()] == ["", "first", "blocks", "blocks.0", "blocks.1"]
    assert list(m.modules())[1] is m.first
    assert [n for n, _ in m.named_children()] == ["first", "blocks"]
    assert [n for n, _ in m.named_parameters(recurse=False)] == ["b", "a"]
    assert m.num_parameters() == 3 + 2 + 12 + 4 + 4 + 4 + 4
    # re-assigning replaces, a non-parameter value unregisters, del removes
    m.a = nn.Parameter(np.ones(5))
    assert dict(m.named_parameters())["a"].shape == (5,)
    m.a = None
    assert "a" not in dict(m.named_parameters()) and m.a is None
    del m.first
    assert [n for n, _ in m.named_children()] == ["blocks"]


def test_assigning_before_init_is_a_clear_error():
    class Bad(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(np.ones(2))

    with pytest.raises(AttributeError, match="before Module.__init__"):
        Bad()


def test_tied_parameters_listed_once_saved_under_both_names():
    m = nn.Module()
    m.enc = nn.Embedding(5, 3, rng=np.random.default_rng(0))
    m.dec = nn.Module()
    m.dec.weight = m.enc.weight
    assert [n for n, _ in m.named_parameters()] == ["enc.weight"]
    assert [n for n, _ in m.named_parameters(remove_duplicate=False)] == ["enc.weight", "dec.weight"]
    sd = m.state_dict()
    assert list(sd) == ["enc.weight", "dec.weight"] and sd["enc.weight"] is sd["dec.weight"]


def test_train_eval_and_zero_grad(rng):
    m = Toy()
    assert m.training and m.blocks[0].training
    m.eval()
    assert not any(x.training for x in m.modules())
    m.train()
    assert all(x.training for x in m.modules())
    with pytest.raises(TypeError, match="bool"):
        m.train("no")
    x = tt.from_numpy(rng.standard_normal((5, 3)), (2, 2))
    tt.sum(m(x)).backward()
    assert m.first.weight.grad is not None
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())


def test_load_state_dict_from_torch_tensors_and_dtype_conversion(rng):
    import torch
    m = Toy()
    sd = {k: torch.tensor(rng.standard_normal(v.shape), dtype=torch.float32, requires_grad=True)
          for k, v in m.state_dict().items()}
    m.load_state_dict(sd)
    for k, v in m.state_dict().items():
        assert v.dtype == np.float64  # the parameter's dtype is kept
        np.testing.assert_array_equal(v, sd[k].detach().numpy().astype(np.float64))


def test_linear_layernorm_embedding_against_numpy(rng):
    lin = nn.Linear(5, 7, tiles=(3, 2), dtype=np.float64, rng=rng)
    assert lin.weight.shape == (7, 5) and lin.weight.tiles == (3, 2) and lin.bias.tiles == (3,)
    bound = 1 / np.sqrt(5)  # torch's default init: U(-1/sqrt(in), 1/sqrt(in))
    assert np.abs(lin.weight.detach().numpy()).max() <= bound and np.abs(lin.bias.detach().numpy()).max() <= bound
    import torch
    torch.manual_seed(0)   # the reference's weights (not whatever earlier tests left the generator at)
    ref = torch.nn.Linear(5, 7, dtype=torch.float64)
    lin.load_state_dict(ref.state_dict())  # torch's state dict loads as it is
    x = rng.standard_normal((3, 4, 5))
    y = lin(tt.from_numpy(x, (2, 3, 2))).detach().numpy()
    np.testing.assert_allclose(y, ref(torch.from_numpy(x)).detach().numpy(), rtol=1e-12)
    assert nn.Linear(5, 7, bias=False).bias is None
    hf = nn.Conv1D(7, 5, tiles=(2, 3), dtype=np.float64, rng=rng)  # GPT-2's layout: weight (in, out)
    assert hf.weight.shape == (5, 7) and hf.weight.tiles == (2, 3) and hf.bias.tiles == (3,)
    np.testing.assert_allclose(hf(tt.from_numpy(x, (2, 3, 2))).detach().numpy(), x @ hf.weight.detach().numpy(), rtol=1e-12)

    ln = nn.LayerNorm(6, tile=4, dtype=np.float64)
    ln.load_state_dict({"weight": rng.standard_normal(6), "bias": rng.standard_normal(6)})
    x = rng.standard_normal((3, 6))
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    want = (x - mu) / np.sqrt(var + 1e-5) * ln.weight.detach().numpy() + ln.bias.detach().numpy()
    np.testing.assert_allclose(ln(tt.from_numpy(x, (2, 4))).detach().numpy(), want, rtol=1e-10)

    emb = nn.Embedding(9, 4, tiles=(4, 4), dtype=np.float64, rng=rng)
    ids = rng.integers(0, 9, (2, 5))
    np.testing.assert_array_equal(emb(ids).detach().numpy(), emb.weight.detach().numpy()[ids])
    np.testing.assert_array_equal(emb(tt.from_numpy(ids)).detach().numpy(), emb.weight.detach().numpy()[ids])
    with pytest.raises(TypeError, match="integers"):
        emb(np.zeros((2, 2)))


def test_dropout_module(rng):
    d = nn.Dropout(0.5)
    x = tt.from_numpy(np.ones((64, 64)))
    y = d(x).numpy()
    assert set(np.unique(y)) <= {0.0, 2.0} and 0.3 < (y == 0).mean() < 0.7
    d.eval()
    assert d(x) is x
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        nn.Dropout(1.0)


def test_module_dict_and_list():
    d = nn.ModuleDict(dict(a=nn.LayerNorm(2), b=nn.LayerNorm(3)))
    assert list(d) == ["a", "b"] and d["b"].n == 3 and d.a is d["a"] and "a" in d and len(d) == 2
    assert [n for n, _ in d.named_parameters()] == ["a.weight", "a.bias", "b.weight", "b.bias"]
    with pytest.raises(TypeError, match="Module"):
        d["c"] = 3
    lst = nn.ModuleList()
    lst.append(nn.LayerNorm(2)).append(nn.LayerNorm(2))
    assert len(lst) == 2 and lst[-1] is list(lst)[1]
    with pytest.raises(TypeError, match="Module"):
        lst.append("x")
    with pytest.raises(NotImplementedError):
        nn.Module()(1)
