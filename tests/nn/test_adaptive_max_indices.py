"""adaptive_max_pool*d(return_indices=True) / nn.AdaptiveMaxPool*d(return_indices=True):
torch's flat per-channel int64 indices (first maximum in scan order, last NaN; unequal and
overlapping windows, None sizes, outputs larger than the input, unbatched inputs), values
and gradients (ties: torch's one element), and F.max_unpool*d on them, against torch in
float64."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import tiletrain as tt
import tiletrain.nn.functional as F

# (nsp, input shape, output_size)
CASES = [
    (1, (2, 3, 11), 4),                  # unequal, overlapping windows
    (1, (3, 8), 3),                      # unbatched
    (1, (1, 2, 5), 1),                   # one window
    (1, (2, 2, 5), 7),                   # more outputs than inputs
    (2, (2, 3, 7, 9), (3, 4)),
    (2, (1, 2, 8, 8), 4),                # equal windows
    (2, (3, 5, 6), (4, None)),           # unbatched, None keeps a size
    (2, (1, 1, 5, 4), (7, 3)),
    (3, (1, 2, 5, 6, 7), (3, 2, 4)),
    (3, (2, 1, 4, 4, 4), 2),
]
IDS = [f"{c[0]}d-{i}" for i, c in enumerate(CASES)]


def _input(rng, shape):
    a = rng.standard_normal(shape)
    a.reshape(-1)[::4] = np.round(a.reshape(-1)[::4])        # ties: the first maximum
    a.reshape(-1)[1::7] = a.reshape(-1)[0]
    a.reshape(-1)[2::13] = -np.inf
    return a


def _pool(lib, nsp, x, out, **kw):
    return getattr(F if lib is tt else TF, f"adaptive_max_pool{nsp}d")(x, out, **kw)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_values_indices_and_gradients_match_torch(case, rng):
    nsp, shape, out = case
    a = _input(rng, shape)
    results = []
    for lib in (tt, torch):
        x = lib.tensor(a, requires_grad=True)
        y, idx = _pool(lib, nsp, x, out, return_indices=True)
        g = np.random.default_rng(5).standard_normal(tuple(y.shape))
        (y * lib.tensor(g)).sum().backward()
        results.append((y.detach().numpy(), idx, x.grad.numpy()))
    (y, idx, gx), (yr, idxr, gxr) = results
    assert idx.dtype == tt.int64 and idx.shape == tuple(idxr.shape) == y.shape
    np.testing.assert_array_equal(idx.numpy(), idxr.numpy())
    np.testing.assert_array_equal(y, yr)
    np.testing.assert_allclose(gx, gxr, rtol=1e-12, atol=1e-12)   # ties and overlaps: torch's elements
    plain = _pool(tt, nsp, tt.tensor(a), out)                     # without indices: the same values
    assert plain.shape == yr.shape
    np.testing.assert_array_equal(plain.numpy(), yr)
    avg = getattr(F, f"adaptive_avg_pool{nsp}d")(tt.tensor(a), out)   # its twin: unbatched stays unbatched
    np.testing.assert_allclose(avg.numpy(), getattr(TF, f"adaptive_avg_pool{nsp}d")(torch.tensor(a), out).numpy(),
                               rtol=1e-12, atol=1e-12)


def _unpool_geometry(spatial, sizes):
    """kernel and stride whose default unpooling size is the input's (n >= o on every axis)."""
    stride = [n // o for n, o in zip(spatial, sizes)]
    return [n - (o - 1) * s for n, o, s in zip(spatial, sizes, stride)], stride


def _fits_unpooling(case) -> bool:
    """No output axis larger than the input's (max_unpool's output size then covers the input)."""
    nsp, shape, out = case
    sizes = (out,) * nsp if isinstance(out, int) else out
    return all(o is None or n >= o for n, o in zip(shape[-nsp:], sizes))


@pytest.mark.parametrize("case", [c for c in CASES if _fits_unpooling(c)],
                         ids=[i for i, c in zip(IDS, CASES) if _fits_unpooling(c)])
def test_max_unpool_of_adaptive_indices_matches_torch(case, rng):
    """Unpooling puts each value at its index (overlapping windows name an element more than
    once, always with its own value); the gradient gathers at the indices."""
    nsp, shape, out = case
    a = rng.standard_normal(shape)
    w = rng.standard_normal(tuple(_pool(torch, nsp, torch.tensor(a), out).shape))
    g = rng.standard_normal(shape)
    results = []
    for lib in (tt, torch):
        y, idx = _pool(lib, nsp, lib.tensor(a), out, return_indices=True)
        spatial = shape[-nsp:]
        kernel, stride = _unpool_geometry(spatial, tuple(y.shape[-nsp:]))
        unpool = getattr(F if lib is tt else TF, f"max_unpool{nsp}d")
        v = lib.tensor(w, requires_grad=True)
        (unpool(y * v, idx, kernel, stride, output_size=spatial) * lib.tensor(g)).sum().backward()
        results.append((unpool(y, idx, kernel, stride, output_size=spatial).numpy(), v.grad.numpy()))
    (u, gv), (ur, gvr) = results
    np.testing.assert_array_equal(u, ur)
    np.testing.assert_allclose(gv, gvr, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("values", [[-np.inf, -np.inf, -np.inf, 1.0, 2.0, -np.inf],
                                    [3.0, np.nan, 1.0, np.nan, 5.0, 0.5, np.nan, 2.0]],
                         ids=["minus-inf-windows", "nan"])
def test_indices_at_infinities_and_nans_match_torch(values):
    a = np.array(values).reshape(1, 1, -1)
    for out in (1, 2, 3, 5, 9):
        y, idx = F.adaptive_max_pool1d(tt.tensor(a), out, return_indices=True)
        yr, idxr = TF.adaptive_max_pool1d(torch.tensor(a), out, return_indices=True)
        np.testing.assert_array_equal(idx.numpy(), idxr.numpy())
        np.testing.assert_array_equal(y.numpy(), yr.numpy())


def test_modules_match_torch(rng):
    a = rng.standard_normal((2, 3, 6, 7, 5))
    for nsp, out in ((1, 3), (2, (4, None)), (3, (2, 3, 4))):
        x = a.reshape(a.shape[:2 + nsp - 1] + (-1,)) if nsp < 3 else a
        got = []
        for lib in (tt, torch):
            pool = getattr(lib.nn, f"AdaptiveMaxPool{nsp}d")(out, return_indices=True)
            y, idx = pool(lib.tensor(x))
            got.append((y.numpy(), idx.numpy(), repr(pool)))
        np.testing.assert_array_equal(got[0][0], got[1][0])
        np.testing.assert_array_equal(got[0][1], got[1][1])
        assert got[0][2] == got[1][2]
