"""tiletrain.func against torch.func in float64: each case runs the same code with ``m`` = torch
and ``m`` = tiletrain on the same inputs and compares the results (values to 1e-10, shapes, the
tree of tuples/lists/dicts around them, whether they require grad); the error cases check
that tiletrain raises the exception type torch raises."""
import numpy as np
import pytest
import torch

import tiletrain as tt

RNG = np.random.default_rng(0)
A, B = RNG.standard_normal(3), RNG.standard_normal((2, 3))
X4, W3 = RNG.standard_normal((4, 3)), RNG.standard_normal((3, 3))
XB, YB, TB = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 2)), RNG.integers(0, 2, size=4)
MLP = {"fc1.weight": RNG.standard_normal((5, 3)), "fc1.bias": RNG.standard_normal(5),
       "head.out.weight": RNG.standard_normal((2, 5)), "head.out.bias": RNG.standard_normal(2)}


def _t(m, a):
    return m.tensor(np.asarray(a))


def _mlp(m):
    """A small MLP with a nested submodule (parameter names fc1.weight, head.out.bias, ...)
    and a buffer (a scale on the output)."""
    class Head(m.nn.Module):
        def __init__(self):
            super().__init__()
            self.out = m.nn.Linear(5, 2, dtype=m.float64)

        def forward(self, h):
            return self.out(h)

    class Net(m.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = m.nn.Linear(3, 5, dtype=m.float64)
            self.head = Head()
            self.register_buffer("scale", m.ones(2, dtype=m.float64))

        def forward(self, x):
            return self.head(m.tanh(self.fc1(x))) * self.scale

    return Net()


def _params(m):
    return {k: _t(m, v) for k, v in MLP.items()}


def _compare(ref, ours, where="result"):
    if isinstance(ref, torch.Tensor):
        assert isinstance(ours, tt.Tensor), f"{where}: {type(ours).__name__}, torch returns a Tensor"
        assert tuple(ours.shape) == tuple(ref.shape), f"{where}: shape {ours.shape}, torch {tuple(ref.shape)}"
        assert ours.requires_grad == ref.requires_grad, f"{where}: requires_grad {ours.requires_grad}"
        np.testing.assert_allclose(ours.detach().numpy(), ref.detach().numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=where)
    elif isinstance(ref, dict):
        assert type(ours) is dict and list(ours) == list(ref), f"{where}: {ours!r} against torch's keys {list(ref)}"
        for k in ref:
            _compare(ref[k], ours[k], f"{where}[{k!r}]")
    elif isinstance(ref, (tuple, list)):
        assert type(ours) is type(ref) and len(ours) == len(ref), f"{where}: {type(ours).__name__} of {len(ours)}"
        for i, (u, v) in enumerate(zip(ref, ours)):
            _compare(u, v, f"{where}[{i}]")
    else:
        assert ours == ref, where


def _scalar(m):
    return lambda x, w: (m.tanh(w @ x) * x[:2]).sum() + (x ** 3).sum()


def _pair(m):
    return lambda x, w: (m.tanh(w @ x), {"s": w.sum(0) * x, "n": [m.sin(x).sum()]})


def _per_sample_grads(m):
    model = _mlp(m)

    def loss(p, x, y):
        return m.nn.functional.mse_loss(m.func.functional_call(model, p, (x.unsqueeze(0),)), y.unsqueeze(0))
    return m.func.vmap(m.func.grad(loss), in_dims=(None, 0, 0))(_params(m), _t(m, XB), _t(m, YB))


def _per_sample_grads_live_params(m):
    """dict(model.named_parameters()) as they are (requiring grad): the gradients keep a graph."""
    model = _mlp(m)
    params = {k: v.requires_grad_() for k, v in _params(m).items()}

    def loss(p, x, y):
        return ((m.func.functional_call(model, p, x.unsqueeze(0)) - y) ** 2).sum()
    return m.func.vmap(m.func.grad(loss), in_dims=(None, 0, 0))(params, _t(m, XB), _t(m, YB))


def _grad_under_no_grad(m):
    with m.no_grad():
        return m.func.grad(lambda x: (m.sin(x) * x).sum())(_t(m, A))


def _per_sample_cross_entropy(m):
    model = _mlp(m)

    def loss(p, x, t):
        logits = m.func.functional_call(model, p, x.unsqueeze(0))
        return m.nn.functional.cross_entropy(logits, t.unsqueeze(0)), logits.sum()
    return m.func.vmap(m.func.grad_and_value(loss, has_aux=True), in_dims=(None, 0, 0))(
        _params(m), _t(m, XB), _t(m, TB))


def _vjp_twice(m):
    out, vjp_fn = m.func.vjp(_pair(m), _t(m, A), _t(m, B))
    cotangents = (_t(m, A[:2]), {"s": _t(m, A), "n": [_t(m, 2.0)]})
    return out, vjp_fn(cotangents), vjp_fn(cotangents)


def _nested(m):
    p = {"layer": {"w": _t(m, W3), "b": _t(m, A)}, "out": [_t(m, A)]}
    return lambda p, x: ((m.tanh(p["layer"]["w"] @ x + p["layer"]["b"]) * p["out"][0]).sum()), p


CASES = {
    "functional_call": lambda m: m.func.functional_call(_mlp(m), _params(m), (_t(m, XB),)),
    "functional_call_two_dicts_kwargs": lambda m: m.func.functional_call(
        _mlp(m), ({k: v for k, v in _params(m).items() if k.startswith("fc1")},
                  {**{k: v for k, v in _params(m).items() if k.startswith("head")}, "scale": _t(m, A[:2])}),
        kwargs={"x": _t(m, XB)}),
    "per_sample_grads_mse": _per_sample_grads,
    "per_sample_grads_cross_entropy_aux": _per_sample_cross_entropy,
    "per_sample_grads_live_params": _per_sample_grads_live_params,
    "grad_under_no_grad": _grad_under_no_grad,
    "grad": lambda m: m.func.grad(_scalar(m))(_t(m, A), _t(m, W3[:2])),
    "grad_argnums_tuple": lambda m: m.func.grad(_scalar(m), argnums=(0, 1))(_t(m, A), _t(m, W3[:2])),
    "grad_argnums_negative": lambda m: m.func.grad(_scalar(m), argnums=-1)(_t(m, A), _t(m, W3[:2])),
    "grad_nested_dict": lambda m: m.func.grad(_nested(m)[0])(_nested(m)[1], _t(m, A)),
    "grad_unused_is_zero": lambda m: m.func.grad(lambda x, y: (x * x).sum(), argnums=(0, 1))(_t(m, A), _t(m, A)),
    "grad_has_aux": lambda m: m.func.grad(lambda x: ((x * x).sum(), {"y": m.sin(x)}), has_aux=True)(_t(m, A)),
    "grad_and_value": lambda m: m.func.grad_and_value(_scalar(m), argnums=(0, 1))(_t(m, A), _t(m, W3[:2])),
    "vjp_called_twice": _vjp_twice,
    "vjp_has_aux_dict_primal": lambda m: (lambda r: (r[0], r[1](_t(m, A)), r[2]))(m.func.vjp(
        lambda d: (m.sin(d["a"]) * d["b"], d["a"] * 2), {"a": _t(m, A), "b": _t(m, A[::-1].copy())}, has_aux=True)),
    "jvp": lambda m: m.func.jvp(_pair(m), (_t(m, A), _t(m, B)), (_t(m, A[::-1].copy()), _t(m, B * 2))),
    "jvp_has_aux": lambda m: m.func.jvp(lambda x: (m.sin(x) * x.sum(), x * 3), (_t(m, A),), (_t(m, A),),
                                        has_aux=True),
    "jacrev_argnums_tuple": lambda m: m.func.jacrev(_pair(m), argnums=(0, 1))(_t(m, A), _t(m, B)),
    "jacfwd_argnums_tuple": lambda m: m.func.jacfwd(_pair(m), argnums=(0, 1))(_t(m, A), _t(m, B)),
    "jacrev_has_aux": lambda m: m.func.jacrev(lambda x: (m.sin(x) * x.sum(), {"a": x ** 2}), has_aux=True)(_t(m, A)),
    "jacfwd_dict_input": lambda m: m.func.jacfwd(lambda d: m.tanh(d["w"] @ d["x"]))({"w": _t(m, B), "x": _t(m, A)}),
    "jacrev_scalar_input": lambda m: m.func.jacrev(lambda s: m.sin(_t(m, A) * s))(_t(m, 0.7)),
    "hessian": lambda m: m.func.hessian(lambda x: (m.sin(x) * x.sum()).sum())(_t(m, A)),
    "hessian_argnums_tuple": lambda m: m.func.hessian(_scalar(m), argnums=(0, 1))(_t(m, A), _t(m, B)),
    "hessian_vector_function": lambda m: m.func.hessian(lambda x: m.sin(x) * x.sum())(_t(m, A)),
    "jacrev_of_grad": lambda m: m.func.jacrev(m.func.grad(lambda x: (m.tanh(x) * x.sum()).sum()))(_t(m, A)),
    "vmap_in_dims_int": lambda m: m.func.vmap(lambda x: m.sin(x) * x.sum())(_t(m, X4)),
    "vmap_in_dims_negative": lambda m: m.func.vmap(lambda x: m.sin(x) * x.sum(), in_dims=-1)(_t(m, X4)),
    "vmap_in_dims_none": lambda m: m.func.vmap(lambda x, w: w @ x, in_dims=(0, None))(_t(m, X4), _t(m, W3)),
    "vmap_in_dims_tuple_nested": lambda m: m.func.vmap(
        lambda d, s: d["x"] * d["w"][0] + s, in_dims=({"x": 1, "w": None}, 0))(
        {"x": _t(m, X4.T.copy()), "w": _t(m, A)}, _t(m, A[:1].repeat(4))),
    "vmap_kwargs_unmapped": lambda m: m.func.vmap(lambda x, *, w: w @ x)(_t(m, X4), w=_t(m, W3)),
    "vmap_out_dims": lambda m: m.func.vmap(lambda x: (x * 2, {"k": x.sum(), "u": m.outer(x, x)}),
                                           out_dims=(1, {"k": 0, "u": -1}))(_t(m, X4)),
    "vmap_out_dims_none": lambda m: m.func.vmap(lambda x, w: (x * w, w), in_dims=(0, None), out_dims=(0, None))(
        _t(m, X4), _t(m, A)),
    "vmap_nested": lambda m: m.func.vmap(m.func.vmap(lambda a, b: a * b, in_dims=(0, None)), in_dims=(None, 0))(
        _t(m, A), _t(m, X4)),
    "vmap_jacrev": lambda m: m.func.vmap(m.func.jacrev(lambda x: m.sin(x) * x.sum()))(_t(m, X4)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_func_equals_torch(name):
    _compare(CASES[name](torch), CASES[name](tt))


def _backward_through(m):
    """Gradients of a loss of transform results, with respect to inputs that require grad:
    through vmap (mapped and unmapped inputs), grad (double backward) and functional_call."""
    x, w = _t(m, X4).requires_grad_(), _t(m, W3).requires_grad_()
    y = m.func.vmap(lambda r, w: m.tanh(w @ r), in_dims=(0, None))(x, w)
    g = m.func.grad(lambda v: (m.sin(v) * v).sum())(w)
    params = {k: v.requires_grad_() for k, v in _params(m).items()}
    out = m.func.functional_call(_mlp(m), params, (_t(m, XB),))
    loss = (y * y).sum() + (g * g).sum() + (out ** 2).sum()
    return m.autograd.grad(loss, [x, w] + list(params.values()))


def test_gradients_flow_through_the_transforms():
    _compare(_backward_through(torch), _backward_through(tt))


def test_functional_call_restores_the_module():
    """Inside the call the module's parameters and buffers are the given tensors (forward,
    parameters()); afterwards the originals, in their order, also when forward raises."""
    for m in (torch, tt):
        model = _mlp(m)
        before, scale = dict(model.named_parameters()), model.scale
        given = {**_params(m), "scale": _t(m, A[:2])}
        seen = {}

        def spy(x):
            seen["params"] = all(p is given[n] for n, p in model.named_parameters())
            seen["attrs"] = model.fc1.weight is given["fc1.weight"] and model.scale is given["scale"]
            raise ZeroDivisionError
        model.forward = spy
        with pytest.raises(ZeroDivisionError):
            m.func.functional_call(model, given, (_t(m, XB),))
        assert seen == {"params": True, "attrs": True}, m.__name__
        after = list(model.named_parameters())
        assert [n for n, _ in after] == list(before), m.__name__
        assert all(p is before[n] for n, p in after) and model.fc1.weight is before["fc1.weight"], m.__name__
        assert model.scale is scale and [n for n, _ in model.named_buffers()] == ["scale"], m.__name__


def _tied(m):
    """Two linear layers sharing one weight (W3.T, set explicitly)."""
    model = m.nn.Sequential(m.nn.Linear(3, 3, dtype=m.float64), m.nn.Tanh(), m.nn.Linear(3, 3, dtype=m.float64))
    model[0].weight = m.nn.Parameter(_t(m, W3.T.copy()))
    model[2].weight = model[0].weight
    return model


TIED = {
    "tied": lambda m: m.func.functional_call(_tied(m), {"0.weight": _t(m, W3), "0.bias": _t(m, A), "2.bias": _t(m, A)},
                                             _t(m, X4)),
    "tied_same_tensor_twice": lambda m: (lambda w: m.func.functional_call(
        _tied(m), {"0.weight": w, "2.weight": w, "0.bias": _t(m, A), "2.bias": _t(m, A)}, _t(m, X4)))(_t(m, W3)),
    "untied": lambda m: m.func.functional_call(_tied(m), {"0.weight": _t(m, W3), "0.bias": _t(m, A),
                                                          "2.bias": _t(m, A)}, _t(m, X4), tie_weights=False),
}


@pytest.mark.parametrize("name", sorted(TIED))
def test_functional_call_tie_weights(name):
    _compare(TIED[name](torch), TIED[name](tt))


def test_tie_weights_changes_the_result():
    """The tied and untied calls differ (the second layer's weight is W3 or its own W3.T)."""
    assert not np.allclose(TIED["tied"](tt).detach().numpy(), TIED["untied"](tt).detach().numpy())


def _is_random_per_sample(m, randomness):
    m.manual_seed(0)
    out = m.func.vmap(lambda x: x + m.rand(3, dtype=m.float64), randomness=randomness)(m.zeros(4, 3,
                                                                                               dtype=m.float64))
    rows = out.detach().numpy()
    return bool(np.allclose(rows, rows[:1]))


@pytest.mark.parametrize("randomness", ["same", "different"])
def test_vmap_randomness(randomness):
    assert _is_random_per_sample(tt, randomness) == _is_random_per_sample(torch, randomness) == (randomness == "same")


ERRORS = {
    "vmap_in_dims_list": lambda m: m.func.vmap(m.sin, in_dims=[0])(_t(m, X4)),
    "vmap_in_dims_length": lambda m: m.func.vmap(m.add, in_dims=(0,))(_t(m, X4), _t(m, X4)),
    "vmap_in_dims_dict_keys": lambda m: m.func.vmap(lambda d: d["a"], in_dims=({"a": 0, "c": None},))(
        {"a": _t(m, X4), "b": _t(m, A)}),
    "vmap_in_dims_float": lambda m: m.func.vmap(m.sin, in_dims=(0.5,))(_t(m, X4)),
    "vmap_all_none": lambda m: m.func.vmap(m.add, in_dims=(None, None))(_t(m, X4), _t(m, X4)),
    "vmap_no_inputs": lambda m: m.func.vmap(lambda: m.ones(2))(),
    "vmap_non_tensor": lambda m: m.func.vmap(m.add, in_dims=(0, 0))(_t(m, X4), 1.0),
    "vmap_dim_out_of_range": lambda m: m.func.vmap(m.sin, in_dims=2)(_t(m, X4)),
    "vmap_batch_sizes": lambda m: m.func.vmap(m.add)(_t(m, X4), _t(m, W3)),
    "vmap_returns_float": lambda m: m.func.vmap(lambda x: 1.0)(_t(m, X4)),
    "vmap_returns_none": lambda m: m.func.vmap(lambda x: (x, None))(_t(m, X4)),
    "vmap_out_dim_none_batched": lambda m: m.func.vmap(lambda x: x, out_dims=None)(_t(m, X4)),
    "vmap_out_dims_length": lambda m: m.func.vmap(lambda x: (x, x), out_dims=(0, 1, 0))(_t(m, X4)),
    "vmap_out_dims_str": lambda m: m.func.vmap(lambda x: x, out_dims="x")(_t(m, X4)),
    "vmap_out_dim_range": lambda m: m.func.vmap(lambda x: x, out_dims=3)(_t(m, X4)),
    "vmap_randomness_name": lambda m: m.func.vmap(m.sin, randomness="foo")(_t(m, X4)),
    "vmap_randomness_error": lambda m: m.func.vmap(lambda x: x + m.rand(3, dtype=m.float64))(_t(m, X4)),
    "vmap_chunk_size": lambda m: m.func.vmap(m.sin, chunk_size=0)(_t(m, X4)),
    "grad_vector_output": lambda m: m.func.grad(m.sin)(_t(m, A)),
    "grad_float_output": lambda m: m.func.grad(lambda x: 1.0)(_t(m, A)),
    "grad_aux_not_pair": lambda m: m.func.grad(lambda x: x.sum(), has_aux=True)(_t(m, A)),
    "grad_aux_not_tensor": lambda m: m.func.grad(lambda x: (x.sum(), 3), has_aux=True)(_t(m, A)),
    "grad_argnum_range": lambda m: m.func.grad(lambda x: x.sum(), argnums=1)(_t(m, A)),
    "grad_argnums_list": lambda m: m.func.grad(lambda x: x.sum(), argnums=[0])(_t(m, A)),
    "grad_argnums_empty": lambda m: m.func.grad(lambda x: x.sum(), argnums=())(_t(m, A)),
    "grad_argnums_repeated": lambda m: m.func.grad(lambda x, y: (x * y).sum(), argnums=(0, 0))(_t(m, A), _t(m, A)),
    "grad_non_tensor_input": lambda m: m.func.grad(lambda x: x)(1.0),
    "grad_int_input": lambda m: m.func.grad(lambda x: x.sum())(m.ones(3, dtype=m.int64)),
    "vjp_output_not_tensor": lambda m: m.func.vjp(lambda x: 1.0, _t(m, A)),
    "vjp_cotangent_structure": lambda m: m.func.vjp(lambda x: (m.sin(x), m.cos(x)), _t(m, A))[1](_t(m, A)),
    "vjp_cotangent_shape": lambda m: m.func.vjp(m.sin, _t(m, A))[1](_t(m, A[:2])),
    "jvp_primals_not_tuple": lambda m: m.func.jvp(m.sin, _t(m, A), _t(m, A)),
    "jvp_structures": lambda m: m.func.jvp(m.sin, (_t(m, A),), (_t(m, A), _t(m, A))),
    "jvp_shapes": lambda m: m.func.jvp(m.sin, (_t(m, A),), (_t(m, A[:2]),)),
    "jvp_empty": lambda m: m.func.jvp(m.sin, (), ()),
    "jvp_non_tensor": lambda m: m.func.jvp(m.sin, (1.0,), (1.0,)),
    "jvp_aux_not_pair": lambda m: m.func.jvp(m.sin, (_t(m, A),), (_t(m, A),), has_aux=True),
    "jacrev_chunk_size": lambda m: m.func.jacrev(m.sin, chunk_size=0)(_t(m, A)),
    "jacrev_int_input": lambda m: m.func.jacrev(lambda x: x * 2)(m.ones(3, dtype=m.int64)),
    "jacfwd_int_input": lambda m: m.func.jacfwd(lambda x: x * 2)(m.ones(3, dtype=m.int64)),
    "jacfwd_randomness_error": lambda m: m.func.jacfwd(lambda x: x * m.rand(3, dtype=m.float64))(_t(m, A)),
    "jacfwd_randomness_name": lambda m: m.func.jacfwd(m.sin, randomness="x")(_t(m, A)),
    "functional_call_not_dict": lambda m: m.func.functional_call(_mlp(m), 3, (_t(m, XB),)),
    "functional_call_repeated_key": lambda m: m.func.functional_call(
        _mlp(m), ({"scale": _t(m, A[:2])}, {"scale": _t(m, A[:2])}), (_t(m, XB),)),
    "functional_call_strict_missing": lambda m: m.func.functional_call(_mlp(m), {"scale": _t(m, A[:2])},
                                                                       (_t(m, XB),), strict=True),
    "functional_call_strict_unexpected": lambda m: m.func.functional_call(
        _mlp(m), {**_params(m), "scale": _t(m, A[:2]), "foo": _t(m, A)}, (_t(m, XB),), strict=True),
    "functional_call_tied_different": lambda m: m.func.functional_call(
        _tied(m), {"0.weight": _t(m, W3), "2.weight": _t(m, W3)}, (_t(m, X4),)),
    "functional_call_not_tensor": lambda m: m.func.functional_call(_mlp(m), {"scale": 3.0}, (_t(m, XB),)),
    "functional_call_bad_path": lambda m: m.func.functional_call(_mlp(m), {"zz.weight": _t(m, W3)}, (_t(m, XB),)),
    "functional_call_submodule": lambda m: m.func.functional_call(_mlp(m), {"fc1": _t(m, W3)}, (_t(m, XB),)),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_are_torchs(name):
    with pytest.raises(Exception) as ref:
        ERRORS[name](torch)
    with pytest.raises(ref.type) as ours:
        ERRORS[name](tt)
    assert type(ours.value) is ref.type, f"torch raises {ref.type.__name__}: {ref.value}; tiletrain {ours.value!r}"
