"""The element-wise op table against PyTorch: every unary and binary op forward and backward
(float64, 1e-10) on tile grids with leftover tiles, broadcasting with operands tiled
differently, comparisons, where, masked_fill, and bad input."""
import numpy as np
import pytest
import torch

import tiletrain as tt
import tiletrain.functional as F
from conftest import GRIDS_2D, GRIDS_ND, submits_nothing, tol
from tiletrain.testing.gradcheck import vjp_check

TF = torch.nn.functional


def _data(rng, shape, domain):
    a = np.asarray(rng.standard_normal(shape) * 2)
    if domain == "pos":
        a = np.abs(a) + 0.1
    elif domain == "unit":
        a = np.tanh(a) * 0.9
    a[np.abs(a) < 1e-3] = 0.5  # no kinks at the finite-difference step
    return a


# name -> (tiletrain fn, torch fn, input domain); one row per op of the table
UNARY = {
    "relu": (F.relu, torch.relu, "any"),
    "gelu": (F.gelu, TF.gelu, "any"),
    "gelu tanh": (lambda x: F.gelu(x, approximate="tanh"), lambda x: TF.gelu(x, approximate="tanh"), "any"),
    "silu": (F.silu, TF.silu, "any"),
    "exp": (tt.exp, torch.exp, "any"),
    "log": (tt.log, torch.log, "pos"),
    "sqrt": (tt.sqrt, torch.sqrt, "pos"),
    "rsqrt": (tt.rsqrt, torch.rsqrt, "pos"),
    "abs": (tt.abs, torch.abs, "any"),
    "sign": (tt.sign, torch.sign, "any"),
    "sin": (tt.sin, torch.sin, "any"),
    "cos": (tt.cos, torch.cos, "any"),
    "tanh": (tt.tanh, torch.tanh, "any"),
    "sigmoid": (tt.sigmoid, torch.sigmoid, "any"),
    "reciprocal": (tt.reciprocal, torch.reciprocal, "pos"),
    "neg": (tt.neg, torch.neg, "any"),
    "clamp": (lambda x: tt.clamp(x, -1.0, 0.7), lambda x: torch.clamp(x, -1.0, 0.7), "any"),
    "clamp min": (lambda x: tt.clamp(x, min=0.2), lambda x: torch.clamp(x, min=0.2), "any"),
    "pow 3": (lambda x: x ** 3, lambda x: x ** 3, "any"),
    "pow -1.5": (lambda x: tt.pow(x, -1.5), lambda x: torch.pow(x, -1.5), "pos"),
    "rpow": (lambda x: 2.5 ** x, lambda x: 2.5 ** x, "any"),
    "x / 3": (lambda x: x / 3.0, lambda x: x / 3.0, "any"),
    "3 - x": (lambda x: 3.0 - x, lambda x: 3.0 - x, "any"),
}


@pytest.mark.parametrize("shape,tiles", GRIDS_2D + GRIDS_ND[2:])
@pytest.mark.parametrize("name", UNARY)
def test_unary_against_torch(rng, name, shape, tiles):
    fn, ref, domain = UNARY[name]
    a = _data(rng, shape, domain)
    x = tt.from_numpy(a, tiles).requires_grad_()
    y = fn(x)
    tx = torch.tensor(a, requires_grad=True)
    ty = ref(tx)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    assert y.tiles == x.tiles and y.dtype == np.float64
    g = rng.standard_normal(shape)
    y.backward(tt.from_numpy(g, tiles))
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", [n for n in UNARY if n != "sign"])
def test_unary_vjp(rng, name):
    fn, _, domain = UNARY[name]
    vjp_check(fn, [_data(rng, (7, 5), domain)], [(3, 2)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_float32(rng, dtype):
    a = _data(rng, (9, 7), "pos").astype(dtype)
    x = tt.from_numpy(a, (4, 3))
    for name in ("exp", "log", "sqrt", "tanh", "sigmoid"):
        fn, ref, _ = UNARY[name]
        np.testing.assert_allclose(fn(x).numpy(), ref(torch.tensor(a)).numpy(), **tol(dtype))


# (shape a, tiles a, shape b, tiles b): same layout, broadcasting both ways, other tilings
LAYOUTS = [
    ((11, 7), (4, 3), (11, 7), (4, 3)),
    ((11, 7), (4, 3), (11, 7), (3, 5)),     # same shape, other tiles: b re-tiled
    ((11, 7), (4, 3), (7,), (2,)),          # a row, tiled otherwise
    ((11, 7), (4, 3), (7,), (3,)),          # a row tiled like a's rows (add: one add_bcast per tile)
    ((4, 6), (3, 4), (5, 4, 6), (2, 3, 4)),  # trailing axes, the smaller operand first
    ((11, 7), (4, 3), (11, 1), (5, 1)),     # a column
    ((5, 1, 6), (2, 1, 4), (3, 1), (2, 1)),  # both broadcast
    ((), (), (6, 4), (4, 3)),               # a 0-d tensor
]
BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "add alpha": (lambda a, b: tt.add(a, b, alpha=-2.5), lambda a, b: torch.add(a, b, alpha=-2.5)),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (lambda a, b: a / b, lambda a, b: a / b),
    "maximum": (tt.maximum, torch.maximum),
    "minimum": (tt.minimum, torch.minimum),
    "pow": (lambda a, b: tt.pow(tt.abs(a) + 0.5, b), lambda a, b: torch.pow(torch.abs(a) + 0.5, b)),
}


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda l: f"{l[0]}x{l[2]}")
@pytest.mark.parametrize("name", BINARY)
def test_binary_broadcast_against_torch(rng, name, layout):
    sa, ta, sb, tb = layout
    fn, ref = BINARY[name]
    a, b = _data(rng, sa, "any"), _data(rng, sb, "pos")
    A = tt.from_numpy(np.asarray(a), ta or None).requires_grad_()
    B = tt.from_numpy(np.asarray(b), tb or None).requires_grad_()
    y = fn(A, B)
    TA, TB = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ty = ref(TA, TB)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(y.shape)
    y.backward(tt.from_numpy(g, y.tiles))
    ty.backward(torch.tensor(g))
    assert A.grad.shape == A.shape and A.grad.tiles == A.tiles and B.grad.tiles == B.tiles
    np.testing.assert_allclose(A.grad.numpy(), TA.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(B.grad.numpy(), TB.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_adding_a_trailing_operand_broadcasts_without_copies():
    """x + bias (and bias + x) where bias is x's trailing axes, tiled alike: add_bcast tasks, no
    region copies of the bias to x's shape."""
    from tiletrain._ffi import lib
    x, b = tt.zeros((8, 6), tiles=(4, 3)), tt.ones((6,), tiles=(3,))
    tt.wait()
    copies, bcasts = lib.tt_kernel_ntasks(lib.TT_K_REGION_COPY), lib.tt_kernel_ntasks(lib.TT_K_ADD_BCAST)
    y, z = x + b, tt.add(b, x, alpha=2.0)
    tt.wait()
    assert lib.tt_kernel_ntasks(lib.TT_K_REGION_COPY) == copies
    assert lib.tt_kernel_ntasks(lib.TT_K_ADD_BCAST) - bcasts == 2 * 4
    assert y.tiles == z.tiles == (4, 3)
    np.testing.assert_array_equal(y.numpy(), np.ones((8, 6)))
    np.testing.assert_array_equal(z.numpy(), np.ones((8, 6)))


def test_result_tiling_rule():
    x = tt.zeros((8, 6), tiles=(4, 3))
    row = tt.zeros((6,), tiles=(2,))
    assert (x + row).tiles == (4, 3)          # the first operand spanning an axis gives its tiles
    assert (row + x).tiles == (4, 2)
    col = tt.zeros((8, 1), tiles=(8, 1))
    assert (col * x).tiles == (8, 3)


def test_maximum_ties_split_the_gradient():
    a = tt.from_numpy(np.array([1.0, 2.0, 3.0])).requires_grad_()
    b = tt.from_numpy(np.array([1.0, 5.0, 0.0])).requires_grad_()
    tt.sum(tt.maximum(a, b)).backward()
    np.testing.assert_array_equal(a.grad.numpy(), [0.5, 0.0, 1.0])
    np.testing.assert_array_equal(b.grad.numpy(), [0.5, 1.0, 0.0])


def test_binary_vjp(rng):
    a, b = _data(rng, (7, 5), "any"), _data(rng, (5,), "pos")
    for fn, _ in BINARY.values():
        vjp_check(fn, [a, b], [(3, 2), (3,)])


def test_scalar_division_like_torch():
    a = np.array([1.0, -1.0, 0.0, 2.5])
    x = tt.from_numpy(a)
    np.testing.assert_array_equal((x / 0.0).numpy(), torch.tensor(a) / 0.0)
    np.testing.assert_array_equal((x / -0.0).numpy(), torch.tensor(a) / -0.0)
    r = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    np.testing.assert_array_equal((tt.from_numpy(r, 128) / 3.0).numpy(), (torch.tensor(r) / 3.0).numpy())


def test_dtype_promotion():
    x32 = tt.ones((3, 4), tiles=(2, 2))
    x64 = tt.full((4,), 2.0, dtype=np.float64)
    y = x32 * x64
    assert y.dtype == np.float64 and y.shape == (3, 4)
    np.testing.assert_array_equal(y.numpy(), 2.0)


@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons(rng, op):
    a = rng.integers(0, 3, (9, 7)).astype(np.float64)
    b = rng.integers(0, 3, (7,)).astype(np.float64)
    a[0, 0] = np.nan
    A, B = tt.from_numpy(a, (4, 3)), tt.from_numpy(b, 2)
    ref = getattr(torch, op)
    got = getattr(tt, op)(A, B)
    assert got.dtype == np.bool_ and got.shape == a.shape
    np.testing.assert_array_equal(got.numpy(), ref(torch.tensor(a), torch.tensor(b)).numpy())
    np.testing.assert_array_equal(getattr(tt, op)(A, 1.0).numpy(), ref(torch.tensor(a), 1.0).numpy())
    rsym = {"eq": "__eq__", "ne": "__ne__", "lt": "__gt__", "le": "__ge__", "gt": "__lt__", "ge": "__le__"}[op]
    np.testing.assert_array_equal(getattr(A, rsym)(1.0).numpy(),   # 1.0 <op> A, as Python reflects it
                                  getattr(torch.tensor(a), rsym)(1.0).numpy())
    sym = {"eq": "__eq__", "ne": "__ne__", "lt": "__lt__", "le": "__le__", "gt": "__gt__", "ge": "__ge__"}[op]
    np.testing.assert_array_equal(getattr(A, sym)(B).numpy(), ref(torch.tensor(a), torch.tensor(b)).numpy())


def test_eq_is_elementwise_and_hash_is_identity():
    x = tt.ones((3,))
    assert (x == x).numpy().all() and hash(x) == object.__hash__(x)
    assert {x: 1}[x] == 1


def test_where_and_masked_fill(rng):
    a, b = rng.standard_normal((9, 7)), rng.standard_normal((7,))
    A = tt.from_numpy(a, (4, 3)).requires_grad_()
    B = tt.from_numpy(b, 3).requires_grad_()
    cond = A > 0.2
    y = tt.where(cond, A, B)
    TA, TB = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ty = torch.where(TA > 0.2, TA, TB)
    np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())
    g = rng.standard_normal(a.shape)
    y.backward(tt.from_numpy(g, (4, 3)))
    ty.backward(torch.tensor(g))
    np.testing.assert_array_equal(A.grad.numpy(), TA.grad.numpy())
    np.testing.assert_allclose(B.grad.numpy(), TB.grad.numpy(), rtol=1e-12)
    np.testing.assert_array_equal(tt.where(cond, A, 0.0).detach().numpy(), torch.where(TA > 0.2, TA, 0.0).detach().numpy())
    m = tt.from_numpy(np.array([True, False] * 3 + [True]), 2)   # broadcast over rows, other tiles
    X = tt.from_numpy(a, (4, 3)).requires_grad_()
    z = X.masked_fill(m, -1.5)
    tm = torch.tensor(np.array([True, False] * 3 + [True]))
    np.testing.assert_array_equal(z.detach().numpy(), torch.tensor(a).masked_fill(tm, -1.5).numpy())
    tt.sum(z).backward()
    np.testing.assert_array_equal(X.grad.numpy(), np.where(tm.numpy(), 0.0, 1.0) * np.ones_like(a))


def test_bad_input_is_rejected_first():
    x, v, mask = tt.zeros((4, 3), tiles=2), tt.zeros((4,)), tt.zeros((5,)) > 0
    with submits_nothing():
        _bad_calls(x, v, mask)


def _bad_calls(x, v, mask):
    with pytest.raises(ValueError, match=r"could not be broadcast together with shapes \(4, 3\) \(4,\)"):
        x + v
    with pytest.raises(TypeError, match="unsupported operand"):
        x + "a"
    with pytest.raises(TypeError, match="must be a bool tensor"):
        tt.where(x, x, x)
    with pytest.raises(ValueError, match="at least one of min and max"):
        tt.clamp(x)
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh'"):
        F.gelu(x, approximate="erf")
    with pytest.raises(TypeError, match="takes one tensor argument"):
        tt.exp(x, 2)
    with pytest.raises(ValueError, match="does not broadcast"):
        x.masked_fill(mask, 1.0)
    with pytest.raises(ValueError, match="rounding_mode to be one of None, 'trunc', or 'floor'"):
        tt.div(x, x, rounding_mode="round")


def test_clamp_with_a_nan_bound_is_nan_everywhere_as_torch():
    a = np.array([1.0, np.nan, 3.0, -np.inf])
    for kw in (dict(min=float("nan")), dict(max=float("nan")), dict(min=0.0, max=float("nan"))):
        got = tt.clamp(tt.tensor(a), **kw).numpy()
        want = torch.clamp(torch.tensor(a), **kw).numpy()
        np.testing.assert_array_equal(got, want)
    got = tt.clamp(tt.tensor(a), min=-np.inf, max=np.inf).numpy()
    np.testing.assert_array_equal(got, torch.clamp(torch.tensor(a), min=-np.inf, max=np.inf).numpy())


@pytest.mark.parametrize("a,b", [(1.0, 0.0), (1, 0), (True, False), (2, 0.5), (float("-inf"), 0.0)])
def test_where_of_two_numbers_is_torchs(a, b):
    """torch.where(cond, 1.0, 0.0): the dtype torch picks (bool, int64, the default float)."""
    c = np.array([[True, False, True], [False, False, True]])
    ref, ours = torch.where(torch.tensor(c), a, b), tt.where(tt.tensor(c), a, b)
    assert str(ours.dtype) == str(ref.dtype).replace("torch.", "")
    np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    with pytest.raises(TypeError, match="real number"):
        tt.where(tt.tensor(c), "a", 0.0)
