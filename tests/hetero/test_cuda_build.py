"""The CUDA side built on a machine with nvcc and no GPU (every CI run): tiletrain's own
StarPU has CUDA, libtiletrain has its CUDA codelets, every kernel that declares a CUDA
implementation (csrc/kernels.def) has a CUDA function linked in, cuBLAS is not loaded until a
CUDA worker needs it, and a runtime started here has 0 CUDA workers and runs tasks.  (On a GPU
machine, scripts/gpu_check.sh runs the kernels themselves: tests/hetero/test_cuda.py.)"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tiletrain as tt
from tiletrain._ffi import cstr, lib
from tiletrain.runtime.hetero import build_info, kernel_devices

ROOT = Path(__file__).resolve().parents[2]
LIB = Path(tt.__file__).resolve().parent / "libtiletrain.so"

pytestmark = [
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found: no CUDA side to build here"),
    pytest.mark.skipif(build_info()["starpu_source"] == "system",
                       reason="built against Debian's StarPU (STARPU=system), which has no CUDA"),
]


def declared_cuda() -> set[str]:
    sys.path.insert(0, str(ROOT / "csrc"))
    try:
        import gen_kernels
    finally:
        sys.path.pop(0)
    return {k.name for k in gen_kernels.parse((ROOT / "csrc" / "kernels.def").read_text()) if "cuda" in k.impls}


def test_built_with_cuda_where_nvcc_exists():
    b = build_info()
    assert b["starpu_cuda"] and b["tiletrain_cuda_kernels"], b


def test_every_kernel_declaring_cuda_has_a_linked_cuda_function():
    cuda = declared_cuda()
    assert len(cuda) > 50  # the element-wise bodies, gemm (cuBLAS), cast, the half kernels ...
    for k in range(lib.tt_kernel_count()):
        name = cstr(lib.tt_kernel_name(k))
        assert lib.tt_kernel_cuda_func(k) == (name in cuda), name
        assert ("cuda" in kernel_devices(name)) == (name in cuda), name
    undefined = subprocess.run(["nm", "-D", "--undefined-only", str(LIB)], capture_output=True, text=True).stdout
    assert "tt_cuda_" not in undefined  # every body is in the library (it also links -Wl,--no-undefined)


def test_no_gpu_means_no_cuda_worker_and_the_runtime_runs_without_loading_cublas():
    """A fresh process with no LD_LIBRARY_PATH: the run path finds StarPU and CUDA's runtime;
    cuBLAS (220 MB to load) stays unloaded without a CUDA worker (scripts/cublas-lazy.c)."""
    code = ("import numpy as np, tiletrain as tt\n"
            "rt = tt.init(ncpu=2)\n"
            "info = rt.info()\n"
            "a = np.arange(12.0).reshape(3, 4)\n"
            "got = (tt.from_numpy(a, 2) @ tt.from_numpy(a.T.copy(), 2)).numpy()\n"
            "assert np.allclose(got, a @ a.T)\n"
            "maps = open('/proc/self/maps').read()\n"
            "print(info['cuda_workers'], info['cpu_workers'], 'libcudart' in maps, 'libcublas.so' in maps)\n"
            "tt.shutdown()\n")
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "2", "True", "False"], r.stdout


def test_asking_for_a_cuda_worker_without_a_gpu_says_so():
    tt.shutdown()
    with pytest.raises(RuntimeError, match="StarPU found 0 CUDA device"):
        tt.init(ncpu=1, ncuda=1)
    assert not tt.is_initialized()
    x = np.ones((4, 4))
    tt.init(ncpu=2)
    np.testing.assert_array_equal((tt.from_numpy(x, 2) * 2.0).numpy(), 2 * x)
