"""Module.state_dict() and Optimizer.state_dict() as torch's: tensors (detached, on the
parameters' tiles; keep_vars=True the Parameters), torch's key order, in-place updates through
them (EMA), clones, tt.save / tt.load round trips and loading one model's state into another,
all checked against torch in float64."""
import copy
import io

import numpy as np
import pytest
import torch

import tiletrain as tt
from tiletrain.nn.module import state_arrays


class _Net:
    """The same small network in either library: a tied embedding/head, a BatchNorm (buffers,
    a host-side counter), a non-persistent buffer, a nested Sequential."""

    @staticmethod
    def build(mod):
        class Net(mod.nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = mod.nn.Embedding(7, 4)
                self.body = mod.nn.Sequential(mod.nn.Linear(4, 5), mod.nn.ReLU(), mod.nn.Linear(5, 4))
                self.bn = mod.nn.BatchNorm1d(4)
                self.head = mod.nn.Linear(4, 7, bias=False)
                self.head.weight = self.emb.weight
                self.register_buffer("scratch", mod.zeros(3, dtype=mod.float64), persistent=False)

            def forward(self, idx):
                return self.head(self.bn(self.body(self.emb(idx))))
        return Net()


def _pair(seed=0):
    """A tiletrain net and a torch net with the same float64 weights."""
    torch.manual_seed(seed)
    ref = _Net.build(torch).double()
    ours = _Net.build(tt).double()
    ours.load_state_dict({k: v.numpy() for k, v in ref.state_dict().items()})
    return ours, ref


def _same(ours: dict, ref: dict, tol=1e-12):
    assert list(ours) == list(ref)
    for k in ref:
        np.testing.assert_allclose(ours[k].numpy(), ref[k].numpy(), rtol=tol, atol=tol, err_msg=k)


def test_values_are_detached_tensors_in_torchs_order():
    ours, ref = _pair()
    sd, rsd = ours.state_dict(), ref.state_dict()
    assert type(sd) is type(rsd)                       # an OrderedDict
    _same(sd, rsd)
    for k, v in sd.items():
        assert isinstance(v, tt.Tensor) and not isinstance(v, tt.nn.Parameter) and not v.requires_grad, k
        assert v.dtype == tt.float64 or k.endswith("num_batches_tracked")
    assert sd["bn.num_batches_tracked"].dtype == tt.int64 and sd["bn.num_batches_tracked"].shape == ()
    assert sum(v.numel() for v in sd.values()) == sum(v.numel() for v in rsd.values())
    assert sd["body.0.weight"].float().dtype == tt.float32
    kv, rkv = ours.state_dict(keep_vars=True), ref.state_dict(keep_vars=True)
    assert kv["body.0.weight"] is ours.body[0].weight and kv["head.weight"] is ours.emb.weight
    assert [k for k, v in kv.items() if v.requires_grad] == [k for k, v in rkv.items() if v.requires_grad]
    assert list(ours.state_dict(prefix="m.")) == list(ref.state_dict(prefix="m."))
    dest = {"x": 1}
    assert ours.state_dict(destination=dest) is dest and list(dest)[1:] == list(rsd)


def test_in_place_updates_reach_the_parameters_and_clones_do_not():
    ours, ref = _pair()
    for m in (ours, ref):
        sd = m.state_dict()
        kept = {k: v.detach().cpu().clone() for k, v in sd.items()}
        with (tt if m is ours else torch).no_grad():
            sd["body.0.weight"].mul_(2)
            sd["head.weight"].add_(kept["body.0.weight"][:, :1].sum(), alpha=0.5)   # the tied weight
        m.kept = kept
    _same(ours.state_dict(), ref.state_dict())
    np.testing.assert_allclose(ours.emb.weight.detach().numpy(), ref.emb.weight.detach().numpy(), rtol=1e-12)
    _same(ours.kept, ref.kept)                          # the clones kept the old values
    assert not np.allclose(ours.kept["body.0.weight"].numpy(), ours.body[0].weight.detach().numpy())


def test_ema_of_the_state_dict_matches_torch(rng):
    ours, ref = _pair()
    x = rng.integers(0, 7, (6,))
    ema_t = copy.deepcopy(ours.state_dict())
    ema_r = copy.deepcopy(ref.state_dict())
    opt_t, opt_r = tt.optim.SGD(ours.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    d = 0.9
    for _ in range(3):
        for m, opt, ema, mod in ((ours, opt_t, ema_t, tt), (ref, opt_r, ema_r, torch)):
            opt.zero_grad()
            (m(mod.tensor(x)) ** 2).mean().backward()
            opt.step()
            with mod.no_grad():
                for k, v in m.state_dict().items():
                    if v.dtype != mod.int64:
                        ema[k].mul_(d).add_(v, alpha=1 - d)
    _same(ema_t, ema_r, 1e-10)
    _same(ours.state_dict(), ref.state_dict(), 1e-10)


def test_save_load_round_trip_and_loading_another_model(tmp_path):
    ours, ref = _pair(1)
    path = tmp_path / "m.pt"
    tt.save(ours.state_dict(), path)
    back = tt.load(path)
    assert back["head.weight"] is back["emb.weight"]    # stored once, as torch keeps shared storage
    other, _ = _pair(2)
    assert other.load_state_dict(back) == ([], [])
    _same(other.state_dict(), ref.state_dict())
    third, _ = _pair(3)
    third.load_state_dict(ours.state_dict())
    _same(third.state_dict(), ref.state_dict())
    torch_back = {k: torch.tensor(v.numpy()) for k, v in back.items()}
    ref2 = _Net.build(torch).double()
    ref2.load_state_dict(torch_back)
    _same(ours.state_dict(), ref2.state_dict())
    arrays = state_arrays(ours)
    assert all(isinstance(a, np.ndarray) for a in arrays.values()) and arrays["head.weight"] is arrays["emb.weight"]


def test_optimizer_state_dict_holds_the_state_tensors(rng):
    ours, ref = _pair()
    x = rng.integers(0, 7, (6,))
    opts = (tt.optim.AdamW(ours.parameters(), lr=0.01), torch.optim.AdamW(ref.parameters(), lr=0.01))

    target = rng.standard_normal((6, 7))

    def step(m, opt, mod):
        opt.zero_grad()
        ((m(mod.tensor(x)) - mod.tensor(target)) ** 2).mean().backward()
        opt.step()
    step(ours, opts[0], tt)
    step(ref, opts[1], torch)
    sd_t, sd_r = opts[0].state_dict(), opts[1].state_dict()
    assert sd_t["param_groups"][0]["params"] == sd_r["param_groups"][0]["params"]
    for i, st in sd_r["state"].items():
        assert set(sd_t["state"][i]) == set(st)
        assert int(sd_t["state"][i]["step"]) == int(st["step"])
        for k in ("exp_avg", "exp_avg_sq"):
            assert isinstance(sd_t["state"][i][k], tt.Tensor)
            np.testing.assert_allclose(sd_t["state"][i][k].numpy(), st[k].numpy(), rtol=1e-10, atol=1e-14)
    before = sd_t["state"][0]["exp_avg"].clone()
    step(ours, opts[0], tt)                               # as torch: the state dict's tensors are the state
    assert not np.allclose(sd_t["state"][0]["exp_avg"].numpy(), before.numpy())
    assert isinstance(opts[0].state_dict(copy=True)["state"][0]["exp_avg"], np.ndarray)
    buf = io.BytesIO()
    tt.save({"model": ours.state_dict(), "opt": opts[0].state_dict()}, buf)
    buf.seek(0)
    back = tt.load(buf)
    ours2, _ = _pair(5)
    ours2.load_state_dict(back["model"])
    opt2 = tt.optim.AdamW(ours2.parameters(), lr=0.01)
    opt2.load_state_dict(back["opt"])
    for _ in range(2):   # ref: 3 steps; ours2: the 2 it was saved after, and one more
        step(ref, opts[1], torch)
    step(ours2, opt2, tt)
    step(ours, opts[0], tt)
    _same(ours2.state_dict(), ours.state_dict(), 1e-14)   # resumed exactly
    # Adam divides by the root of small second moments: last-bit differences of the two
    # libraries' gradients grow to ~1e-8 in three steps
    _same(ours2.state_dict(), ref.state_dict(), 1e-7)


def test_lbfgs_state_dict_values_are_tensors():
    w = tt.tensor(np.array([1.5, -0.5]), requires_grad=True)
    opt = tt.optim.LBFGS([w], max_iter=3)

    def closure():
        opt.zero_grad()
        loss = ((w - 1.0) ** 2).sum() + (w[0] * w[1]) ** 2
        loss.backward()
        return loss
    opt.step(closure)
    st = opt.state_dict()["state"][0]
    assert isinstance(st["d"], tt.Tensor) and all(isinstance(a, tt.Tensor) for a in st["old_dirs"])
    assert isinstance(opt.state_dict(copy=True)["state"][0]["d"], np.ndarray)


def test_positional_arguments_as_torch():
    ours, ref = _pair()
    dest_t, dest_r = {}, {}
    for m, dest in ((ref, dest_r), (ours, dest_t)):
        with pytest.warns(FutureWarning, match="Positional args are being deprecated"):
            assert m.state_dict(dest, "p.") is dest
    assert list(dest_t) == list(dest_r)
