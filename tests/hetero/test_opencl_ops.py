"""Public ops with the OpenCL worker equal the CPU-only results.

Every case (tiletrain/testing/device_cases.py: element-wise, reductions, matmul,
activations, norms, softmax/cross-entropy, embedding, attention, optimizers; forward and
backward) runs three times in one session of 1 CPU + 1 OpenCL worker under dmda: with
every kernel restricted to the CPU worker (`prefer("cpu")`: the CPU-only result), with
every kernel restricted to the OpenCL worker (`prefer("opencl")`: the OpenCL bodies, fed
by transfers from main memory), and unrestricted (dmda mixes the two kinds, so tiles move
both ways).  Results are read back with .numpy(), i.e. from whichever node holds them."""
import numpy as np
import pytest

import tiletrain as tt
from tiletrain._ffi import cstr, lib
from tiletrain.runtime.hetero import kernel_devices, prefer
from tiletrain.testing.device_cases import CASES, run_case
from hetero_session import hetero, hetero_options  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("hetero")


MIXED_RAN: dict[str, int] = {}  # tasks per worker kind in the unrestricted (dmda) passes


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(CASES))
def test_opencl_and_mixed_equal_cpu_only(name, dtype, hetero):
    ref = run_case(name, dtype, "cpu")
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    for kinds in ("opencl", None):
        before = hetero.executed_tasks()
        got = run_case(name, dtype, kinds)
        if kinds is None:
            for k, n in hetero.executed_tasks().items():
                MIXED_RAN[k] = MIXED_RAN.get(k, 0) + n - before.get(k, 0)
        assert got.keys() == ref.keys()
        for k in ref:
            np.testing.assert_allclose(got[k], ref[k], **tol, err_msg=f"{name}/{k} placed on {kinds or 'dmda'}")


def test_int64_fill_and_copy_on_opencl():
    with prefer("opencl"):
        t = tt.full((5, 3), 7, tiles=(2, 2), dtype=np.int64)
        c = tt.copy(tt.from_numpy(np.arange(15).reshape(5, 3) - 2**40, (2, 2)))
        np.testing.assert_array_equal(t.numpy(), np.full((5, 3), 7))
        np.testing.assert_array_equal(c.numpy(), np.arange(15).reshape(5, 3) - 2**40)


def test_every_opencl_kernel_is_exercised_by_an_op_case(hetero):
    """The cases cover every kernel that has an OpenCL body (counted by submission under
    prefer("opencl"), where such a kernel can only run on the OpenCL worker)."""
    names = [cstr(lib.tt_kernel_name(k)) for k in range(lib.tt_kernel_count())]
    before = [lib.tt_kernel_ntasks(k) for k in range(len(names))]
    cpu_before = hetero.executed_tasks().get("cpu", 0)
    for name in CASES:
        run_case(name, np.float32, "opencl")
    used = {n for k, n in enumerate(names) if lib.tt_kernel_ntasks(k) > before[k]}
    missing = sorted(n for n in names if "opencl" in kernel_devices(n) and n not in used)
    assert not missing, f"kernels with an OpenCL body that no op case runs: {missing}"
    # and none of those tasks ran on the CPU worker
    assert hetero.executed_tasks().get("cpu", 0) == cpu_before


def test_half_tasks_avoid_opencl_workers():
    """No OpenCL body takes float16/bfloat16 tiles: with OpenCL preferred, half tasks run on
    the CPU worker (tiles move back from the OpenCL node as needed), float32 ones do not."""
    import ml_dtypes
    from tiletrain.runtime.hetero import run_kernel

    rt = tt.current()
    x = np.linspace(-2, 2, 35).reshape(7, 5)

    def step(a):
        return tt.sum(tt.matmul(a + a, a, transpose_b=True) * 0.5, dim=0).numpy()

    for dtype in (np.float16, ml_dtypes.bfloat16):
        with prefer("cpu"):
            ref = step(tt.from_numpy(x.astype(dtype), (4, 2)))
        with prefer("opencl"):
            a = tt.from_numpy(x.astype(dtype), (4, 2))
            b = tt.scale(tt.from_numpy(x.astype(np.float32), (4, 2)), 2.0)  # runs on OpenCL
            tt.wait()
            assert rt.executed_tasks().get("opencl", 0) > 0
            before = rt.executed_tasks()["opencl"]
            got = step(a)
            assert rt.executed_tasks()["opencl"] == before
            h = tt.astype(b, dtype)  # a float32 tile made on the OpenCL node, cast on the CPU
            np.testing.assert_array_equal(h.numpy(), (2 * x).astype(np.float32).astype(dtype))
        np.testing.assert_array_equal(got.view(np.uint16), ref.view(np.uint16))
        with pytest.raises(ValueError, match="no implementation for dtype"):
            run_kernel("add", {"n": 4}, [np.zeros(4, dtype)] * 3, "opencl", lib.TT_F16 if dtype == np.float16
                       else lib.TT_BF16)


def test_mixed_passes_ran_on_both_worker_kinds():
    """The unrestricted passes above really mixed the kinds (dmda gave tasks to both workers),
    so tiles moved both ways; runs after them (file order)."""
    if not MIXED_RAN:
        pytest.skip("no unrestricted pass ran in this session (deselected)")
    assert MIXED_RAN.get("cpu", 0) > 0 and MIXED_RAN.get("opencl", 0) > 0, MIXED_RAN
