"""CNN layers against torch.nn: initialisation, state_dict round trips, batch-norm modes and
running statistics, and a small CNN trained 5 SGD steps next to a torch copy (float64)."""
import math

import numpy as np
import pytest
import torch

import tiletrain as tt
import tiletrain.functional as F
from tiletrain import nn
from tiletrain.optim import SGD

TOL = dict(rtol=1e-10, atol=1e-10)


def _torch_state(module):
    """torch's state_dict as NumPy (tiletrain's layers have torch's layouts)."""
    return {k: v.numpy() for k, v in module.state_dict().items()}


@pytest.mark.parametrize("cls, dims", [("Conv1d", 1), ("Conv2d", 2), ("Conv3d", 3)])
def test_conv_init_names_and_torch_state_dict(cls, dims):
    ours = getattr(nn, cls)(6, 8, 3, stride=2, padding=1, groups=2, dtype=np.float64,
                            rng=np.random.default_rng(0))
    theirs = getattr(torch.nn, cls)(6, 8, 3, stride=2, padding=1, groups=2).double()
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    w = ours.weight.detach().numpy()
    assert w.shape == tuple(theirs.weight.shape)
    bound = 1 / math.sqrt(3 * 3 ** dims)                       # kaiming_uniform_(a=sqrt(5)): 1/sqrt(fan_in)
    assert np.abs(w).max() <= bound and np.abs(ours.bias.detach().numpy()).max() <= bound
    assert np.abs(w).max() > 0.8 * bound                      # spread over the whole interval
    ours.load_state_dict(theirs.state_dict())
    x = np.random.default_rng(1).standard_normal((5, 6) + (7,) * dims)
    y = ours(tt.from_numpy(x, (2, 6) + (7,) * dims))
    np.testing.assert_allclose(y.detach().numpy(), theirs(torch.tensor(x)).detach().numpy(), **TOL)


def test_conv_module_bad_arguments():
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(6, 8, 3, groups=4)
    with pytest.raises(ValueError, match="strided"):
        nn.Conv2d(6, 8, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="padding_mode"):
        nn.Conv2d(6, 8, 3, padding_mode="symmetric")


@pytest.mark.parametrize("cls, shape, tb", [("BatchNorm1d", (7, 3), 3), ("BatchNorm1d", (7, 3, 5), 2),
                                            ("BatchNorm2d", (7, 3, 4, 5), 3),
                                            ("BatchNorm3d", (5, 3, 2, 3, 4), 2)])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_batch_norm_module_train_eval(cls, shape, tb, momentum):
    ours = getattr(nn, cls)(3, momentum=momentum, dtype=np.float64)
    theirs = getattr(torch.nn, cls)(3, momentum=momentum).double()
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    rng = np.random.default_rng(2)
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(rng.standard_normal(3)))
        theirs.bias.copy_(torch.tensor(rng.standard_normal(3)))
    ours.load_state_dict(theirs.state_dict())
    for step in range(3):
        x = rng.standard_normal(shape) * 3 + step
        if step == 2:
            ours.eval(), theirs.eval()
        y = ours(tt.from_numpy(x, (tb,) + shape[1:]))
        np.testing.assert_allclose(y.detach().numpy(), theirs(torch.tensor(x)).detach().numpy(), **TOL)
    for k, v in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[k], v.numpy(), err_msg=k, **TOL)
    assert int(ours.num_batches_tracked) == 2
    with pytest.raises(ValueError, match="expected"):
        ours(tt.from_numpy(np.ones((2, 3, 4, 5, 6, 7)), (1, 3, 4, 5, 6, 7)))


def _bn_pair(lib, momentum):
    m = lib.nn.Sequential(lib.nn.BatchNorm1d(3, momentum=momentum))
    return m.double()


def _bn_sequence(lib, m, xs, write_at, value):
    """Training forwards of xs (float64); before forward ``write_at`` the count is set to
    ``value`` through a state dict taken at the start (its tensors share the buffer's
    storage, as torch's); one eval forward of xs[0] at the end, (output, input gradient)."""
    sd = m.state_dict()
    m.train()
    for i, x in enumerate(xs):
        if i == write_at:
            with lib.no_grad():
                sd["0.num_batches_tracked"].fill_(value)
        m(lib.tensor(x))
    m.eval()
    x = lib.tensor(xs[0], requires_grad=True)
    y = m(x)
    (y * y).sum().backward()
    return sd, y.detach().numpy(), x.grad.numpy()


@pytest.mark.parametrize("momentum", [None, 0.3])
def test_num_batches_tracked_is_torchs_int64_buffer(momentum):
    """num_batches_tracked: a 0-d int64 buffer counted in place by training forwards, the one
    state_dict(keep_vars=True) gives and whose storage state_dict() shares; momentum=None
    averages the statistics over the count, whatever wrote it (a state dict, load_state_dict)."""
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((6, 3)) * (1 + i) + i for i in range(5)]
    ours, theirs = _bn_pair(tt, momentum), _bn_pair(torch, momentum)
    nbt = ours[0].num_batches_tracked
    assert isinstance(nbt, tt.Tensor) and nbt.dtype == tt.int64 and nbt.shape == ()
    assert ours.state_dict(keep_vars=True)["0.num_batches_tracked"] is nbt
    assert theirs.state_dict(keep_vars=True)["0.num_batches_tracked"] is theirs[0].num_batches_tracked
    results = [_bn_sequence(tt, ours, xs, 3, 10), _bn_sequence(torch, theirs, xs, 3, 10)]
    (sd, y, gx), (rsd, ry, rgx) = results
    assert int(sd["0.num_batches_tracked"]) == int(rsd["0.num_batches_tracked"]) == 12
    assert ours[0].num_batches_tracked is nbt and int(nbt) == 12
    for k, v in rsd.items():
        np.testing.assert_allclose(sd[k].numpy(), v.numpy(), rtol=1e-12, atol=1e-14, err_msg=k)
    np.testing.assert_allclose(y, ry, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gx, rgx, rtol=1e-12, atol=1e-12)
    # loaded counts (an array, torch's tensor): the next average divides by them plus one
    for value in (np.array(2, np.int64), torch.tensor(6)):
        ours.load_state_dict({**ours.state_dict(), "0.num_batches_tracked": value})
        theirs.load_state_dict({**theirs.state_dict(), "0.num_batches_tracked": torch.as_tensor(value)})
        ours.train(), theirs.train()
        ours(tt.tensor(xs[1]))
        theirs(torch.tensor(xs[1]))
        assert int(nbt) == int(theirs[0].num_batches_tracked) == int(value) + 1
        np.testing.assert_allclose(ours[0].running_var.numpy(), theirs[0].running_var.numpy(), rtol=1e-12)
    assert ours.double()[0].num_batches_tracked.dtype == tt.int64     # casts leave the count alone


def _models(dtype=np.float64):
    def ours_():
        def stage(cin, cout):
            return [nn.Conv2d(cin, cout, 3, padding=1, dtype=dtype), nn.BatchNorm2d(cout, dtype=dtype),
                    nn.ReLU(), nn.MaxPool2d(2)]
        return nn.Sequential(*stage(3, 4), *stage(4, 8), nn.Flatten(), nn.Linear(32, 10, dtype=dtype))
    torch.manual_seed(0)
    T = torch.nn
    theirs = T.Sequential(T.Conv2d(3, 4, 3, padding=1), T.BatchNorm2d(4), T.ReLU(), T.MaxPool2d(2),
                          T.Conv2d(4, 8, 3, padding=1), T.BatchNorm2d(8), T.ReLU(), T.MaxPool2d(2),
                          T.Flatten(), T.Linear(32, 10)).double()
    ours = ours_()
    ours.load_state_dict(_torch_state(theirs))
    return ours, theirs


def test_small_cnn_trains_like_torch():
    """conv-BN-ReLU-maxpool x2 + flatten + linear, batch 8 in batch tiles of 3, 5 SGD steps
    from the same weights: the same losses and parameters as torch to 1e-10."""
    ours, theirs = _models()
    opt, topt = SGD(ours.parameters(), lr=0.1, momentum=0.9), torch.optim.SGD(theirs.parameters(), lr=0.1,
                                                                               momentum=0.9)
    rng = np.random.default_rng(3)
    losses, tlosses = [], []
    for step in range(5):
        x, t = rng.standard_normal((8, 3, 8, 8)), rng.integers(0, 10, 8)
        loss = F.cross_entropy(ours(tt.from_numpy(x, (3, 3, 8, 8))), tt.from_numpy(t.astype(np.int64), (3,)))
        loss.backward()
        opt.step()
        opt.zero_grad()
        tloss = torch.nn.functional.cross_entropy(theirs(torch.tensor(x)), torch.tensor(t))
        tloss.backward()
        topt.step()
        topt.zero_grad()
        losses.append(float(loss))
        tlosses.append(tloss.item())
    np.testing.assert_allclose(losses, tlosses, **TOL)
    assert losses[-1] < losses[0]
    state = _torch_state(theirs)
    for k, v in ours.state_dict().items():
        np.testing.assert_allclose(v, state[k], err_msg=k, **TOL)
    ours.eval(), theirs.eval()
    x = rng.standard_normal((5, 3, 8, 8))
    np.testing.assert_allclose(ours(tt.from_numpy(x, (2, 3, 8, 8))).detach().numpy(),
                               theirs(torch.tensor(x)).detach().numpy(), **TOL)


def test_buffers_in_state_dict_and_load():
    model = nn.Sequential(nn.Conv2d(2, 3, 1, dtype=np.float64), nn.BatchNorm2d(3, dtype=np.float64))
    assert [n for n, _ in model.named_buffers()] == ["1.running_mean", "1.running_var", "1.num_batches_tracked"]
    assert "1.running_var" in model.state_dict() and "1.weight" not in dict(model.named_buffers())
    state = model.state_dict()
    state["1.running_mean"] = np.arange(3.0)
    state["1.num_batches_tracked"] = np.array(7)
    bn = model[1]
    model.load_state_dict(state)
    np.testing.assert_array_equal(bn.running_mean.numpy(), np.arange(3.0))   # written in place
    assert int(bn.num_batches_tracked) == 7
    del state["1.running_var"]
    with pytest.raises(ValueError, match="missing keys: 1.running_var"):
        model.load_state_dict(state)
    with pytest.raises(TypeError, match="buffer"):
        bn.register_buffer("extra", [1.0])
