"""Reductions (tiletrain/ops/reduce.py) against torch: every reduction over int, negative,
tuple, non-consecutive and None dims, with and without keepdim, on tile grids with leftover
tiles; forward in float32/float64, backward in float64 to 1e-10; ties (amax/amin gradients,
max/min/argmax indices); VJP checks; bad input rejected before any task."""
import math

import numpy as np
import pytest

import tiletrain as tt
from conftest import FLOATS, tol
from tiletrain._ffi import lib
from tiletrain.testing.gradcheck import vjp_check

import torch

GRIDS = [
    ((6, 5), (6, 5)),               # one tile
    ((11, 7), (4, 3)),              # leftover tiles on both axes
    ((5, 7, 6), (2, 3, 4)),         # leftover tiles on every axis
    ((3, 2, 5, 4), (2, 2, 3, 3)),
    ((6, 4, 5), (2, 4, 3)),         # whole tiles along axis 0: amax/amin reduce within them first
]


def _dims(ndim):
    """int, negative, a tuple of consecutive axes, a non-consecutive tuple, None."""
    out = [None, 0, -1, (0, 1), (-1, 0)]
    if ndim >= 3:
        out += [(0, 2), (1, 2), (2, 0, 1)]
    if ndim >= 4:
        out += [(0, 2, 3), (1, 3)]
    return out


def _torch_dim(dim):
    return () if dim is None else dim


# name -> (tiletrain call, torch call), both (x, dim, keepdim)
CASES = {
    "sum": (lambda x, d, k: tt.sum(x, d, keepdim=k), lambda x, d, k: torch.sum(x, d, keepdim=k)),
    "mean": (lambda x, d, k: tt.mean(x, d, keepdim=k), lambda x, d, k: torch.mean(x, d, keepdim=k)),
    "var": (lambda x, d, k: tt.var(x, d, keepdim=k), lambda x, d, k: torch.var(x, d, keepdim=k)),
    "var0": (lambda x, d, k: tt.var(x, d, correction=0, keepdim=k),
             lambda x, d, k: torch.var(x, d, correction=0, keepdim=k)),
    "std": (lambda x, d, k: tt.std(x, d, keepdim=k), lambda x, d, k: torch.std(x, d, keepdim=k)),
    "amax": (lambda x, d, k: tt.amax(x, d, keepdim=k), lambda x, d, k: torch.amax(x, _torch_dim(d), keepdim=k)),
    "amin": (lambda x, d, k: tt.amin(x, d, keepdim=k), lambda x, d, k: torch.amin(x, _torch_dim(d), keepdim=k)),
    "logsumexp": (lambda x, d, k: tt.logsumexp(x, d, keepdim=k),
                  lambda x, d, k: torch.logsumexp(x, tuple(range(x.ndim)) if d is None else d, keepdim=k)),
    "norm_fro": (lambda x, d, k: tt.norm(x, "fro", d, k), lambda x, d, k: torch.norm(x, 2, d, k)),
    "norm1": (lambda x, d, k: tt.norm(x, 1, d, k), lambda x, d, k: torch.norm(x, 1, d, k)),
    "norm3": (lambda x, d, k: tt.norm(x, 3.0, d, k), lambda x, d, k: torch.norm(x, 3.0, d, k)),
    "norm_inf": (lambda x, d, k: tt.norm(x, math.inf, d, k), lambda x, d, k: torch.norm(x, math.inf, d, k)),
    "norm_ninf": (lambda x, d, k: tt.norm(x, -math.inf, d, k), lambda x, d, k: torch.norm(x, -math.inf, d, k)),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,tiles", GRIDS)
def test_forward_matches_torch(rng, shape, tiles, dtype):
    x = rng.standard_normal(shape).astype(dtype)
    X, T = tt.from_numpy(x, tiles), torch.from_numpy(x.astype(np.float64))
    t = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else tol(dtype)
    for name, (f, tf) in CASES.items():
        for dim in _dims(len(shape)):
            for keepdim in (False, True):
                got, want = f(X, dim, keepdim), tf(T, dim, keepdim)
                assert got.shape == tuple(want.shape), (name, dim, keepdim)
                assert got.dtype == dtype
                np.testing.assert_allclose(got.numpy(), want.numpy(), **t, err_msg=f"{name} {dim} {keepdim}")


@pytest.mark.parametrize("shape,tiles", GRIDS[1:])
def test_backward_matches_torch(rng, shape, tiles):
    x = rng.standard_normal(shape)
    for name, (f, tf) in CASES.items():
        for dim in _dims(len(shape)):
            for keepdim in (False, True):
                X = tt.from_numpy(x, tiles).requires_grad_()
                y = f(X, dim, keepdim)
                g = rng.standard_normal(y.shape)
                y.backward(tt.from_numpy(g, y.tiles))
                T = torch.from_numpy(x).requires_grad_()
                tf(T, dim, keepdim).backward(torch.from_numpy(g))
                np.testing.assert_allclose(X.grad.numpy(), T.grad.numpy(), rtol=1e-10, atol=1e-10,
                                           err_msg=f"{name} {dim} {keepdim}")


def test_amax_amin_gradient_is_split_among_ties(rng):
    """torch: evenly distributed among the tied extremes of the whole reduced set (also over
    non-consecutive dims, where the ties per run differ)."""
    x = rng.integers(-2, 3, size=(5, 7, 6)).astype(np.float64)
    for fn in ("amax", "amin"):
        for dim in (None, 1, (0, 2), (-1, 0), (0, 1)):
            for keepdim in (False, True):
                X = tt.from_numpy(x, (2, 3, 4)).requires_grad_()
                y = getattr(tt, fn)(X, dim, keepdim=keepdim)
                g = rng.standard_normal(y.shape)
                y.backward(tt.from_numpy(g, y.tiles))
                T = torch.from_numpy(x).requires_grad_()
                getattr(torch, fn)(T, _torch_dim(dim), keepdim=keepdim).backward(torch.from_numpy(g))
                np.testing.assert_allclose(X.grad.numpy(), T.grad.numpy(), rtol=1e-12, atol=1e-12)
    X = tt.from_numpy(x, (2, 3, 4)).requires_grad_()      # max(x): the full reduction, amax's gradient
    tt.max(X).backward()
    T = torch.from_numpy(x).requires_grad_()
    torch.max(T).backward()
    np.testing.assert_allclose(X.grad.numpy(), T.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("dtype", FLOATS)
def test_amax_amin_nan_and_inf_in_long_runs(rng, dtype):
    """Runs long enough for the vectorised path (and its tail), whole tiles along axis 0 (reduced
    within the tiles first): a NaN anywhere wins, infinities are ordinary extremes."""
    x = rng.standard_normal((6, 43)).astype(dtype)
    x[1, 37] = np.nan      # row 1, in the tail of a run of 43 (after 2 vector steps)
    x[4, 5] = np.nan       # row 4, inside the vector lanes
    x[2, 20] = np.inf
    x[3, :] = -np.inf      # a row of -inf only
    x[0, 17] = -np.inf
    for tiles in ((2, 43), (6, 43), (2, 20)):
        X = tt.from_numpy(x, tiles)
        for fn in ("amax", "amin"):
            for dim in (None, 0, -1):
                for keepdim in (False, True):
                    got = getattr(tt, fn)(X, dim, keepdim=keepdim).numpy()
                    want = getattr(torch, fn)(torch.from_numpy(x), _torch_dim(dim), keepdim=keepdim).numpy()
                    np.testing.assert_array_equal(got, want, err_msg=f"{fn} {dim} {keepdim} {tiles}")


@pytest.mark.parametrize("dtype", FLOATS)
def test_max_min_along_dim_values_indices_and_ties(rng, dtype):
    x = rng.integers(-2, 3, size=(5, 7, 6)).astype(dtype)   # many ties: the first index wins
    x[1, 2, 3] = np.nan                                       # NaN wins (its index)
    X, T = tt.from_numpy(x, (2, 3, 4)), torch.from_numpy(x)
    for fn in ("max", "min"):
        for dim in (0, 1, 2, -1, -3):
            for keepdim in (False, True):
                got = getattr(tt, fn)(X, dim, keepdim)
                want = getattr(torch, fn)(T, dim, keepdim)
                assert type(got).__name__ == fn and got._fields == ("values", "indices")
                assert got.indices.dtype == np.int64 and got.values.shape == tuple(want.values.shape)
                np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
                np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
                arg = getattr(tt, "arg" + fn)(X, dim, keepdim)
                np.testing.assert_array_equal(arg.numpy(), getattr(torch, "arg" + fn)(T, dim, keepdim).numpy())
        np.testing.assert_array_equal(getattr(tt, fn)(X).numpy(), getattr(torch, fn)(T).numpy())


def test_argmax_argmin_flat_first_index(rng):
    for x in (rng.integers(-2, 3, size=(5, 7, 6)).astype(np.float64), rng.standard_normal((5, 7, 6)),
              np.ones((5, 7, 6))):
        X, T = tt.from_numpy(x, (2, 3, 4)), torch.from_numpy(x)
        for fn in ("argmax", "argmin"):
            for keepdim in (False, True):
                got, want = getattr(tt, fn)(X, keepdim=keepdim), getattr(torch, fn)(T, keepdim=keepdim)
                assert got.shape == tuple(want.shape) and got.dtype == np.int64
                np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_max_along_dim_gradient_goes_to_the_index(rng):
    x = rng.integers(-2, 3, size=(11, 7)).astype(np.float64)
    for fn in ("max", "min"):
        for dim in (0, 1):
            for keepdim in (False, True):
                X = tt.from_numpy(x, (4, 3)).requires_grad_()
                v, _ = getattr(tt, fn)(X, dim, keepdim)
                g = rng.standard_normal(v.shape)
                v.backward(tt.from_numpy(g, v.tiles))
                T = torch.from_numpy(x).requires_grad_()
                getattr(torch, fn)(T, dim, keepdim).values.backward(torch.from_numpy(g))
                np.testing.assert_array_equal(X.grad.numpy(), T.grad.numpy())


def test_keepdim_costs_no_copy(rng):
    """keepdim results are written by the same span tasks (size-1 axes in tiles of 1)."""
    X = tt.from_numpy(rng.standard_normal((5, 7, 6)), (2, 3, 4))
    counts = []
    for keepdim in (False, True):
        tt.wait()
        before = [lib.tt_kernel_ntasks(k) for k in range(lib.tt_kernel_count())]
        y = tt.sum(X, (0, 2), keepdim=keepdim)
        counts.append([lib.tt_kernel_ntasks(k) - b for k, b in enumerate(before)])
    assert counts[0] == counts[1]
    assert y.shape == (1, 7, 1) and y.tiles == (1, 3, 1)


def test_sum_mean_dtype_and_0d(rng):
    x = rng.standard_normal((6, 5)).astype(np.float32)
    X = tt.from_numpy(x, (4, 3))
    y = tt.sum(X, 1, dtype=np.float64)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y.numpy(), x.astype(np.float64).sum(1), rtol=1e-12)
    assert tt.mean(X, dtype=np.float64).dtype == np.float64
    s = tt.from_numpy(np.array(2.5))
    for fn in (tt.sum, tt.mean, tt.amax, tt.amin):
        assert fn(s, 0).shape == () and float(fn(s, -1)) == 2.5
    assert math.isnan(float(tt.var(s))) and float(tt.var(s, correction=0)) == 0.0
    v, i = tt.max(s, 0)
    assert float(v) == 2.5 and i.dtype == np.int64 and int(i.item()) == 0 and int(tt.argmin(s).item()) == 0
    assert float(tt.norm(s, 3.0)) == 2.5 and float(tt.logsumexp(s, 0)) == 2.5


def test_vjp_reductions(rng):
    x = rng.standard_normal((5, 7, 6))
    tiles = [(2, 3, 4)]
    for fn in (lambda t: tt.sum(t, (0, 2)), lambda t: tt.mean(t, (-1, 0), keepdim=True),
               lambda t: tt.var(t, (0, 2)), lambda t: tt.std(t, 1, keepdim=True), lambda t: tt.amax(t, (0, 2)),
               lambda t: tt.amin(t, 1), lambda t: tt.logsumexp(t, (0, 2)), lambda t: tt.norm(t, 2, (0, 2)),
               lambda t: tt.norm(t, 3.0, 1), lambda t: tt.max(t, 1).values, lambda t: tt.min(t, 0, True).values,
               lambda t: tt.logsumexp(t, 1) * tt.sum(t, 1)):
        vjp_check(fn, [x], tiles)


def test_bad_input(rng, nothing_submitted):
    X = tt.from_numpy(rng.standard_normal((4, 6)), (2, 3))
    for fn in (tt.sum, tt.mean, tt.var, tt.std, tt.amax, tt.amin, tt.logsumexp, tt.argmax, tt.max,
               lambda x, d: tt.norm(x, 2, d)):
        with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-2, 1\], "
                                             r"but got 2\)"):
            fn(X, 2)
        with pytest.raises(IndexError, match="but got -3"):
            fn(X, -3)
        with pytest.raises(TypeError, match="must be a tiletrain Tensor"):
            fn(np.zeros((4, 6)), 0)
        if fn is tt.mean:  # sum of int64 is int64 and mean raises, as torch (tests/nn/test_torch_surface.py)
            with pytest.raises(RuntimeError, match="could not infer output dtype"):
                fn(tt.from_numpy(np.zeros((4, 6), dtype=np.int64), (2, 3)), 0)
        elif fn not in (tt.sum, tt.max, tt.min, tt.argmax, tt.argmin):  # those take int64, as torch
            with pytest.raises(TypeError, match="input has dtype int64; this op supports float32"):
                fn(tt.from_numpy(np.zeros((4, 6), dtype=np.int64), (2, 3)), 0)
    for fn in (tt.sum, tt.amax, tt.var, tt.logsumexp):
        with pytest.raises(ValueError, match="dim 0 appears multiple times"):
            fn(X, (0, -2))
        with pytest.raises(IndexError, match="but got 5"):
            fn(X, (0, 5))
        with pytest.raises(TypeError, match="dim must be an int"):
            fn(X, 0.5)
        with pytest.raises(TypeError, match="keepdim must be a bool"):
            fn(X, 0, keepdim=1)
    with pytest.raises(TypeError, match="dim must be an int"):
        tt.max(X, (0, 1))
    with pytest.raises(ValueError, match="p must be"):
        tt.norm(X, "nuc")
    with pytest.raises(TypeError, match="dtype must be a float dtype"):
        tt.sum(X, dtype=np.int64)
