"""max_pool*d(return_indices=True) / nn.MaxPool*d(return_indices=True): torch's flat
per-channel int64 indices (first maximum, never padding; overlapping windows, strides,
padding, dilation, ceil_mode, unbatched inputs), and F.max_unpool*d / nn.MaxUnpool*d
(output_size) with their gradients, all against torch in float64."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import tiletrain as tt
import tiletrain.nn.functional as F

# (nsp, input shape, kernel, stride, padding, dilation, ceil_mode)
CASES = [
    (1, (2, 3, 11), 3, 2, 1, 1, False),
    (1, (3, 9), 2, None, 0, 1, True),                      # unbatched, ceil_mode
    (2, (2, 3, 7, 9), 2, None, 0, 1, False),
    (2, (1, 2, 8, 7), 3, 1, 1, 1, False),                  # overlapping windows, padding
    (2, (2, 2, 9, 10), (3, 2), (2, 3), (1, 0), (1, 2), True),
    (2, (3, 6, 6), 3, 2, 1, 2, False),                     # unbatched, dilation
    (3, (1, 2, 5, 6, 7), 2, None, 0, 1, False),
    (3, (2, 1, 6, 5, 7), (3, 2, 3), (2, 1, 2), (1, 1, 0), 1, True),
]


def _args(case):
    nsp, shape, k, s, p, d, ceil = case
    return dict(kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=ceil)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}d-{i}" for i, c in enumerate(CASES)])
def test_pool_indices_and_unpool_match_torch(case, rng):
    nsp, shape = case[0], case[1]
    a = rng.standard_normal(shape)
    a.reshape(-1)[::5] = np.round(a.reshape(-1)[::5])      # ties: the first maximum wins
    a.reshape(-1)[3::17] = -np.inf                           # an all-(-inf) window must not pick padding
    kw = _args(case)
    x, xr = tt.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    y, idx = getattr(F, f"max_pool{nsp}d")(x, return_indices=True, **kw)
    yr, idxr = getattr(TF, f"max_pool{nsp}d")(xr, return_indices=True, **kw)
    assert idx.dtype == tt.int64 and idx.shape == tuple(idxr.shape)
    np.testing.assert_array_equal(idx.numpy(), idxr.numpy())
    np.testing.assert_array_equal(y.detach().numpy(), yr.detach().numpy())
    finite = np.isfinite(yr.detach().numpy())
    b = np.where(finite, yr.detach().numpy(), 0.0)
    unpool_kw = dict(kernel_size=kw["kernel_size"], stride=kw["stride"], padding=kw["padding"])
    out_size = shape[-nsp:]
    try:
        ur = getattr(TF, f"max_unpool{nsp}d")(torch.tensor(b), idxr, output_size=out_size, **unpool_kw)
    except ValueError as e:    # dilation: the input's size may lie outside unpooling's range
        with pytest.raises(ValueError) as ours:
            getattr(F, f"max_unpool{nsp}d")(tt.tensor(b), idx, output_size=out_size, **unpool_kw)
        assert str(ours.value) == str(e)
        out_size = None
        try:
            ur = getattr(TF, f"max_unpool{nsp}d")(torch.tensor(b), idxr, **unpool_kw)
        except RuntimeError:   # an index beyond the default output size: both refuse it
            with pytest.raises(RuntimeError, match="Found an invalid max index"):
                getattr(F, f"max_unpool{nsp}d")(tt.tensor(b), idx, **unpool_kw)
            return
    u = getattr(F, f"max_unpool{nsp}d")(tt.tensor(b), idx, output_size=out_size, **unpool_kw)
    assert u.shape == tuple(ur.shape)
    np.testing.assert_array_equal(u.numpy(), ur.numpy())   # a repeated index carries one value: y at it


def test_gradients_through_pool_and_unpool_match_torch(rng):
    a = rng.standard_normal((2, 3, 8, 10))
    g = rng.standard_normal((2, 3, 8, 10))
    w = rng.standard_normal((2, 3, 4, 5))

    def run(mod, Fm):
        x = mod.tensor(a, requires_grad=True)
        y, idx = Fm.max_pool2d(x, 2, return_indices=True)
        v = mod.tensor(w, requires_grad=True)
        u = Fm.max_unpool2d(y * v, idx, 2)
        (u * mod.tensor(g)).sum().backward()
        return u.detach().numpy(), x.grad.numpy(), v.grad.numpy()
    for ours, ref in zip(run(tt, F), run(torch, TF)):
        np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-12)


def test_unpool_gradient_with_overlapping_windows_matches_torch(rng):
    """Stride 1: a repeated index receives the gradient at every input that names it (a gather)."""
    a = rng.standard_normal((1, 2, 6, 6))
    _, idxr = TF.max_pool2d(torch.tensor(a), 3, stride=1, return_indices=True)
    v = rng.standard_normal(idxr.shape)
    g = rng.standard_normal((1, 2, 6, 6))
    ref = torch.tensor(v, requires_grad=True)
    (TF.max_unpool2d(ref, idxr, 3, stride=1, output_size=(6, 6)) * torch.tensor(g)).sum().backward()
    ours = tt.tensor(v, requires_grad=True)
    (F.max_unpool2d(ours, tt.tensor(idxr.numpy()), 3, stride=1, output_size=(6, 6)) * tt.tensor(g)).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), ref.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_modules_match_torch(rng):
    a = rng.standard_normal((2, 2, 9, 9))
    outs = []
    for mod in (tt, torch):
        pool = mod.nn.MaxPool2d(3, stride=2, padding=1, return_indices=True)
        unpool = mod.nn.MaxUnpool2d(3, stride=2, padding=1)
        y, idx = pool(mod.tensor(a))
        outs.append((idx.numpy(), unpool(y, idx, output_size=(2, 2, 9, 9)).numpy(), unpool(y, idx).shape,
                     repr(unpool)))
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    assert tuple(outs[0][2]) == tuple(outs[1][2]) and outs[0][3] == outs[1][3]
    for mod in (tt, torch):
        y, idx = mod.nn.MaxPool1d(2, return_indices=True)(mod.tensor(rng.standard_normal((1, 2, 8))))
        assert tuple(mod.nn.MaxUnpool1d(2)(y, idx).shape) == (1, 2, 8)
        y, idx = mod.nn.MaxPool3d(2, return_indices=True)(mod.tensor(rng.standard_normal((1, 1, 4, 4, 4))))
        assert tuple(mod.nn.MaxUnpool3d(2)(y, idx).shape) == (1, 1, 4, 4, 4)


def test_bad_unpool_input_is_refused_as_torch():
    y, idx = F.max_pool2d(tt.tensor(np.arange(16.0).reshape(1, 1, 4, 4)), 2, return_indices=True)
    yr, idxr = TF.max_pool2d(torch.arange(16.0, dtype=torch.float64).reshape(1, 1, 4, 4), 2, return_indices=True)
    for size in ((6, 6), (1, 1, 2, 2), (5,)):
        with pytest.raises(ValueError) as ours:
            F.max_unpool2d(y, idx, 2, output_size=size)
        with pytest.raises(ValueError) as theirs:
            TF.max_unpool2d(yr, idxr, 2, output_size=size)
        if len(size) != 1:
            assert str(ours.value) == str(theirs.value)
    bad = tt.tensor(np.array([[[[0, 1], [2, 99]]]]))
    with pytest.raises(RuntimeError, match="Found an invalid max index: 99"):
        F.max_unpool2d(y, bad, 2)
    with pytest.raises(RuntimeError, match="Found an invalid max index"):
        TF.max_unpool2d(yr, torch.tensor([[[[0, 1], [2, 99]]]]), 2)
    with pytest.raises(TypeError, match="indices must be an int64 tensor"):
        F.max_unpool2d(y, y, 2)
    with pytest.raises(ValueError, match="must match"):
        F.max_unpool2d(y, idx[..., :1], 2)


@pytest.mark.parametrize("values", [[-np.inf, -np.inf, 1.0, 2.0, -np.inf], [3.0, np.nan, 1.0, np.nan, 5.0, 0.5, np.nan]],
                         ids=["all-minus-inf-window", "nan"])
def test_indices_at_infinities_and_nans_match_torch(values):
    a = np.array(values).reshape(1, 1, -1)
    for k, s, p in ((3, 2, 1), (2, 1, 0), (3, 1, 1)):
        y, idx = F.max_pool1d(tt.tensor(a), k, s, p, return_indices=True)
        yr, idxr = TF.max_pool1d(torch.tensor(a), k, s, p, return_indices=True)
        np.testing.assert_array_equal(idx.numpy(), idxr.numpy())
