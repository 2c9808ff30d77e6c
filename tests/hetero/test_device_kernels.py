"""Every kernel with an OpenCL body, run alone on the OpenCL worker (PoCL) against the
same NumPy references and cases as the CPU bodies' registry test (tests/kernels/)."""
import numpy as np
import pytest

import tiletrain as tt
from tiletrain._ffi import cstr, lib
from tiletrain.runtime.hetero import kernel_devices, run_kernel
from tiletrain.testing.references import REFERENCES
from hetero_session import hetero, hetero_options  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("hetero")

KERNELS = [cstr(lib.tt_kernel_name(k)) for k in range(lib.tt_kernel_count())]
OPENCL = [k for k in KERNELS if "opencl" in kernel_devices(k)]
DTYPE_CODE = {np.float32: lib.TT_F32, np.float64: lib.TT_F64, np.bool_: lib.TT_BOOL}
# every OpenCL kernel with each of float32, float64, bool that its table line takes
OPENCL_CASES = [pytest.param(name, dt, id=f"{name}-{dt.__name__}") for name in OPENCL for dt in DTYPE_CODE
                if lib.tt_kernel_dtypes(getattr(lib, f"TT_K_{name.upper()}")) >> DTYPE_CODE[dt] & 1]


def test_opencl_bodies_are_compiled_in():
    assert tt.runtime.hetero.build_option("tiletrain_opencl_kernels") == "yes"
    # the kernels that dominate training have OpenCL bodies
    for name in ("gemm", "add", "mul", "scale", "axpy", "fill", "copy", "gelu", "gelu_backward", "sum_axis"):
        assert name in OPENCL, name


@pytest.mark.parametrize("name, dtype", OPENCL_CASES)
def test_opencl_body_against_reference(name, dtype):
    rng = np.random.default_rng(7)
    for trial in range(4):  # gemm draws its transposes at random: cover them
        fields, buffers = REFERENCES[name].case(rng, dtype)
        expected = REFERENCES[name].ref(fields, *[b.copy() for b in buffers])
        buffers = [np.ascontiguousarray(b) for b in buffers]
        run_kernel(name, fields, buffers, "opencl", DTYPE_CODE[dtype])
        for i, exp in expected.items():
            rtol = 1e-5 if dtype == np.float32 else 1e-11
            exp = np.asarray(exp, dtype=buffers[i].dtype).reshape(buffers[i].shape)
            if exp.dtype == np.bool_:  # comparisons, masks: exact
                np.testing.assert_array_equal(buffers[i], exp, err_msg=f"OpenCL kernel {name} buffer {i}")
            else:
                np.testing.assert_allclose(buffers[i], exp, rtol=rtol, atol=rtol, err_msg=f"OpenCL kernel {name} buffer {i}")


def test_run_kernel_rejects_a_missing_implementation():
    # a kernel with no CUDA body in this build (every kernel, without CUDA kernels)
    name = "add" if "cuda" not in kernel_devices("add") else "bn_merge"
    assert "cuda" not in kernel_devices(name)
    with pytest.raises(ValueError, match="no implementation"):
        run_kernel(name, {}, [np.zeros(4, np.float32)] * (4 if name == "bn_merge" else 3), "cuda", lib.TT_F32)
