"""Bad input raises a Python exception naming the problem, and submits nothing."""
import numpy as np
import pytest

import tiletrain as tt
from tiletrain._ffi import lib


@pytest.fixture
def ab(rng):
    a = tt.from_numpy(rng.standard_normal((6, 4)), (3, 2))
    b = tt.from_numpy(rng.standard_normal((6, 4)), (2, 2))
    return a, b


def test_tile_and_shape_arguments(nothing_submitted):
    with pytest.raises(ValueError, match=r"tiles\[1\] must be >= 1, got 0"):
        tt.zeros((4, 4), tiles=(2, 0))
    with pytest.raises(ValueError, match=r"tiles\[0\] must be >= 1, got -3"):
        tt.zeros((4,), tiles=-3)
    with pytest.raises(ValueError, match="tiles has 3 dimensions but shape"):
        tt.zeros((4, 4), tiles=(2, 2, 2))
    with pytest.raises(ValueError, match=r"zeros: size\[0\] = 0; tiletrain has no empty tensors"):
        tt.zeros((0, 3))
    with pytest.raises(TypeError, match=r"tiles\[0\] must be an int"):
        tt.zeros((4,), tiles=(2.5,))
    with pytest.raises(TypeError, match=r"zeros: size must be ints or one tuple of ints, size\[0\] is None"):
        tt.zeros(None)
    with pytest.raises(ValueError, match=r"shape\[0\] must be >= 1"):
        tt.from_numpy(np.zeros((0, 2)))


def test_dtypes(nothing_submitted):
    with pytest.raises(TypeError, match="unsupported dtype complex64"):
        tt.from_numpy(np.zeros(3, np.complex64))
    with pytest.raises(TypeError, match="unsupported dtype float128|unsupported dtype longdouble"):
        tt.from_numpy(np.zeros(3, np.longdouble))
    with pytest.raises(TypeError, match="unsupported dtype int32"):
        tt.zeros((3,), dtype=np.int32)
    with pytest.raises(TypeError, match="is not a data type"):
        tt.zeros((3,), dtype="floaty")
    with pytest.raises(TypeError, match="expects a numpy.ndarray"):
        tt.from_numpy({"a": 1})
    ids = tt.from_numpy(np.ones(3, np.int64))
    with pytest.raises(TypeError, match="int64; this op supports float32 and float64"):
        tt.nn.functional.gelu(ids)  # (ids + ids is int64 arithmetic, as torch)
    with pytest.raises(TypeError, match="fill_value must be a real number"):
        tt.full((2,), "x")


def test_mismatched_operands(ab, nothing_submitted):
    a, b = ab
    c = tt.from_numpy(np.zeros((6, 5)), (3, 2))
    with pytest.raises(ValueError, match=r"could not be broadcast together with shapes \(6, 4\) \(6, 5\)"):
        tt.mul(a, c)
    ids = tt.from_numpy(np.zeros((4, 3), np.int64), (2, 3))
    with pytest.raises(TypeError, match="int64"):
        tt.matmul(a, ids)  # (a - ids of a's shape promotes ids, as torch)
    with pytest.raises(TypeError, match="must be a tiletrain Tensor"):
        tt.add(a, np.zeros((6, 4)))
    with pytest.raises(TypeError, match="unsupported operand"):
        a + "s"
    with pytest.raises(TypeError, match="alpha must be a real number"):
        tt.scale(a, None)


def test_matmul_retiles_operands_tiled_otherwise(rng):
    a = rng.standard_normal((6, 4))
    c = rng.standard_normal((4, 5))
    np.testing.assert_allclose((tt.from_numpy(a, (3, 2)) @ tt.from_numpy(c, (3, 3))).numpy(), a @ c, rtol=1e-12)
    x3, y3 = rng.standard_normal((3, 6, 4)), rng.standard_normal((3, 4, 5))
    got = tt.from_numpy(x3, (1, 3, 2)) @ tt.from_numpy(y3, (2, 3, 5))
    np.testing.assert_allclose(got.numpy(), x3 @ y3, rtol=1e-12)


def test_matmul_errors(rng, nothing_submitted):
    a = tt.from_numpy(rng.standard_normal((6, 4)), (3, 2))
    with pytest.raises(ValueError, match="inner dimensions differ"):
        a @ a
    v = tt.from_numpy(rng.standard_normal(5), 2)
    with pytest.raises(ValueError, match="inner dimensions differ"):
        a @ v
    with pytest.raises(ValueError, match="inner dimensions differ"):
        v @ tt.from_numpy(rng.standard_normal(4), 2)
    x3 = tt.from_numpy(rng.standard_normal((2, 6, 4)), (1, 3, 2))
    y3 = tt.from_numpy(rng.standard_normal((3, 4, 5)), (1, 2, 5))
    with pytest.raises(ValueError, match="batch dimensions differ"):
        x3 @ y3
    with pytest.raises(ValueError, match="transpose_a needs a 2-D a"):
        tt.matmul(x3, tt.from_numpy(rng.standard_normal((6, 2)), (3, 2)), transpose_a=True)
    f32 = tt.from_numpy(rng.standard_normal((4, 2)).astype(np.float32), 2)
    with pytest.raises(TypeError, match="dtype mismatch"):
        a @ f32


def test_axis_errors(ab, nothing_submitted):
    a, _ = ab
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)"):
        tt.sum(a, dim=2)
    with pytest.raises(TypeError, match="dim must be an int"):
        tt.amax(a, dim=0.5)
    wrong = tt.from_numpy(np.zeros(4), 3)
    with pytest.raises(ValueError, match=r"b must have shape \(4,\) and tiles \(2,\)"):
        tt.add_broadcast(a, wrong, axis=0)


def test_unwritten_tensor_is_not_read(nothing_submitted):
    e = tt.empty((4, 4), tiles=2)
    with pytest.raises(ValueError, match="never been written"):
        e * 2.0
    with pytest.raises(ValueError, match="never been written"):
        tt.sum(e)


def test_c_layer_rejects_bad_calls_too(ab, nothing_submitted):
    # The C expanders validate again: a bypassed Python check still cannot crash StarPU.
    from tiletrain._ffi import check, ffi
    a, b = ab
    arr = ffi.new("tt_tensor *[]", [a._ptr, b._ptr, a._ptr])
    args = ffi.new("tt_args_add *")
    with pytest.raises(ValueError, match="different shape or tiling"):
        check(lib.tt_map(lib.TT_K_ADD, args, 3, arr))
    with pytest.raises(ValueError, match="not an element-wise map"):
        check(lib.tt_map(lib.TT_K_GEMM, args, 3, arr))
    with pytest.raises(ValueError, match="takes 3 tensors, got 2"):
        check(lib.tt_map(lib.TT_K_ADD, args, 2, arr))
    with pytest.raises(ValueError, match="unknown kernel id"):
        check(lib.tt_map(999, args, 3, arr))
    with pytest.raises(ValueError, match="inner tile sizes differ"):
        check(lib.tt_gemm(1.0, a._ptr, 1, b._ptr, 0, 0.0, a._ptr))
    sargs = ffi.new("tt_args_sum_axis *")
    one = ffi.new("tt_tensor *[]", [a._ptr])
    with pytest.raises(ValueError, match=r"axes \[5, 6\) out of range"):
        check(lib.tt_span_map(lib.TT_K_SUM_AXIS, sargs, 5, 1, 1, one, 1, one, 1))
    with pytest.raises(ValueError, match="reduced operand 1 must have operand 0's shape"):
        check(lib.tt_span_map(lib.TT_K_SUM_AXIS, sargs, 0, 1, 1, one, 1, one, 1))
    with pytest.raises(ValueError, match="not a span kernel"):
        check(lib.tt_span_map(lib.TT_K_ADD, sargs, 0, 1, 1, one, 1, one, 1))
    with pytest.raises(ValueError, match="ndim=9"):
        check(lib.tt_tensor_new(9, [1] * 9, [1] * 9, 0, ffi.new("tt_tensor **")))
    with pytest.raises(ValueError, match="unknown dtype code 7"):
        check(lib.tt_tensor_new(1, [3], [3], 7, ffi.new("tt_tensor **")))
