"""The optimizers' step count as torch keeps it: a 0-d tensor in each parameter's state
(float32, float64 under a float64 default dtype; none for SGD), updated in place, loaded from
torch's tensor, from a tiletrain tensor or from the int of older state dicts and checkpoints."""
import numpy as np
import pytest

import tiletrain as tt

import torch

NAMES = ["Adam", "AdamW", "Adamax", "NAdam", "RAdam", "Adagrad", "Adadelta", "RMSprop", "SGD", "SGD_momentum"]


def _make(lib, name, params):
    if name == "SGD_momentum":
        return lib.optim.SGD(params, lr=0.05, momentum=0.9)
    if name == "SGD":
        return lib.optim.SGD(params, lr=0.05)
    return getattr(lib.optim, name)(params, lr=0.05)


def _problem():
    rng = np.random.default_rng(3)
    return rng.standard_normal((5, 4)), rng.standard_normal(4), rng.standard_normal((6, 5))


def _steps(lib, opt, params, x, n):
    W, B = params
    X = lib.tensor(x)
    for _ in range(n):
        opt.zero_grad()
        y = X @ W + B
        (0.5 * (y * y).sum()).backward()
        opt.step()


def _params(lib, w, b):
    return [lib.tensor(w, requires_grad=True), lib.tensor(b, requires_grad=True)]


def _dtype_name(t) -> str:
    return str(t.dtype).split(".")[-1]


@pytest.fixture
def default_dtype(request):
    """Both libraries' default dtype set to request.param for the test, restored after."""
    old_tt, old_torch = tt.get_default_dtype(), torch.get_default_dtype()
    tt.set_default_dtype(getattr(tt, request.param))
    torch.set_default_dtype(getattr(torch, request.param))
    yield request.param
    tt.set_default_dtype(old_tt)
    torch.set_default_dtype(old_torch)


@pytest.mark.parametrize("default_dtype", ["float32", "float64"], indirect=True)
@pytest.mark.parametrize("name", NAMES)
def test_step_is_torchs_0d_tensor_updated_in_place(name, default_dtype):
    w, b, x = _problem()
    ours, theirs = _params(tt, w, b), _params(torch, w, b)
    opt, ref = _make(tt, name, ours), _make(torch, name, theirs)
    _steps(tt, opt, ours, x, 1)
    first = opt.state_dict()
    _steps(tt, opt, ours, x, 2)
    _steps(torch, ref, theirs, x, 3)
    sd, sd_ref = opt.state_dict(), ref.state_dict()
    assert sorted(sd["state"]) == sorted(sd_ref["state"])
    for i, st_ref in sd_ref["state"].items():
        st = sd["state"][i]
        assert sorted(st) == sorted(st_ref), name
        if "step" not in st_ref:
            continue
        step, step_ref = st["step"], st_ref["step"]
        assert isinstance(step, tt.Tensor) and step.shape == () == tuple(step_ref.shape)
        assert _dtype_name(step) == _dtype_name(step_ref) and float(step) == float(step_ref) == 3.0
        assert first["state"][i]["step"] is step          # the same tensor, counted in place
        assert isinstance(opt.state_dict(copy=True)["state"][i]["step"], np.ndarray)
    for p, q in zip(ours, theirs):   # the updates read the count: still torch's
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-10, atol=1e-12)


def _step_forms(step):
    """A saved step count in the forms a state dict may hold it."""
    return {"tensor": step, "int": int(float(step)), "numpy float32": np.array(float(step), np.float32),
            "torch float32": torch.tensor(float(step)), "torch float64": torch.tensor(float(step), dtype=torch.float64)}


# the dtype of the loaded step: the saved tensor's float dtype, torch's float32 for an int
LOADED_DTYPE = {"tensor": "float32", "int": "float32", "numpy float32": "float32", "torch float32": "float32",
                "torch float64": "float64"}


@pytest.mark.parametrize("form", ["int", "torch float32", "torch float64"])
def test_torch_loads_the_step_forms_as_tiletrain(form):
    ref = torch.optim.Adam(_params(torch, *_problem()[:2]))
    ref.load_state_dict({"state": {0: {"step": _step_forms(torch.tensor(2.0))[form]}},
                         "param_groups": ref.state_dict()["param_groups"]})
    assert _dtype_name(ref.state_dict()["state"][0]["step"]) == LOADED_DTYPE[form]


@pytest.mark.parametrize("form", list(LOADED_DTYPE))
@pytest.mark.parametrize("name", ["Adam", "AdamW", "NAdam", "RAdam", "Adagrad", "Adamax"])
def test_loaded_step_forms_resume_bit_identically(name, form):
    w, b, x = _problem()
    straight = _params(tt, w, b)
    _steps(tt, _make(tt, name, straight), straight, x, 4)
    first = _params(tt, w, b)
    opt = _make(tt, name, first)
    _steps(tt, opt, first, x, 2)
    sd = opt.state_dict()
    for st in sd["state"].values():
        st["step"] = _step_forms(st["step"])[form]
    resumed = [tt.tensor(p.detach().numpy(), requires_grad=True) for p in first]
    opt2 = _make(tt, name, resumed)
    opt2.load_state_dict(sd)
    for i, st in opt2.state_dict()["state"].items():
        assert isinstance(st["step"], tt.Tensor) and st["step"] is not sd["state"][i]["step"]
        assert _dtype_name(st["step"]) == LOADED_DTYPE[form] and float(st["step"]) == 2
    _steps(tt, opt2, resumed, x, 2)
    for p, q in zip(resumed, straight):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
    assert all(float(st["step"]) == 4 for st in opt2.state_dict()["state"].values())


def test_sgd_drops_the_step_of_an_older_state():
    """Older tiletrain states gave SGD a step count; torch's SGD keeps none, so it is dropped."""
    w, b, x = _problem()
    ours = _params(tt, w, b)
    opt = _make(tt, "SGD_momentum", ours)
    _steps(tt, opt, ours, x, 1)
    sd = opt.state_dict()
    for st in sd["state"].values():
        st["step"] = 1
    opt.load_state_dict(sd)
    assert all(sorted(st) == ["momentum_buffer"] for st in opt.state_dict()["state"].values())


def test_a_step_put_in_the_state_is_read_once():
    """A step count written into the state directly (a number or another tensor) is where the
    next step counts from."""
    w, b, x = _problem()
    ours = _params(tt, w, b)
    opt = tt.optim.Adam(ours, lr=0.05)
    _steps(tt, opt, ours, x, 1)
    states = list(opt.state.values())
    states[0]["step"] = 7
    states[1]["step"] = tt.tensor(9.0)
    _steps(tt, opt, ours, x, 1)
    assert [float(st["step"]) for st in states] == [8.0, 10.0]
    assert all(isinstance(st["step"], tt.Tensor) and st["step"].dtype == np.float32 for st in states)


def test_a_bad_step_is_refused():
    w, b, _ = _problem()
    opt = tt.optim.Adam(_params(tt, w, b))
    sd = {"state": {0: {"step": np.array([1.0, 2.0])}}, "param_groups": opt.state_dict()["param_groups"]}
    with pytest.raises(ValueError, match="'step' must be a number or a 0-d tensor"):
        opt.load_state_dict(sd)
