"""The element-wise math kernels (csrc/kernels.def `# --- element-wise math`, bodies generated
from their `expr` column) and the bool dtype, through the runtime on multi-tile tensors:
against their NumPy references on every grid with leftover tiles, and against PyTorch at
the edges (NaN, infinite bounds, ties, 0 ** b)."""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import tiletrain as tt
from tiletrain._ffi import lib
from tiletrain.runtime.kernels import run_map
from tiletrain.testing.references_elementwise import REFERENCES
from conftest import GRIDS_ND, submits_nothing, tol

ROOT = Path(__file__).resolve().parents[2]
DTYPE_CODE = {np.float32: lib.TT_F32, np.float64: lib.TT_F64, np.bool_: lib.TT_BOOL}
# every element-wise math kernel with each dtype it takes (logical, logical_not: bool only)
CASES = [pytest.param(name, dt, id=f"{name}-{dt.__name__}") for name in REFERENCES for dt in DTYPE_CODE
         if lib.tt_kernel_dtypes(getattr(lib, f"TT_K_{name.upper()}")) >> DTYPE_CODE[dt] & 1]
MULTI_TILE = [g for g in GRIDS_ND if g[0] != g[1]]


def _check(got, expected, dtype):
    if got.dtype == np.bool_:
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, np.asarray(expected, dtype=got.dtype), **tol(dtype))


@pytest.mark.parametrize("shape, tiles", MULTI_TILE)
@pytest.mark.parametrize("name, dtype", CASES)
def test_kernel_through_runtime(name, dtype, shape, tiles):
    """The reference's tile case (NaN, ties, zeros at fixed places) repeated over a tiled
    tensor: one task per tile, tiles of different sizes, every element checked."""
    fields, buffers = REFERENCES[name].case(np.random.default_rng(3), dtype)
    buffers = [np.resize(b, shape) for b in buffers]
    expected = REFERENCES[name].ref(fields, *[b.copy() for b in buffers])
    ts = [tt.from_numpy(b, tiles) for b in buffers]
    run_map(name, *ts, **{k: v for k, v in fields.items() if k != "n"})
    for i, exp in expected.items():
        _check(ts[i].numpy(), np.reshape(exp, shape), np.float32 if dtype == np.bool_ else dtype)


# ---- edges against PyTorch (float64) ----

SHAPE, TILES = (3, 5), (2, 2)
EDGE_A = np.array([[np.nan, 1.0, -0.0, 2.0, np.inf], [0.5, np.nan, 3.0, -1.0, 0.0], [1.0, 2.0, -np.inf, 0.0, 4.0]])
EDGE_B = np.array([[1.0, np.nan, 0.0, 2.0, 1.0], [0.5, np.nan, -3.0, 5.0, -0.0], [np.inf, 2.0, 1.0, 0.0, -4.0]])


def _run(name, *inputs, out=(np.float64,), **fields):
    ts = [tt.from_numpy(np.asarray(a), TILES) for a in inputs]
    outs = [tt.empty(SHAPE, tiles=TILES, dtype=dt) for dt in out]
    run_map(name, *ts, *outs, **fields)
    return [o.numpy() for o in outs]


def _same(got, want, signed_zeros=True):
    """Equal to torch's, NaN where torch has NaN, and the same sign of zero (torch's maximum of
    0 and -0 depends on its vectorised or scalar path: not checked there)."""
    want = want.detach().numpy() if isinstance(want, torch.Tensor) else want
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    if got.dtype != np.bool_ and signed_zeros:
        zeros = (want == 0) & ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


@pytest.mark.parametrize("name, fn", [("maximum", torch.maximum), ("minimum", torch.minimum)])
def test_maximum_minimum_nan_and_ties(name, fn):
    a, b = torch.tensor(EDGE_A), torch.tensor(EDGE_B)
    _same(_run(name, EDGE_A, EDGE_B)[0], fn(a, b), signed_zeros=False)
    _same(_run(name, EDGE_B, EDGE_A)[0], fn(b, a), signed_zeros=False)


@pytest.mark.parametrize("ismin, fn", [(0, torch.maximum), (1, torch.minimum)])
def test_maximum_backward_is_torchs(ismin, fn):
    a, b = torch.tensor(EDGE_A, requires_grad=True), torch.tensor(EDGE_B, requires_grad=True)
    dy = np.random.default_rng(0).standard_normal(SHAPE)
    fn(a, b).backward(torch.tensor(dy))
    da, db = _run("maximum_backward", EDGE_A, EDGE_B, dy, out=(np.float64, np.float64), ismin=ismin)
    _same(da, a.grad)
    _same(db, b.grad)


@pytest.mark.parametrize("lo, hi", [(-1.0, 1.0), (-np.inf, 0.5), (0.0, np.inf), (2.0, 1.0), (-np.inf, np.inf)])
def test_clamp_and_backward(lo, hi):
    x = torch.tensor(EDGE_A, requires_grad=True)
    torch_lo = None if lo == -np.inf else lo
    torch_hi = None if hi == np.inf else hi
    if torch_lo is None and torch_hi is None:
        torch_lo = -np.inf
    y = torch.clamp(x, torch_lo, torch_hi)
    dy = np.random.default_rng(1).standard_normal(SHAPE)
    y.backward(torch.tensor(dy))
    _same(_run("clamp", EDGE_A, lo=lo, hi=hi)[0], y)
    _same(_run("clamp_backward", EDGE_A, dy, lo=lo, hi=hi)[0], x.grad)


OPS = [torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge]


@pytest.mark.parametrize("op", range(6))
def test_compare_nan_is_false_except_ne(op):
    got = _run("compare", EDGE_A, EDGE_B, out=(np.bool_,), op=op)[0]
    assert got.dtype == np.bool_
    _same(got, OPS[op](torch.tensor(EDGE_A), torch.tensor(EDGE_B)))
    for s in (2.0, np.nan, np.inf):
        got = _run("compare_scalar", EDGE_A, out=(np.bool_,), op=op, s=s)[0]
        _same(got, OPS[op](torch.tensor(EDGE_A), s))


def test_pow_backward_at_zero():
    a = np.array([[0.0, 0.0, 0.0, 2.0, 1.5], [0.0, 3.0, 0.5, 0.0, 2.0], [1.0, 0.0, 4.0, 0.0, 0.25]])
    b = np.array([[2.0, 0.0, -1.5, 0.0, 0.5], [1.0, -2.0, 3.0, 0.5, -0.5], [0.0, 3.0, 1.0, -1.0, 2.0]])
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    y = torch.pow(ta, tb)
    dy = np.random.default_rng(2).standard_normal(SHAPE)
    y.backward(torch.tensor(dy))
    _same(_run("pow", a, b)[0], y)
    da, db = _run("pow_backward", a, b, dy, out=(np.float64, np.float64))
    _same(da, ta.grad)
    _same(db, tb.grad)


@pytest.mark.parametrize("p", [0.0, 2.0, -1.0, 0.5, 3.0])
def test_pow_scalar_and_backward(p):
    x = np.abs(EDGE_A)
    tx = torch.tensor(x, requires_grad=True)
    y = torch.pow(tx, p)
    dy = np.ones(SHAPE)
    y.backward(torch.tensor(dy))
    _same(_run("pow_scalar", x, p=p)[0], y)
    _same(_run("pow_scalar_backward", x, dy, p=p)[0], tx.grad)


@pytest.mark.parametrize("s", [0.0, 2.5, 1.0])
def test_rpow_scalar_backward_is_torchs(s):
    x = np.nan_to_num(EDGE_A, nan=0.5)
    tx = torch.tensor(x, requires_grad=True)
    y = torch.pow(s, tx)
    dy = np.random.default_rng(3).standard_normal(SHAPE)
    y.backward(torch.tensor(dy))
    yt = _run("rpow_scalar", x, s=s)[0]
    _same(yt, y)
    _same(_run("rpow_scalar_backward", yt, dy, s=s)[0], tx.grad)


@pytest.mark.parametrize("name, fn", [("sign", torch.sign), ("abs", torch.abs), ("exp", torch.exp),
                                      ("tanh", torch.tanh), ("sigmoid", torch.sigmoid)])
def test_unary_edges(name, fn):
    _same(_run(name, EDGE_A)[0], fn(torch.tensor(EDGE_A)))


def test_abs_backward_at_zero_and_nan():
    x = torch.tensor(EDGE_A, requires_grad=True)
    torch.abs(x).backward(torch.ones(SHAPE, dtype=torch.float64))
    _same(_run("abs_backward", EDGE_A, np.ones(SHAPE))[0], x.grad)


def test_where_and_masked_fill_with_a_bool_mask():
    mask = np.random.default_rng(4).integers(2, size=SHAPE).astype(bool)
    _same(_run("where", mask, EDGE_A, EDGE_B)[0], torch.where(torch.tensor(mask), torch.tensor(EDGE_A),
                                                              torch.tensor(EDGE_B)))
    _same(_run("masked_fill", EDGE_A, mask, value=-7.0)[0],
          torch.tensor(EDGE_A).masked_fill(torch.tensor(mask), -7.0))


# ---- the bool dtype ----

@pytest.mark.parametrize("shape, tiles", GRIDS_ND)
def test_bool_round_trip_fill_and_copy(shape, tiles):
    a = np.random.default_rng(5).integers(2, size=shape).astype(bool)
    t = tt.from_numpy(a, tiles)
    assert t.dtype == np.bool_
    got = t.numpy()
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, a)
    c = tt.empty(shape, tiles=tiles, dtype=np.bool_)
    run_map("copy", t, c)
    np.testing.assert_array_equal(c.numpy(), a)
    for value, want in ((2.0, True), (0.0, False), (-0.5, True)):  # nonzero is true, as torch.full
        f = tt.full(shape, value, tiles=tiles, dtype=np.bool_)
        assert f.numpy().view(np.uint8).tolist() == np.full(shape, want).view(np.uint8).tolist()


def test_logical_kernels():
    rng = np.random.default_rng(6)
    a, b = (rng.integers(2, size=SHAPE).astype(bool) for _ in range(2))
    for op, fn in enumerate((np.logical_and, np.logical_or, np.logical_xor)):
        np.testing.assert_array_equal(_run("logical", a, b, out=(np.bool_,), op=op)[0], fn(a, b))
    np.testing.assert_array_equal(_run("logical_not", a, out=(np.bool_,))[0], ~a)


def test_bool_dtype_name_in_errors():
    assert tt.tensors.as_dtype(bool) == np.bool_
    assert tt.tensors.DTYPES[np.dtype(bool)] == lib.TT_BOOL


# ---- bad operands: rejected before any task ----

def test_bool_buffer_dtypes_are_checked():
    x = tt.zeros(SHAPE, tiles=TILES, dtype=np.float64)
    m = tt.zeros(SHAPE, tiles=TILES, dtype=np.bool_)
    f32 = tt.zeros(SHAPE, tiles=TILES, dtype=np.float32)
    with submits_nothing():
        _rejected(x, m, f32)


def _rejected(x, m, f32):
    with pytest.raises(ValueError, match="compare: operand 2 is float64, expected bool"):
        run_map("compare", x, x, x, op=0)
    with pytest.raises(ValueError, match="where: operand 0 is float64, expected bool"):
        run_map("where", x, x, x, x)
    with pytest.raises(ValueError, match="where: operand 2 is float32, expected float64"):
        run_map("where", m, x, f32, x)
    with pytest.raises(ValueError, match="logical: operand 0 is float64, expected bool"):
        run_map("logical", x, x, m, op=0)
    with pytest.raises(ValueError, match="logical: operand 1 is float64, expected bool"):
        run_map("logical", m, x, m, op=0)
    with pytest.raises(ValueError, match="exp: dtype bool is not supported"):
        run_map("exp", m, m)


# ---- the generator's `expr` column ----

def _parse(text):
    sys.path.insert(0, str(ROOT / "csrc"))
    try:
        import gen_kernels
    finally:
        sys.path.pop(0)
    return gen_kernels.parse(text)


@pytest.mark.parametrize("line, message", [
    ("k | R x, W y | m, k, n | | 1 | expr y = x", "only for element-wise maps"),
    ("k | R x, W y, W z | n | | 1 | expr y = x", "outputs never assigned: z"),
    ("k | R x, W y | n | | 1 | expr x = 1; y = x", "cannot assign 'x'"),
    ("k | R x, W y | n | | 1 | expr y = x; y = 2", "cannot assign 'y'"),
    ("k | R x, RW y | n | | 1 | expr y = x", "buffers must be R"),
    ("k | R x, W y | n | | 1 | expr y + x", "bad statement"),
    ("k | R x, W y | n | | 1 | dtypes i64 | expr y = x", "dtypes must be among"),
])
def test_generator_rejects_bad_expr(line, message):
    with pytest.raises(SystemExit, match=message):
        _parse(line)


def test_generator_expr_body():
    (k,) = _parse("k | R x, R m bool, W y, W z bool | n | s | 1 | expr t = 0.5 * x; y = m ? t : s; z = x > s")
    assert k.expr == [("t", "0.5 * x"), ("y", "m ? t : s"), ("z", "x > s")]
    assert k.bools == {"m", "z"}
