"""Creation functions against torch: values, shape, dtype, tilings with leftover tiles; random
tensors: statistics, reproducibility for a seed and across tilings; bad input; the tile limit."""
import numpy as np
import pytest
import torch

import tiletrain as tt
from conftest import GRIDS_2D, GRIDS_ND

F32, F64, I64 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64)
TORCH = {F32: torch.float32, F64: torch.float64, I64: torch.int64}


def check(t, expected: torch.Tensor, tiles=None, exact=True):
    assert isinstance(t, tt.Tensor)
    assert t.shape == tuple(expected.shape)
    assert t.dtype == np.dtype(str(expected.dtype).replace("torch.", ""))
    if tiles is not None:
        assert t.tiles == tuple(min(a, b) for a, b in zip(np.broadcast_to(tiles, len(t.shape)), t.shape))
    if exact:
        np.testing.assert_array_equal(t.numpy(), expected.numpy())
    else:
        # torch's vectorised loops add the step to a block's first value: last-bit differences
        np.testing.assert_allclose(t.numpy(), expected.numpy(), rtol=2e-7 if t.dtype == F32 else 1e-15,
                                   atol=1e-6 if t.dtype == F32 else 1e-14)


@pytest.mark.parametrize("shape,tiles", GRIDS_2D + GRIDS_ND)
def test_zeros_ones_full_empty(shape, tiles):
    check(tt.zeros(*shape, tiles=tiles), torch.zeros(*shape), tiles)
    check(tt.zeros(shape, tiles=tiles, dtype=np.float64), torch.zeros(shape, dtype=torch.float64), tiles)
    check(tt.ones(list(shape), tiles=tiles), torch.ones(list(shape)), tiles)
    check(tt.ones(*shape, dtype=tt.int64, tiles=tiles), torch.ones(*shape, dtype=torch.int64), tiles)
    check(tt.full(shape, 2.5, tiles=tiles), torch.full(shape, 2.5), tiles)
    check(tt.full(shape, 7, tiles=tiles), torch.full(shape, 7), tiles)  # int fill_value -> int64
    check(tt.full(shape, 7, dtype=np.float64, tiles=tiles), torch.full(shape, 7, dtype=torch.float64), tiles)
    e = tt.empty(*shape, tiles=tiles)
    assert e.shape == shape and e.dtype == F32 and e.tiles == tiles


def test_size_forms_like_torch():
    for got, ref in [(tt.zeros(size=(2, 3)), torch.zeros(size=(2, 3))), (tt.ones([4]), torch.ones([4])),
                     (tt.empty(size=[3, 1]).shape, torch.empty(size=[3, 1]).shape),
                     (tt.rand(size=(5,)).shape, torch.rand(size=(5,)).shape),
                     (tt.randint(3, size=(2, 2)).shape, torch.randint(3, size=(2, 2)).shape)]:
        if isinstance(got, tt.Tensor):
            check(got, ref)
        else:
            assert got == tuple(ref)


def test_zero_dim_and_requires_grad():
    check(tt.zeros(()), torch.zeros(()))
    check(tt.full((), 3.0), torch.full((), 3.0))
    x = tt.ones(3, 2, requires_grad=True)
    assert x.requires_grad and x.is_leaf
    (x * 2.0).backward(tt.ones(3, 2))
    np.testing.assert_array_equal(x.grad.numpy(), np.full((3, 2), 2.0, np.float32))


@pytest.mark.parametrize("shape,tiles", GRIDS_2D + GRIDS_ND)
def test_like_functions_keep_tiles_and_dtype(shape, tiles):
    x = tt.from_numpy(np.arange(np.prod(shape), dtype=np.float64).reshape(shape), tiles=tiles)
    ref = torch.from_numpy(x.numpy())
    check(tt.zeros_like(x), torch.zeros_like(ref), tiles)
    check(tt.ones_like(x, dtype=np.float32), torch.ones_like(ref, dtype=torch.float32), tiles)
    check(tt.full_like(x, -1.5), torch.full_like(ref, -1.5), tiles)
    check(tt.full_like(x, 4, dtype=tt.int64), torch.full_like(ref, 4, dtype=torch.int64), tiles)
    for t in (tt.empty_like(x), tt.rand_like(x), tt.randn_like(x)):
        assert t.shape == shape and t.tiles == tiles and t.dtype == F64
    assert tt.zeros_like(x, tiles=2).tiles == tuple(min(2, d) for d in shape)
    r = tt.rand_like(x, requires_grad=True)
    assert r.requires_grad


@pytest.mark.parametrize("data", [1.5, 3, [1.0, 2.5], [[1, 2], [3, 4]], [[0.1, 0.2], [3, 4]], [1, 2.5],
                                  np.arange(6.0).reshape(2, 3), np.arange(4), np.float64(2.5),
                                  np.ones((2, 2), np.float32), np.ones(3, np.float16), [True, False],
                                  np.eye(3, dtype=bool), np.bool_(True)])
def test_tensor_infers_dtype_like_torch(data):
    t, ref = tt.tensor(data), torch.tensor(data)
    assert t.shape == tuple(ref.shape) and t.ndim == ref.ndim
    assert t.dtype.name == str(ref.dtype).replace("torch.", "")
    np.testing.assert_array_equal(t.numpy(), ref.numpy())


def test_tensor_with_dtype_converts_python_numbers_once():
    for data, dt in [([0.1, 1 / 3], tt.float64), (0.1, tt.float64), ([[1, 2**40 + 1]], tt.float64),
                     ([2.7, -2.7], tt.int64), ([0.1], tt.float16)]:
        t, ref = tt.tensor(data, dtype=dt), torch.tensor(data, dtype=getattr(torch, dt.name))
        assert t.dtype == dt and t.tolist() == ref.tolist()


@pytest.mark.parametrize("shape,tiles", GRIDS_2D + GRIDS_ND)
def test_tensor_dtype_tiles_requires_grad(shape, tiles):
    a = np.random.default_rng(0).standard_normal(shape)
    t = tt.tensor(a, dtype=np.float32, requires_grad=True, tiles=tiles)
    assert t.tiles == tiles and t.requires_grad and t.dtype == F32
    np.testing.assert_array_equal(t.detach().numpy(), a.astype(np.float32))
    u = tt.tensor(t)  # a copy of a tiletrain tensor
    assert not u.requires_grad and u.dtype == F32
    np.testing.assert_array_equal(u.numpy(), t.detach().numpy())
    ints = tt.tensor(a * 10, dtype=tt.int64)
    assert ints.numpy().tolist() == torch.tensor(a * 10, dtype=torch.int64).tolist()


ARANGE = [(5,), (0, 5), (2, 11, 3), (10, 1, -2), (1, 2.5, 0.5), (-1.0, 1.0, 0.1), (0.0, 1.0, 1 / 3), (5.5,),
          (-3, 7), (0, 100, 7), (1, 0, -0.3)]


@pytest.mark.parametrize("args", ARANGE)
@pytest.mark.parametrize("tiles", [None, 3])
def test_arange(args, tiles):
    check(tt.arange(*args, tiles=tiles), torch.arange(*args), exact=False)
    for dt in (F32, F64, I64):
        if dt == I64 and any(isinstance(a, float) for a in args):
            continue
        check(tt.arange(*args, dtype=dt, tiles=tiles), torch.arange(*args, dtype=TORCH[dt]), exact=dt == I64)


def test_arange_keywords():
    check(tt.arange(start=2, end=9, step=2), torch.arange(start=2, end=9, step=2))
    check(tt.arange(end=4), torch.arange(end=4))


@pytest.mark.parametrize("start,end", [(0, 1), (-3, 10), (10, -3), (0.1, 0.7), (-1e3, 1e-3), (5, 5)])
@pytest.mark.parametrize("steps", [1, 2, 7, 8, 100, 101])
@pytest.mark.parametrize("tiles", [None, 3])
def test_linspace(start, end, steps, tiles):
    for dt in (None, F32, F64):
        ref = torch.linspace(start, end, steps, dtype=None if dt is None else TORCH[dt])
        check(tt.linspace(start, end, steps, dtype=dt, tiles=tiles), ref, exact=False)
    if isinstance(start, int):
        check(tt.linspace(start, end, steps, dtype=tt.int64, tiles=tiles),
              torch.linspace(start, end, steps, dtype=torch.int64))


def test_linspace_float32_is_torch_within_an_ulp():
    """torch's symmetric formula in float32: end exactly at the end, every value within one ulp
    of the largest magnitude (where a step's float32 rounding can differ)."""
    for steps in (7, 8, 1000, 1001):
        got, ref = tt.linspace(-3.3, 10.7, steps, tiles=64).numpy(), torch.linspace(-3.3, 10.7, steps).numpy()
        assert got[-1] == ref[-1] == np.float32(10.7) and got[0] == ref[0]
        assert np.abs(got - ref).max() <= np.spacing(np.float32(10.7))


@pytest.mark.parametrize("fn", ["rand", "randn"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_random_statistics(fn, dtype):
    x = getattr(tt, fn)(1000, 100, dtype=dtype, tiles=(300, 33)).numpy()
    assert x.dtype == dtype and x.shape == (1000, 100)
    if fn == "rand":
        assert x.min() >= 0.0 and x.max() < 1.0
        assert abs(x.mean() - 0.5) < 0.005 and abs(x.var() - 1 / 12) < 0.002
    else:
        assert abs(x.mean()) < 0.01 and abs(x.var() - 1.0) < 0.02
        assert abs(np.mean(x ** 3)) < 0.05 and abs(np.mean(x ** 4) - 3.0) < 0.1  # skew, kurtosis
    assert len(np.unique(x)) > 0.99 * x.size


def test_randint_statistics_and_dtypes():
    x = tt.randint(-3, 5, (100000,), tiles=999).numpy()
    assert x.dtype == np.int64 and x.min() == -3 and x.max() == 4
    counts = np.bincount(x + 3)
    assert np.all(np.abs(counts / x.size - 1 / 8) < 0.01)
    y = tt.randint(10, size=(20, 30), dtype=np.float64)
    assert y.dtype == F64 and set(np.unique(y.numpy())) <= set(range(10))
    assert tt.randint(3, (4,)).dtype == I64


@pytest.mark.parametrize("fn,args", [("rand", ()), ("randn", ()), ("randint", (-5, 17))])
def test_random_same_values_for_any_tiling_and_seed(fn, args):
    shape = (5, 4, 6)
    outs = []
    for tiles in [(5, 4, 6), (2, 3, 4), (1, 1, 5), (4, 1, 1)]:
        tt.manual_seed(42)
        outs.append(getattr(tt, fn)(*args, shape, tiles=tiles).numpy())
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])
    tt.manual_seed(43)
    assert not np.array_equal(getattr(tt, fn)(*args, shape).numpy(), outs[0])
    # two calls after one seed differ; the same generator state gives the same values
    g = tt.Generator().manual_seed(7)
    a = getattr(tt, fn)(*args, shape, generator=g).numpy()
    b = getattr(tt, fn)(*args, shape, generator=g).numpy()
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(getattr(tt, fn)(*args, shape, generator=tt.Generator().manual_seed(7)).numpy(), a)


@pytest.mark.parametrize("shape,tiles", GRIDS_ND)
def test_random_values_are_torchs_for_any_tiling(shape, tiles):
    """randn/rand/randint with a seeded generator give torch's values, whatever the tiling."""
    for fn, dt, tdt in (("randn", tt.float64, torch.float64), ("rand", tt.float32, torch.float32)):
        ours = getattr(tt, fn)(shape, generator=tt.Generator().manual_seed(5), dtype=dt, tiles=tiles).numpy()
        ref = getattr(torch, fn)(shape, generator=torch.Generator().manual_seed(5), dtype=tdt).numpy()
        np.testing.assert_allclose(ours, ref, rtol=1e-15 if dt == tt.float64 else 0, atol=0)
    ours = tt.randint(-3, 9, shape, generator=tt.Generator().manual_seed(6), tiles=tiles).numpy()
    np.testing.assert_array_equal(ours, torch.randint(-3, 9, shape, generator=torch.Generator().manual_seed(6)).numpy())


def test_generator_state_round_trips():
    g = tt.Generator().manual_seed(3)
    g.next_seed()
    state = g.get_state()
    a = tt.randn(4, 5, generator=g).numpy()
    np.testing.assert_array_equal(tt.randn(4, 5, generator=g.set_state(state)).numpy(), a)
    assert g.initial_seed() == 3


def test_manual_seed_is_shared_with_dropout():
    x = tt.ones(50, 40, tiles=(16, 16))
    tt.manual_seed(1)
    a = tt.functional.dropout(x, 0.5).numpy()
    r1 = tt.rand(10).numpy()
    tt.manual_seed(1)
    np.testing.assert_array_equal(tt.functional.dropout(x, 0.5).numpy(), a)
    np.testing.assert_array_equal(tt.rand(10).numpy(), r1)


def test_bad_input(nothing_submitted):
    with pytest.raises(ValueError, match=r"zeros: size\[1\] = -2; sizes must be non-negative"):
        tt.zeros(3, -2)
    with pytest.raises(ValueError, match=r"ones: size\[0\] = 0; tiletrain has no empty tensors"):
        tt.ones((0,))
    with pytest.raises(TypeError, match=r"rand: size must be ints or one tuple of ints, size\[0\] is float"):
        tt.rand(2.0, 3)
    with pytest.raises(TypeError, match=r"zeros\(\) missing 1 required positional argument: 'size'"):
        tt.zeros()
    with pytest.raises(ValueError, match="arange: step must be nonzero"):
        tt.arange(0, 5, 0)
    with pytest.raises(ValueError, match="arange: upper bound and lower bound inconsistent with step sign"):
        tt.arange(5, 0, 1)
    with pytest.raises(ValueError, match="arange: start == end"):
        tt.arange(3, 3)
    with pytest.raises(TypeError, match="arange: end must be a real number"):
        tt.arange(0, "5")
    with pytest.raises(ValueError, match="linspace: number of steps must be non-negative"):
        tt.linspace(0, 1, -1)
    with pytest.raises(TypeError, match="linspace: steps must be an int"):
        tt.linspace(0, 1, 2.5)
    with pytest.raises(TypeError, match=r"rand: dtype int64 is not supported \(supported: float32, "):
        tt.rand(3, dtype=tt.int64)
    with pytest.raises(TypeError, match="randn: unsupported dtype int32"):
        tt.randn(3, dtype=np.int32)
    with pytest.raises(ValueError, match="randint: .*from=5 >= to=5"):
        tt.randint(5, 5, (3,))
    with pytest.raises(TypeError, match="randint: low must be an int"):
        tt.randint(0.5, 5, (3,))
    with pytest.raises(TypeError, match=r"randint: expected randint\(high, size\)"):
        tt.randint(5)
    with pytest.raises(TypeError, match="rand: generator must be a tiletrain.Generator"):
        tt.rand(3, generator=3)
    with pytest.raises(RuntimeError, match="only Tensors of floating point dtype can require gradients"):
        tt.tensor([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError, match="only Tensors of floating point dtype can require gradients"):
        tt.zeros(2, dtype=tt.int64, requires_grad=True)
    with pytest.raises(TypeError, match="tensor: NumPy dtype int32 is not supported"):
        tt.tensor(np.ones(3, np.int32))
    with pytest.raises(ValueError, match="tensor: data is not a rectangular array"):
        tt.tensor([[1, 2], [3]])
    with pytest.raises(TypeError, match="tensor: data of type <U1 is not a number array"):
        tt.tensor(["a"])
    with pytest.raises(TypeError, match="full: size must be a tuple of ints, not int"):
        tt.full(3, 1.0)
    with pytest.raises(TypeError, match="randint: size must be a tuple of ints, got int"):
        tt.randint(5, 3)
    with pytest.raises(TypeError, match="zeros: size given both positionally and as size="):
        tt.zeros(2, size=(2,))
    with pytest.raises(TypeError, match="full: fill_value must be a real number"):
        tt.full((2,), None)
    with pytest.raises(TypeError, match="zeros_like: input must be a tiletrain Tensor"):
        tt.zeros_like(np.zeros(3))


def test_tile_limit(monkeypatch, nothing_submitted):
    with pytest.raises(ValueError, match=r"shape \(2048, 2048\) with tiles \(1, 1\) makes 4,194,304 "
                                         r"tiles \(grid \(2048, 2048\)\), more than the limit of 1,000,000 "
                                         r"tiles per tensor; use larger tiles, or raise the limit with "
                                         r"tiletrain.set_max_tiles\(n\) or the environment variable "
                                         "TILETRAIN_MAX_TILES"):
        tt.from_numpy(np.ones((2048, 2048)), tiles=1)
    assert tt.get_max_tiles() == 1_000_000
    old = tt.set_max_tiles(12)
    try:
        tt.TensorTraits((4, 3), 1)  # 12 tiles: at the limit
        with pytest.raises(ValueError, match="makes 16 tiles"):
            tt.zeros(4, 4, tiles=1)
        with pytest.raises(ValueError, match="set_max_tiles: n must be a positive int"):
            tt.set_max_tiles(0)
    finally:
        tt.set_max_tiles(old)
    from tiletrain.tensors import traits
    monkeypatch.setenv("TILETRAIN_MAX_TILES", "77")
    assert traits._env_max_tiles() == 77
    monkeypatch.setenv("TILETRAIN_MAX_TILES", "lots")
    with pytest.raises(ValueError, match="TILETRAIN_MAX_TILES must be a positive integer, got 'lots'"):
        traits._env_max_tiles()
