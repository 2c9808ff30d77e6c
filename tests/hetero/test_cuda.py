"""GPU tests (marker `cuda`): the CUDA bodies against the NumPy references and the
CPU-only results, cupy interop, and tiled gemm against cupy's cuBLAS.  They need cupy,
an NVIDIA GPU and a StarPU built with CUDA (scripts/build-starpu.sh), and skip cleanly
otherwise; scripts/gpu_check.sh runs them on a GPU machine (`pytest -m cuda`)."""
import numpy as np
import pytest

import tiletrain as tt
from tiletrain._ffi import cstr, lib
from tiletrain.runtime.hetero import build_option, kernel_devices, prefer, run_kernel
from tiletrain.testing.device_cases import CASES, TRAINING, run_case
from tiletrain.testing.half import check_half_result, dtype_code, half_case, half_kernels
from tiletrain.testing.references import REFERENCES

pytestmark = pytest.mark.cuda

cp = pytest.importorskip("cupy", reason="cupy is not installed (GPU tests need cupy and an NVIDIA GPU)")

KERNELS = [cstr(lib.tt_kernel_name(k)) for k in range(lib.tt_kernel_count())]
DTYPE_CODE = {np.float32: lib.TT_F32, np.float64: lib.TT_F64, np.bool_: lib.TT_BOOL}
TOL = {np.float32: dict(rtol=1e-4, atol=1e-5), np.float64: dict(rtol=1e-10, atol=1e-10), np.bool_: dict(rtol=0, atol=0)}
# every CUDA kernel with each of float32, float64, bool that its table line takes (logical and
# logical_not are bool-only)
CUDA_CASES = [pytest.param(name, dt, id=f"{name}-{dt.__name__}") for name in KERNELS if "cuda" in kernel_devices(name)
              for dt in DTYPE_CODE if lib.tt_kernel_dtypes(getattr(lib, f"TT_K_{name.upper()}")) >> DTYPE_CODE[dt] & 1]


@pytest.fixture(scope="module")
def gpu():
    if build_option("starpu_cuda") != "yes":
        pytest.skip("this StarPU was built without CUDA (build one with scripts/build-starpu.sh)")
    if build_option("tiletrain_cuda_kernels") != "yes":
        pytest.skip("tiletrain was built without its CUDA kernels (no nvcc at build time)")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("CUDA reports no GPU")
    except Exception as exc:  # no driver, no device
        pytest.skip(f"no usable GPU: {exc}")
    if tt.is_initialized():
        tt.shutdown()
    try:
        rt = tt.init(ncpu=1, ncuda=1, sched="dmda")
    except RuntimeError as exc:
        pytest.skip(f"no CUDA worker: {exc}")
    yield rt
    tt.shutdown()


@pytest.mark.parametrize("name, dtype", CUDA_CASES)
def test_cuda_body_against_reference(name, dtype, gpu):
    rng = np.random.default_rng(7)
    for trial in range(4):
        fields, buffers = REFERENCES[name].case(rng, dtype)
        expected = REFERENCES[name].ref(fields, *[b.copy() for b in buffers])
        buffers = [np.ascontiguousarray(b) for b in buffers]
        run_kernel(name, fields, buffers, "cuda", DTYPE_CODE[dtype])
        for i, exp in expected.items():
            np.testing.assert_allclose(buffers[i], np.asarray(exp, dtype=dtype).reshape(buffers[i].shape),
                                       **TOL[dtype], err_msg=f"CUDA kernel {name} buffer {i}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(CASES))
def test_ops_on_cuda_equal_cpu_only(name, dtype, gpu):
    ref = run_case(name, dtype, "cpu")
    for kinds in ("cuda", None):
        got = run_case(name, dtype, kinds)
        for k in ref:
            np.testing.assert_allclose(got[k], ref[k], **TOL[dtype], err_msg=f"{name}/{k} on {kinds or 'dmda'}")


@pytest.mark.parametrize("model", list(TRAINING))
def test_training_steps_on_cuda_equal_cpu_only(model, gpu):
    ref_losses, ref_params = TRAINING[model]("cpu")
    before = gpu.executed_tasks().get("cuda", 0)
    losses, params = TRAINING[model]("cuda")
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-4)
    for p, r in zip(params, ref_params):
        np.testing.assert_allclose(p, r, rtol=1e-4, atol=1e-5)
    assert gpu.executed_tasks()["cuda"] > before


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cupy_round_trip(dtype, gpu):
    a = cp.asarray(np.random.default_rng(0).standard_normal((37, 5, 11)).astype(dtype))
    t = tt.from_cupy(a, tiles=(16, 2, 4))
    assert t.shape == a.shape and t.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(t.numpy(), cp.asnumpy(a))
    with prefer("cuda"):
        u = tt.scale(t, 2.0)  # computed on the GPU from tiles that start there
    back = u.to_cupy()
    assert isinstance(back, cp.ndarray) and back.flags.c_contiguous
    cp.testing.assert_array_equal(back, 2 * a)


def test_tiled_gemm_against_cupy(gpu):
    rng = np.random.default_rng(1)
    a = cp.asarray(rng.standard_normal((300, 200)).astype(np.float32))
    b = cp.asarray(rng.standard_normal((200, 260)).astype(np.float32))
    with prefer("cuda"):
        c = tt.matmul(tt.from_cupy(a, 128), tt.from_cupy(b, 128)).to_cupy()
    cp.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_from_cupy_rejects_a_numpy_array(gpu):
    with pytest.raises(TypeError, match="cupy.ndarray"):
        tt.from_cupy(np.ones(3))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", [k for k in half_kernels() if "cuda" in kernel_devices(k)])
def test_cuda_half_body_against_reference(name, dtype, gpu):
    """The float16/bfloat16 CUDA bodies (half_kernels.cuh, cast.cu, cuBLAS GemmEx): one
    rounding of float32 arithmetic, as the CPU bodies (tests/kernels/test_registry.py)."""
    rng = np.random.default_rng(11)
    for trial in range(4):
        fields, buffers, expected = half_case(name, rng, dtype)
        run_kernel(name, fields, buffers, "cuda", dtype_code(dtype))
        for i, exp in expected.items():
            check_half_result(buffers[i], exp, f"CUDA kernel {name} ({dtype}) buffer {i}")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_matmul_and_sum_on_cuda(dtype, gpu):
    """Tiled half matmul (several K tiles: a float32 accumulator, cast once) and sum on the
    GPU, within one rounding step of the CPU-only results."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((300, 200)).astype(dtype)
    b = rng.standard_normal((200, 260)).astype(dtype)
    out = {}
    for kinds in ("cpu", "cuda"):
        with prefer(kinds):
            c = tt.matmul(tt.from_numpy(a, 128), tt.from_numpy(b, 128))
            out[kinds] = (c.numpy().astype(np.float64), tt.sum(c, dim=0).numpy().astype(np.float64))
    u = 2.0 ** -10 if dtype == "float16" else 2.0 ** -7
    for got, ref in zip(out["cuda"], out["cpu"]):
        np.testing.assert_allclose(got, ref, rtol=0, atol=u * np.abs(ref).max())
