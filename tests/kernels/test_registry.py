"""The kernel registry: every kernel in csrc/kernels.def has a NumPy reference, and every
CPU body matches it (called directly on NumPy buffers, no StarPU involved)."""
import numpy as np
import pytest

from tiletrain._ffi import cstr, ffi, lib
from tiletrain.testing.half import check_half_result, dtype_code, half_case, half_kernels
from tiletrain.testing.references import REFERENCES, run_cpu_kernel

KERNELS = [cstr(lib.tt_kernel_name(k)) for k in range(lib.tt_kernel_count())]
DTYPE_CODE = {np.float32: lib.TT_F32, np.float64: lib.TT_F64, np.bool_: lib.TT_BOOL}
# every kernel with each of float32, float64, bool that its table line takes
BODY_CASES = [pytest.param(name, dt, id=f"{name}-{dt.__name__}") for name in KERNELS for dt in DTYPE_CODE
              if lib.tt_kernel_dtypes(getattr(lib, f"TT_K_{name.upper()}")) >> DTYPE_CODE[dt] & 1]


def test_registry_matches_table():
    assert len(KERNELS) == lib.TT_NKERNELS > 0
    for k, name in enumerate(KERNELS):
        assert getattr(lib, f"TT_K_{name.upper()}") == k


def test_every_kernel_has_a_reference():
    missing = [k for k in KERNELS if k not in REFERENCES]
    assert not missing, f"kernels without a NumPy reference in tiletrain/testing/references.py: {missing}"
    stale = [k for k in REFERENCES if k not in KERNELS]
    assert not stale, f"references for kernels that do not exist: {stale}"


def test_every_kernel_has_a_body_case():
    assert {p.values[0] for p in BODY_CASES} == set(KERNELS)


@pytest.mark.parametrize("name, dtype", BODY_CASES)
def test_kernel_body_against_reference(name, dtype):
    rng = np.random.default_rng(7)
    for trial in range(4):  # gemm draws its transposes at random: cover them
        fields, buffers = REFERENCES[name].case(rng, dtype)
        expected = REFERENCES[name].ref(fields, *[b.copy() for b in buffers])
        run_cpu_kernel(name, fields, buffers, DTYPE_CODE[dtype])
        for i, exp in expected.items():
            rtol = 1e-5 if dtype == np.float32 else 1e-12
            # cast writes another dtype: compare in the buffer's own
            exp = np.asarray(exp, dtype=buffers[i].dtype).reshape(buffers[i].shape)
            if buffers[i].dtype == np.bool_:  # comparisons, masks: exact
                np.testing.assert_array_equal(buffers[i], exp, err_msg=f"kernel {name} buffer {i}")
            else:
                np.testing.assert_allclose(buffers[i], exp, rtol=rtol, atol=rtol, err_msg=f"kernel {name} buffer {i}")


HALF_KERNELS = half_kernels()


def test_half_kernels_are_the_documented_ones():
    """The kernel table's f16/bf16 kernels: what README and tiletrain.ops.HALF_OPS rely on."""
    assert sorted(HALF_KERNELS) == sorted(["fill", "copy", "scale", "add_scalar", "add", "mul", "axpy", "bcast",
                                           "sum_axis", "sum_all", "gemm", "cast", "region_copy"])
    for name in HALF_KERNELS:
        k = getattr(lib, f"TT_K_{name.upper()}")
        assert lib.tt_kernel_dtypes(k) >> lib.TT_BF16 & 1, name


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", HALF_KERNELS)
def test_half_kernel_body_against_reference(name, dtype):
    """float16/bfloat16 tiles: float32 arithmetic, one rounding of each stored element (acc
    buffers stay float32)."""
    rng = np.random.default_rng(11)
    for trial in range(4):
        fields, buffers, expected = half_case(name, rng, dtype)
        run_cpu_kernel(name, fields, buffers, dtype_code(dtype))
        for i, exp in expected.items():
            check_half_result(buffers[i], exp, f"kernel {name} ({dtype}) buffer {i}")


def test_max_axis_first_overwrites():
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    y = np.full((2, 4), 1e9)
    a = ffi.new("tt_args_max_axis *", dict(dtype=lib.TT_F64, m=2, k=3, n=4, first=1))
    lib.tt_cpu_max_axis(a, ffi.from_buffer(x), ffi.from_buffer(y))
    np.testing.assert_array_equal(y, x.max(axis=1))
