"""float16 and bfloat16 tensors: storage round trips, casts (bit-exact against NumPy and
ml_dtypes), matmul and sum computed and accumulated in float32 with one final rounding,
element-wise ops, autograd, and a TypeError from every op without half bodies.

Tolerances: a result rounded once to a type with unit roundoff u (2^-11 for float16, 2^-8
for bfloat16) is within u |exact| of the exact value; float32 products and sums add at most
about K * 2^-24 * sum |a_i b_i| for a length-K contraction, far below that.  A computation
that rounded to the half type along the way (half accumulation, or rounding C between tiles
of the contracted axis) breaks these bounds on the cases below."""
import ml_dtypes
import numpy as np
import pytest

import tiletrain as tt
import tiletrain.functional as F
from conftest import GRIDS_2D, GRIDS_ND, submits_nothing
from tiletrain._ffi import check, ffi, lib
from tiletrain.ops.elementwise import BINARY_OPS
from tiletrain.testing.references import round_to

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
HALVES = [F16, BF16]
IDS = ["float16", "bfloat16"]
U = {F16: 2.0 ** -11, BF16: 2.0 ** -8}


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint16)


def _rand(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def _within_one_rounding(got, exact, dtype, extra=0.0, what=""):
    """got (half) within one rounding of exact (float64), plus `extra` (float32 arithmetic)."""
    assert got.dtype == dtype, f"{what}: dtype {got.dtype}, expected {dtype}"
    exact = np.broadcast_to(np.asarray(exact, np.float64), got.shape)
    err = np.abs(got.astype(np.float64) - exact)
    bound = np.broadcast_to(U[dtype] * np.abs(exact) + extra, got.shape)
    worst = np.unravel_index(np.argmax(err - bound), err.shape) if err.ndim else ()
    assert np.all(err <= bound), (f"{what}: error {err[worst]:.4g} > bound {bound[worst]:.4g} at {worst}: "
                                  f"got {got[worst]}, exact {exact[worst]}")


# ---------------------------------------------------------------------------- storage
@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
@pytest.mark.parametrize("shape,tiles", GRIDS_2D + GRIDS_ND)
def test_from_numpy_numpy_round_trip(rng, shape, tiles, dtype):
    a = _rand(rng, shape, dtype)
    flat = a.reshape(-1)
    special = np.array([np.inf, -np.inf, np.nan, -0.0, 6e-8, 65504.0, 1e-40], np.float64).astype(dtype)
    flat[: min(flat.size, special.size)] = special[: flat.size]
    t = tt.from_numpy(a, tiles)
    assert t.dtype == dtype and t.shape == a.shape and t.tiles == tuple(tiles)
    np.testing.assert_array_equal(_bits(t.numpy()), _bits(a))
    # a non-contiguous source (strided view) round-trips too
    v = np.asarray(a)[..., ::-1] if a.ndim > 1 else a[::-1]
    np.testing.assert_array_equal(_bits(tt.from_numpy(v, tiles).numpy()), _bits(np.ascontiguousarray(v)))


@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
def test_zeros_ones_full(dtype):
    shape, tiles = (11, 7), (4, 3)
    np.testing.assert_array_equal(_bits(tt.zeros(shape, tiles=tiles, dtype=dtype).numpy()), _bits(np.zeros(shape, dtype)))
    np.testing.assert_array_equal(_bits(tt.ones(shape, tiles=tiles, dtype=dtype).numpy()), _bits(np.ones(shape, dtype)))
    for value in (0.1, -3.3e4, 1e-6, 1 + 2.0 ** -8 + 2.0 ** -30):  # the last one: round once from float64
        got = tt.full(shape, value, tiles=tiles, dtype=dtype).numpy()
        np.testing.assert_array_equal(_bits(got), _bits(round_to(np.full(shape, value), dtype)), err_msg=str(value))
    assert tt.full((3,), 1e6, dtype=F16).numpy()[0] == np.inf  # beyond float16's range


def test_dtype_names():
    assert tt.float16 == F16 and tt.bfloat16 == BF16
    assert tt.zeros((2,), dtype="bfloat16").dtype == BF16
    assert tt.zeros((2,), dtype="float16").dtype == F16


# ---------------------------------------------------------------------------- casts
def _float32_cases(rng) -> np.ndarray:
    """Random bit patterns (every exponent, NaNs, infinities, subnormals) plus exact ties of
    both half types, both signs."""
    bits = rng.integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32)
    mant = rng.integers(0, 2**10, 500, dtype=np.uint64).astype(np.uint32)
    exps = rng.integers(103, 142, 500, dtype=np.uint64).astype(np.uint32)  # float16 subnormal .. normal
    ties16 = (exps << 23) | (mant << 13) | 0x1000
    ties_bf = (rng.integers(1, 254, 500, dtype=np.uint64).astype(np.uint32) << 23) | (mant << 16) | 0x8000
    allbits = np.concatenate([bits, ties16, ties_bf, ties16 | 0x80000000])
    return allbits.view(np.float32)


def _assert_same(got, exp, what):
    """Bit-identical, except that NaNs only need to be NaNs in the same places."""
    with np.errstate(invalid="ignore"):
        nan, got_nan = np.isnan(exp.astype(np.float32)), np.isnan(got.astype(np.float32))
    np.testing.assert_array_equal(got_nan, nan, err_msg=f"{what}: NaN positions")
    np.testing.assert_array_equal(_bits(got)[~nan] if got.itemsize == 2 else got[~nan],
                                  _bits(exp)[~nan] if exp.itemsize == 2 else exp[~nan], err_msg=what)


@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
def test_cast_float32_to_half_matches_numpy_bit_for_bit(rng, dtype):
    x = _float32_cases(rng)
    x = x[: x.size - x.size % 64].reshape(-1, 64)
    t = tt.from_numpy(x, (100, 24))  # smaller last tiles on both axes
    h = t.astype(dtype)
    assert h.dtype == dtype and h.tiles == t.tiles
    with np.errstate(over="ignore", invalid="ignore"):
        exp = x.astype(dtype)
    _assert_same(h.numpy(), exp, f"float32 -> {dtype}")
    # back to float32 and float64: exact widening
    _assert_same(h.astype(np.float32).numpy(), exp.astype(np.float32), f"{dtype} -> float32")
    _assert_same(tt.astype(h, np.float64).numpy(), exp.astype(np.float64), f"{dtype} -> float64")


@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
def test_cast_float64_to_half_rounds_once(rng, dtype):
    x = np.concatenate([rng.standard_normal(3000) * 10.0 ** rng.integers(-9, 6, 3000),
                        [1 + 2.0 ** -8 + 2.0 ** -30, 1 + 2.0 ** -11 + 2.0 ** -40, 65519.99, 65520.0, 3.5e38, -1e300,
                         2.0 ** -25, 2.0 ** -25 * (1 + 2.0 ** -40), np.nan, -np.inf]])
    got = tt.from_numpy(x, 256).astype(dtype).numpy()
    _assert_same(got, round_to(x, dtype), f"float64 -> {dtype}")
    if dtype == F16:  # NumPy rounds float64 -> float16 directly: the same numbers
        with np.errstate(over="ignore"):
            _assert_same(got, x.astype(F16), "float64 -> float16 (numpy)")
    # a value that rounding through float32 first would get wrong (a tie in float32, not in float64)
    one_up = tt.from_numpy(np.array([1 + 2.0 ** -8 + 2.0 ** -30])).astype(BF16).numpy()
    assert one_up[0] == 1 + 2.0 ** -7


def test_cast_between_the_half_types(rng):
    x = _rand(rng, (37, 5), F16)
    got = tt.from_numpy(x, (16, 4)).astype(BF16).numpy()
    _assert_same(got, x.astype(np.float32).astype(BF16), "float16 -> bfloat16")


@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
def test_astype_gradient_is_cast_back(rng, dtype):
    x = tt.from_numpy(_rand(rng, (9, 6), np.float32), (4, 4)).requires_grad_()
    y = x.astype(dtype)
    assert y.requires_grad and y.dtype == dtype
    seed = _rand(rng, (9, 6), dtype)
    y.backward(tt.from_numpy(seed, (4, 4)))
    assert x.grad.dtype == np.float32
    np.testing.assert_array_equal(x.grad.numpy(), seed.astype(np.float32))


def test_astype_rejects_non_float_targets():
    x = tt.ones((3,))
    with pytest.raises(TypeError, match="astype: casts between float32, float64, float16 and bfloat16"):
        x.astype(np.int64)
    with pytest.raises(TypeError, match="unsupported dtype int32"):
        x.astype(np.int32)


# ---------------------------------------------------------------------------- matmul
def _f32_sum_error(a, b):
    """A bound on float32 accumulation error of a @ b: K * 2^-24 * |a| @ |b|."""
    return a.shape[-1] * 2.0 ** -24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))


@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("m,k,n,tile", [(6, 5, 4, 8), (37, 45, 29, 16), (64, 96, 40, 32)])
def test_matmul_2d(rng, dtype, ta, tb, m, k, n, tile):
    a = _rand(rng, (k, m) if ta else (m, k), dtype)
    b = _rand(rng, (n, k) if tb else (k, n), dtype)
    A, B = tt.from_numpy(a, tile), tt.from_numpy(b, tile)
    got = tt.matmul(A, B, transpose_a=ta, transpose_b=tb, alpha=0.75).numpy()
    opa = (a.T if ta else a).astype(np.float64)
    opb = (b.T if tb else b).astype(np.float64)
    exact = 0.75 * opa @ opb
    _within_one_rounding(got, exact, dtype, 0.75 * _f32_sum_error(opa, opb), f"matmul {dtype}")
    # the float32 reference of the issue: numpy float32 on the rounded inputs, rounded once;
    # the two orders of float32 summation may differ by one rounding step of the result
    ref32 = (np.float32(0.75) * (opa.astype(np.float32) @ opb.astype(np.float32))).astype(dtype)
    scale = np.abs(ref32.astype(np.float64)).max()
    np.testing.assert_allclose(got.astype(np.float64), ref32.astype(np.float64), rtol=0,
                               atol=2 * U[dtype] * scale)


@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
def test_matmul_over_several_contracted_tiles_rounds_once(dtype):
    """C = 1024 + 0.296875 from the first K tile (of two) and -1024 from the second:
    rounding C to the half type between the tiles would keep 1024 and give 0; float32
    accumulation gives 0.296875, which both half types hold exactly."""
    a = np.array([[1024.0, 0.296875, 1024.0, 0.0]], np.float64)    # exact in both half types
    b = np.array([[1.0], [1.0], [-1.0], [0.0]], np.float64)
    exact = a @ b
    for tile in (4, 2, 1):  # K in one tile, two tiles, four tiles
        A, B = tt.from_numpy(a.astype(dtype), (1, tile)), tt.from_numpy(b.astype(dtype), (tile, 1))
        got = (A @ B).numpy()
        assert got[0, 0] == 0.296875, f"K tiles of {tile}: got {got}"


@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
def test_matmul_batched_and_folded(rng, dtype):
    a = _rand(rng, (3, 13, 10), dtype)
    b = _rand(rng, (3, 10, 7), dtype)
    w = _rand(rng, (10, 6), dtype)
    A = tt.from_numpy(a, (2, 8, 4))
    got = tt.matmul(A, tt.from_numpy(b, (2, 4, 4))).numpy()
    exact = a.astype(np.float64) @ b.astype(np.float64)
    _within_one_rounding(got, exact, dtype, _f32_sum_error(a, b), "batched")
    got = tt.matmul(A, tt.from_numpy(w, (4, 4))).numpy()  # (B, T, C) @ (C, N): a linear layer
    exact = a.astype(np.float64) @ w.astype(np.float64)
    _within_one_rounding(got, exact, dtype, _f32_sum_error(a, w), "folded")


@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True)])
def test_matmul_backward(rng, dtype, ta, tb):
    """Gradients in the half type, each within one rounding of the float64 gradients of the
    same (rounded) inputs, and equal to the float32 reference up to that rounding."""
    m, k, n = 19, 24, 11
    a = _rand(rng, (k, m) if ta else (m, k), dtype)
    b = _rand(rng, (n, k) if tb else (k, n), dtype)
    g = _rand(rng, (m, n), dtype)
    A = tt.from_numpy(a, 8).requires_grad_()
    B = tt.from_numpy(b, 8).requires_grad_()
    C = tt.matmul(A, B, transpose_a=ta, transpose_b=tb)
    C.backward(tt.from_numpy(g, 8))
    assert A.grad.dtype == dtype and B.grad.dtype == dtype
    a64, b64, g64 = (x.astype(np.float64) for x in (a, b, g))
    opa, opb = (a64.T if ta else a64), (b64.T if tb else b64)
    da = g64 @ opb.T                    # d(op(A))
    db = opa.T @ g64                    # d(op(B))
    da, db = (da.T if ta else da), (db.T if tb else db)
    ea = _f32_sum_error(g64, opb.T)
    eb = _f32_sum_error(opa.T, g64)
    _within_one_rounding(A.grad.numpy(), da, dtype, ea.T if ta else ea, "dA")
    _within_one_rounding(B.grad.numpy(), db, dtype, eb.T if tb else eb, "dB")
    # the same step in float32 (tiletrain), rounded: agrees up to one rounding step
    A32 = tt.from_numpy(a.astype(np.float32), 8).requires_grad_()
    B32 = tt.from_numpy(b.astype(np.float32), 8).requires_grad_()
    tt.matmul(A32, B32, transpose_a=ta, transpose_b=tb).backward(tt.from_numpy(g.astype(np.float32), 8))
    for half, full in ((A.grad, A32.grad), (B.grad, B32.grad)):
        h, f = half.numpy().astype(np.float64), full.numpy().astype(np.float64)
        np.testing.assert_allclose(h, f, rtol=0, atol=2 * U[dtype] * np.abs(f).max())


@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
def test_linear_layer_gradients_through_matmul_leading(rng, dtype):
    """x (B, T, C) @ w (C, N): the weight gradient contracts the batch and time tiles
    (matmul_leading), several of them: accumulated in float32, rounded once."""
    x = _rand(rng, (4, 9, 8), dtype)
    w = _rand(rng, (8, 5), dtype)
    g = _rand(rng, (4, 9, 5), dtype)
    X = tt.from_numpy(x, (2, 4, 8)).requires_grad_()
    W = tt.from_numpy(w, (8, 5)).requires_grad_()
    tt.matmul(X, W).backward(tt.from_numpy(g, (2, 4, 5)))
    x64, w64, g64 = (v.astype(np.float64) for v in (x, w, g))
    xf, gf = x64.reshape(-1, 8), g64.reshape(-1, 5)
    _within_one_rounding(W.grad.numpy(), xf.T @ gf, dtype, _f32_sum_error(xf.T, gf), "dW")
    _within_one_rounding(X.grad.numpy(), g64 @ w64.T, dtype, _f32_sum_error(g64, w64.T), "dX")


# ---------------------------------------------------------------------------- sum
@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
@pytest.mark.parametrize("shape,tiles", GRIDS_2D + GRIDS_ND)
def test_sum_all_and_along_axes(rng, shape, tiles, dtype):
    x = _rand(rng, shape, dtype)
    X = tt.from_numpy(x, tiles)
    x64 = x.astype(np.float64)
    tiny = 2.0 ** -22 * np.abs(x64).sum()  # float32 accumulation error, far below one half rounding
    s = tt.sum(X)
    assert s.dtype == dtype and s.shape == ()
    _within_one_rounding(s.numpy(), x64.sum(), dtype, tiny, "sum")
    for axis in range(x.ndim):
        got = (tt.sum(X, dim=axis) * 0.5).numpy()
        _within_one_rounding(got, 0.5 * x64.sum(axis=axis), dtype, tiny, f"sum axis {axis}")
    if x.ndim >= 3:
        got = tt.sum(X, dim=(0, 1)).numpy()
        _within_one_rounding(got, x64.sum(axis=(0, 1)), dtype, tiny, "sum axes (0, 1)")


@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
@pytest.mark.parametrize("tile", [16, 1], ids=["one-tile", "a-tile-per-element"])
def test_sum_accumulates_in_float32(dtype, tile):
    """big + 15 ones: in the half type, big + 1 rounds back to big (ties to even), so a half
    accumulator, within a tile or between tiles, would return big; float32 returns big + 15
    rounded once."""
    big = 2048.0 if dtype == F16 else 256.0
    x = np.array([big] + [1.0] * 15, dtype)
    exact = (big + 15.0)
    X = tt.from_numpy(x, tile)
    _within_one_rounding(tt.sum(X).numpy(), np.float64(exact), dtype, 0.0, "sum_all")
    X2 = tt.from_numpy(x.reshape(16, 1), (tile, 1))
    _within_one_rounding(tt.sum(X2, dim=0).numpy(), np.array([exact]), dtype, 0.0, "sum along axis 0")
    X3 = tt.from_numpy(np.ascontiguousarray(np.tile(x, (3, 1))), (2, tile))
    _within_one_rounding(tt.sum(X3, dim=1).numpy(), np.full(3, exact), dtype, 0.0, "sum along axis 1")


def test_long_float16_sum_is_accurate():
    """10,000 x 0.1 in float16: float16 accumulation stalls at 256 (0.1 is below half an ulp
    there); float32 accumulation gives 999.76, i.e. 1000 in float16."""
    x = np.full(10_000, 0.1, F16)
    exact = x.astype(np.float64).sum()
    got = tt.sum(tt.from_numpy(x, 1000)).numpy()
    assert got == np.float16(exact) == np.float16(1000.0)
    rows = tt.sum(tt.from_numpy(x.reshape(100, 100), (16, 16)), dim=(0, 1)).numpy()
    assert rows == np.float16(exact)


@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
def test_sum_backward_broadcasts_in_the_half_type(rng, dtype):
    x = tt.from_numpy(_rand(rng, (7, 5), dtype), (4, 2)).requires_grad_()
    y = tt.sum(x, dim=0) * 2.0
    seed = _rand(rng, (5,), dtype)
    y.backward(tt.from_numpy(seed, (2,)))
    assert x.grad.dtype == dtype
    _within_one_rounding(x.grad.numpy(), np.broadcast_to(2.0 * seed.astype(np.float64), (7, 5)), dtype, 0.0, "dx")


# ---------------------------------------------------------------------------- element-wise
@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
@pytest.mark.parametrize("shape,tiles", GRIDS_2D)
def test_elementwise_ops_round_once(rng, shape, tiles, dtype):
    a, b = _rand(rng, shape, dtype), _rand(rng, shape, dtype)
    A, B = tt.from_numpy(a, tiles), tt.from_numpy(b, tiles)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    # float32 arithmetic before the one rounding: relative 2^-23 of the operands
    eps = 2.0 ** -22 * (np.abs(a64) + np.abs(b64))
    cases = {
        "add": (A + B, a64 + b64),
        "sub": (A - B, a64 - b64),
        "add alpha beta": (BINARY_OPS["add"](A, B, alpha=0.3, beta=-1.7), 0.3 * a64 - 1.7 * b64),
        "add alpha": (tt.add(A, B, alpha=-1.7), a64 - 1.7 * b64),
        "mul": (BINARY_OPS["mul"](A, B, alpha=3.0), 3.0 * a64 * b64),
        "scale": (A * 0.1, 0.1 * a64),
        "neg": (-A, -a64),
        "add_scalar": (A + 0.3, a64 + 0.3),
        "rsub": (2.5 - A, 2.5 - a64),
        "div by scalar": (A / 3.0, a64 / 3.0),
        "copy": (tt.copy(A), a64),
    }
    for name, (got, exact) in cases.items():
        assert got.tiles == A.tiles
        _within_one_rounding(got.numpy(), exact, dtype, 4 * eps * (1 + np.abs(exact)), name)
    C = tt.copy(A)
    tt.ops.axpy_(C, B, 2.0, 0.5)
    _within_one_rounding(C.numpy(), 0.5 * a64 + 2.0 * b64, dtype, 4 * eps, "axpy_")
    tt.fill_(C, 0.1)
    np.testing.assert_array_equal(_bits(C.numpy()), _bits(round_to(np.full(shape, 0.1), dtype)))


@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
def test_mul_backward_and_gradient_accumulation(rng, dtype):
    a, b = _rand(rng, (6, 5), dtype), _rand(rng, (6, 5), dtype)
    A = tt.from_numpy(a, (4, 4)).requires_grad_()
    B = tt.from_numpy(b, (4, 4))
    y = tt.sum(A * B + A)  # A used twice: the gradients accumulate (axpy in the half type)
    y.backward()
    assert A.grad.dtype == dtype
    exact = b.astype(np.float64) + 1.0
    # b * 1 is exact; + 1 rounds once
    _within_one_rounding(A.grad.numpy(), exact, dtype, 0.0, "dA")


# ---------------------------------------------------------------------------- what is refused
def _half_calls(dtype):
    """Every public op without half bodies, with half operands (made beforehand)."""
    x, w = tt.ones((3, 4), dtype=dtype), tt.ones((4, 4), dtype=dtype)
    v4, z4 = tt.ones((4,), dtype=dtype), tt.zeros((4,), dtype=dtype)
    ids = tt.from_numpy(np.zeros((3,), np.int64))
    q = tt.ones((1, 1, 4, 2), dtype=dtype)
    wide, heads = tt.ones((1, 2, 4), dtype=dtype), tt.ones((1, 2, 2, 2), dtype=dtype)
    return {
        "div": lambda: tt.div(x, x),
        "rdiv_scalar": lambda: 1.0 / x,
        "max": lambda: tt.max(x, 1),
        "add_broadcast": lambda: tt.add_broadcast(x, v4, 0),
        "gelu": lambda: F.gelu(x),
        "relu": lambda: F.relu(x),
        "silu": lambda: F.silu(x),
        "dropout": lambda: F.dropout(x, 0.5, seed=1),
        "linear": lambda: F.linear(x, w),
        "layer_norm": lambda: F.layer_norm(x, x.shape[-1:], v4, z4),
        "rms_norm": lambda: F.rms_norm(x, x.shape[-1:], v4, 1e-6),
        "softmax": lambda: F.softmax(x),
        "log_softmax": lambda: F.log_softmax(x),
        "cross_entropy": lambda: F.cross_entropy(x, ids),
        "embedding": lambda: F.embedding(ids, w),
        "scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(q, q, q),
        "split_heads": lambda: F.split_heads(wide, 2),
        "merge_heads": lambda: F.merge_heads(heads),
    }


@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
def test_ops_without_half_bodies_raise_type_error(dtype):
    calls = _half_calls(dtype)
    w, bf = tt.ones((4, 4), dtype=dtype), tt.zeros((2,), dtype=BF16)
    from tiletrain.nn import Parameter
    from tiletrain.optim import SGD, AdamW
    with submits_nothing():
        for name, call in calls.items():
            # "<op>: <operand> has dtype bfloat16; this op supports float32 and float64 (...)"
            with pytest.raises(TypeError, match=rf"^\w+: \w+ has dtype {dtype.name}; this op supports float32 "
                                                "and float64") as err:
                call()
            assert "float16/bfloat16 tensors work with" in str(err.value), name
        with pytest.raises(TypeError, match="Parameter: parameters must be float32 or float64"):
            Parameter(w)
        for opt in (SGD, AdamW):
            with pytest.raises(TypeError, match="optimizers update float32 and float64 tensors"):
                opt([w.requires_grad_()], lr=0.1)
        with pytest.raises(TypeError, match="cupy has no bfloat16"):
            bf.to_cupy()


def test_mixed_dtypes_promote_like_torch():
    h, b, f = tt.ones((3,), dtype=F16), tt.ones((3,), dtype=BF16), tt.ones((3,))
    d = tt.ones((3,), dtype=np.float64)
    for x, y, want in ((h, b, np.float32), (h, f, np.float32), (f, b, np.float32), (h, d, np.float64),
                       (f, d, np.float64)):
        assert (x + y).dtype == want and (y * x).dtype == want
        np.testing.assert_array_equal((x + y).numpy(), 2.0)
    mats = {dt: tt.ones((3, 3), dtype=dt) for dt in (F16, BF16, np.dtype(np.float32))}
    with submits_nothing():
        for x, y in ((h, b), (h, f), (f, b)):
            with pytest.raises(TypeError, match="dtype mismatch"):
                tt.matmul(mats[x.dtype], mats[y.dtype])


def test_c_layer_rejects_unsupported_dtype_kernel_pairs():
    """Past the Python checks, the C expanders refuse a kernel that does not take the dtype
    (its table line), so no body reads tiles with the wrong element size."""
    # (every tensor handed to C is held in a variable: a temporary would be freed first)
    h, h32 = tt.ones((5, 4), tiles=(2, 2), dtype=F16), tt.ones((5, 4), tiles=(2, 2))
    out = tt.empty((4,), tiles=(2,), dtype=F16)
    y16, y32, x64 = tt.empty((), dtype=F16), tt.empty(()), tt.ones((3,), dtype=np.float64)
    a, cb, c64 = tt.ones((4, 4), dtype=F16), tt.empty((4, 4), dtype=BF16), tt.empty((5, 5), tiles=(2, 2), dtype=np.float64)
    i64, retiled = tt.empty((5, 4), tiles=(2, 2), dtype=np.int64), tt.empty((5, 4), tiles=(3, 2), dtype=F16)
    div = ffi.new("tt_tensor *[]", [h._ptr, h._ptr, h._ptr])
    mx, red = ffi.new("tt_tensor *[]", [h._ptr]), ffi.new("tt_tensor *[]", [out._ptr])
    with submits_nothing():
        with pytest.raises(ValueError, match=r"div: dtype float16 is not supported \(supported: float32, float64\)"):
            check(lib.tt_map(lib.TT_K_DIV, ffi.new("tt_args_div *"), 3, div))
        with pytest.raises(ValueError, match="max_axis: dtype float16 is not supported"):
            check(lib.tt_span_map(lib.TT_K_MAX_AXIS, ffi.new("tt_args_max_axis *"), 0, 1, 1, mx, 1, red, 1))
        # the reduction's accumulator must be float32 for a half x, and nothing else
        with pytest.raises(ValueError, match="operand 1 is float16, expected float32"):
            check(lib.tt_span_map(lib.TT_K_SUM_AXIS, ffi.new("tt_args_sum_axis *"), 0, 1, 1, mx, 1, red, 1))
        with pytest.raises(ValueError, match="y is float16, expected float32 for a float16 x"):
            check(lib.tt_sum_all(1.0, h._ptr, 0.0, y16._ptr))
        with pytest.raises(ValueError, match="y is float32, expected float64"):
            check(lib.tt_sum_all(1.0, x64._ptr, 0.0, y32._ptr))
        # gemm: c is a's dtype, or float32 for half a and b; never another half type
        with pytest.raises(ValueError, match="operands must share a float dtype"):
            check(lib.tt_gemm(1.0, a._ptr, 0, a._ptr, 0, 0.0, cb._ptr))
        with pytest.raises(ValueError, match="operands must share a float dtype"):
            check(lib.tt_gemm(1.0, h32._ptr, 0, h32._ptr, 1, 0.0, c64._ptr))
        # cast has its own entry point that checks both dtypes; map refuses it
        cast = ffi.new("tt_tensor *[]", [h32._ptr, h._ptr])
        with pytest.raises(ValueError, match="cast goes through tt_cast"):
            check(lib.tt_map(lib.TT_K_CAST, ffi.new("tt_args_cast *"), 2, cast))
        with pytest.raises(ValueError, match="cannot cast to int64"):
            check(lib.tt_cast(h32._ptr, i64._ptr))
        with pytest.raises(ValueError, match="same shape and tiling"):
            check(lib.tt_cast(h32._ptr, retiled._ptr))


def test_a_float32_accumulator_gemm_chain_in_c(rng):
    """tt_gemm with half a, b and a float32 c (cacc): the float32 sum of every K tile."""
    a, b = _rand(rng, (9, 20), F16), _rand(rng, (20, 7), F16)
    A, B = tt.from_numpy(a, (4, 6)), tt.from_numpy(b, (6, 4))
    C = tt.from_numpy(np.ones((9, 7), np.float32), (4, 4))
    check(lib.tt_gemm(2.0, A._ptr, 0, B._ptr, 0, 0.5, C._ptr))
    exact = 2.0 * a.astype(np.float64) @ b.astype(np.float64) + 0.5
    np.testing.assert_allclose(C.numpy(), exact, rtol=1e-5, atol=1e-5)
    assert C.dtype == np.float32
