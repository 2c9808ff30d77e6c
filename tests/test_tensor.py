"""Tiled tensors: geometry, round trips, factories, dtypes."""
import gc

import numpy as np
import pytest
import torch

import tiletrain as tt
from tiletrain._ffi import check, ffi, lib
from conftest import GRIDS_2D, GRIDS_ND


def test_traits_geometry():
    tr = tt.TensorTraits((11, 7, 4), (4, 3, 4))
    assert tr.grid == (3, 3, 1) and tr.ntiles == 9 and tr.ndim == 3
    assert tr.leftover == (3, 1, 4)
    assert tr.tile_shape_at((0, 0, 0)) == (4, 3, 4)
    assert tr.tile_shape_at((2, 2, 0)) == (3, 1, 4)
    assert tr.tile_shape_at((2, 1, 0)) == (3, 3, 4)
    assert list(tr.tile_indices())[:2] == [(0, 0, 0), (0, 1, 0)]
    assert sum(np.prod(tr.tile_shape_at(i)) for i in tr.tile_indices()) == 11 * 7 * 4
    assert tt.TensorTraits((5, 3), 10).tiles == (5, 3)  # tiles larger than the shape are clamped
    assert tt.TensorTraits((1000, 3)).tiles == (512, 3)  # default tile
    with pytest.raises(IndexError, match="axis 1"):
        tr.tile_shape_at((0, 3, 0))
    with pytest.raises(ValueError, match="2 dimensions, expected 3"):
        tr.tile_shape_at((0, 0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("shape,tiles", GRIDS_2D + GRIDS_ND)
def test_roundtrip(rng, shape, tiles, dtype):
    a = (rng.standard_normal(shape) * 100).astype(dtype)
    t = tt.from_numpy(a, tiles)
    assert t.shape == shape and t.dtype == dtype and t.ndim == len(shape)
    assert t.tiles == tuple(min(x, s) for x, s in zip(tiles, shape))
    assert t.grid == tuple(-(-s // x) for s, x in zip(shape, t.tiles))
    back = t.numpy()
    assert back.flags.c_contiguous and back.dtype == dtype
    np.testing.assert_array_equal(back, a)
    np.testing.assert_array_equal(np.asarray(t), a)


def test_roundtrip_non_contiguous_inputs(rng):
    base = rng.standard_normal((12, 10))
    for view in (base.T, base[::2, 1::3], base[::-1, ::-2], np.asfortranarray(base)):
        np.testing.assert_array_equal(tt.from_numpy(view, (3, 4)).numpy(), view)


def test_zero_dim_and_scalars():
    t = tt.from_numpy(np.array(3.5))
    assert t.shape == () and float(t) == 3.5
    assert tt.from_numpy(np.float64(2.0)).item() == 2.0


def test_factories():
    z = tt.zeros((5, 3), tiles=(2, 2), dtype=np.float64)
    np.testing.assert_array_equal(z.numpy(), np.zeros((5, 3)))
    f = tt.full((4,), 2.5, tiles=3)
    np.testing.assert_array_equal(f.numpy(), np.full(4, 2.5, np.float32))
    o = tt.ones((2, 2), dtype=np.int64)
    np.testing.assert_array_equal(o.numpy(), np.ones((2, 2), np.int64))
    e = tt.empty((3, 3), tiles=2)
    assert e.shape == (3, 3)
    with pytest.raises(ValueError, match="never been written"):
        e.numpy()
    tt.fill_(e, 1.0)
    np.testing.assert_array_equal(e.numpy(), np.ones((3, 3), np.float32))


def test_numpy_out_argument(rng):
    a = rng.standard_normal((5, 4))
    t = tt.from_numpy(a, 2)
    out = np.empty((5, 4))
    assert t.numpy(out=out) is out
    np.testing.assert_array_equal(out, a)
    with pytest.raises(ValueError, match="C-contiguous"):
        t.numpy(out=np.empty((4, 5)).T)
    ro = np.empty((5, 4))
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        t.numpy(out=ro)
    with pytest.raises(ValueError, match="shape"):
        t.numpy(out=np.empty((5, 5)))
    with pytest.raises(TypeError, match="numpy.ndarray"):
        t.numpy(out=[0.0] * 20)


def _numpy_outcome(fn):
    """fn()'s values, or the type and message of what it raised."""
    try:
        return np.asarray(fn(), dtype=np.float64)
    except (RuntimeError, TypeError) as exc:
        return type(exc), str(exc)


def _numpy_cases(lib, x, no_grad):
    """The ways of reading a tensor as NumPy, on leaf x (requires_grad=True), in library lib."""
    y = x * 2.0
    p = lib.nn.Parameter(x.detach().clone())
    return {"leaf": lambda: x.numpy(), "computed": lambda: y.numpy(), "parameter": lambda: p.numpy(),
            "asarray": lambda: np.asarray(y), "array": lambda: np.array(p),
            "array dtype": lambda: np.asarray(x, dtype=np.float32), "force": lambda: y.numpy(force=True),
            "positional": lambda: x.numpy(True), "detach": lambda: y.detach().numpy(),
            "detached asarray": lambda: np.asarray(p.detach()), "no_grad": lambda: _under(no_grad, y.numpy),
            "no_grad asarray": lambda: _under(no_grad, lambda: np.asarray(p)),
            "item": lambda: y.sum().item(), "tolist": lambda: y.tolist()}


def _under(ctx, fn):
    with ctx():
        return fn()


@pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")  # torch's __array__
def test_numpy_refuses_tensors_that_require_grad_as_torch():
    """numpy() and np.asarray on a tensor that requires grad raise torch's RuntimeError while
    grad mode is on; force=True, detach(), no_grad, item() and tolist() read it."""
    a = np.array([1.5, -2.0, 3.25])
    ours = _numpy_cases(tt, tt.tensor(a, requires_grad=True), tt.no_grad)
    theirs = _numpy_cases(torch, torch.tensor(a, requires_grad=True), torch.no_grad)
    refused = 0
    for name in theirs:
        want, got = _numpy_outcome(theirs[name]), _numpy_outcome(ours[name])
        if isinstance(want, tuple):
            refused += 1
            assert got[0] is want[0], (name, got, want)
            if want[0] is RuntimeError:
                assert got[1] == want[1], name
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)
    assert refused == 7


def test_int64_token_ids():
    ids = np.arange(20, dtype=np.int64).reshape(4, 5) * 1_000_000_007
    np.testing.assert_array_equal(tt.from_numpy(ids, (3, 2)).numpy(), ids)


def _live_bytes() -> int:
    gc.collect()
    tt.wait()
    return tt.current().memory()["live_tensor_bytes"]  # tiles of tensors not yet freed (C counter)


@pytest.mark.parametrize("leak", [False, True])
def test_temporaries_are_freed(rng, leak):
    # Dropping tensors unregisters their tiles asynchronously; many temporaries must not pile
    # up: the bytes of live tensors come back to what they were.  With leak=True the test
    # keeps every temporary (a deliberate leak) and checks that the count sees it.
    a = tt.from_numpy(rng.standard_normal((64, 64)), 16)
    before = _live_bytes()
    kept = []
    for _ in range(200):
        b = a * 2.0 + 1.0
        if leak:
            kept.append(b)
    del b
    grown = _live_bytes() - before
    if leak:
        assert grown == 200 * a.numel() * 8  # every kept float64 result
    else:
        assert grown == 0
    assert tt.sum(a).numpy().shape == ()


def test_dropped_tensors_tiles_are_reused_in_dataflow_order(rng):
    """A dropped tensor's tiles go to the next new tensor of their size once the tasks that
    used them have ended (csrc/tile.c, "reuse of freed tiles"); results never change: a
    tensor dropped while its readers are pending is not reused before they ran."""
    a_np = rng.standard_normal((11, 7))
    a = tt.from_numpy(a_np, (4, 3))
    b = a * 2.0
    c = b + 1.0                       # reads b's tiles
    del b                             # freed while c's tasks may still be pending
    d = a * 3.0                       # never writes a tile c still reads
    e = a.astype(np.float32)          # another dtype: other tiles
    f = tt.from_numpy(a_np, (4, 3))   # a synchronous write: never waits for another tensor's readers
    np.testing.assert_allclose(c.numpy(), a_np * 2.0 + 1.0)
    np.testing.assert_allclose(d.numpy(), a_np * 3.0)
    np.testing.assert_allclose(e.numpy(), a_np.astype(np.float32))
    np.testing.assert_allclose(f.numpy(), a_np)
    x = a * 4.0
    x.numpy()                         # x's tasks are done: dropping it keeps its tiles idle
    del x
    stats = ffi.new("tt_reuse_stats *")
    check(lib.tt_reuse_get_stats(stats))
    if stats.handles:                 # (not under a memory limit or MPI)
        taken = stats.taken
        y = a * 5.0                   # takes x's 9 tiles
        check(lib.tt_reuse_get_stats(stats))
        assert stats.taken - taken == 9
        np.testing.assert_allclose(y.numpy(), a_np * 5.0)


def test_results_with_and_without_reuse_match(rng):
    """The same loop with nothing kept for reuse (reuse_mb=0) and with the default cap."""
    x_np = rng.standard_normal((9, 10))
    got = {}
    for reuse_mb in (0, None):
        tt.shutdown()
        tt.init(ncpu=2, reuse_mb=reuse_mb)
        x = tt.from_numpy(x_np, (4, 4))
        for _ in range(5):   # each round drops the last round's temporaries
            x = (x * 0.5 + 1.0).tanh()
        got[reuse_mb] = x.numpy()
        del x
    tt.shutdown()
    np.testing.assert_array_equal(got[0], got[None])

