"""Every CUDA body compiles: each csrc/kernels/cuda/*.cu to an object with nvcc, against
headers generated from the kernel table (syntax and types checked on every run where nvcc
exists, even when this StarPU has no CUDA and nothing is linked).  gemm.cu needs the
cuBLAS headers as well (the CUDA toolkit's, or the nvidia-cublas wheel's)."""
import glob
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import tiletrain as tt
from tiletrain.runtime.hetero import build_info

ROOT = Path(__file__).resolve().parents[2]
CUDA_SOURCES = sorted((ROOT / "csrc" / "kernels" / "cuda").glob("*.cu"))
NVCC = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)), None)


def _cublas_include() -> str | None:
    """A directory holding cublas_v2.h, or None."""
    candidates = []
    root = build_info()["starpu_cuda_root"]  # the CUDA root tiletrain's own StarPU was built with
    if root:
        candidates.append(Path(root) / "include")
    if NVCC:
        candidates.append(Path(NVCC).resolve().parent.parent / "include")
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "include")
    candidates.append(Path("/usr/local/cuda/include"))
    candidates.append(Path("/usr/include"))
    for site in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        candidates += [Path(p) for p in glob.glob(os.path.join(site, "nvidia", "*", "include"))]
    return next((str(c) for c in candidates if (c / "cublas_v2.h").exists()), None)


@pytest.fixture(scope="module")
def gen_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("gen")
    subprocess.run([sys.executable, str(ROOT / "csrc" / "gen_kernels.py"), str(ROOT / "csrc" / "kernels.def"),
                    str(out)], check=True)
    return out


def test_every_kernel_with_a_cuda_implementation_has_a_body():
    """Generic CUDA implementations come from the portable kernels compiled by
    device_kernels.cu (and, for float16/bfloat16, the templates of half_kernels.cuh);
    `cuda:custom` ones need tt_cuda_<name> in some .cu file."""
    sys.path.insert(0, str(ROOT / "csrc"))
    try:
        import gen_kernels
    finally:
        sys.path.pop(0)
    kernels = gen_kernels.parse((ROOT / "csrc" / "kernels.def").read_text())
    device = "\n".join(p.read_text() for p in (ROOT / "csrc" / "kernels" / "opencl").glob("*.cl"))
    cuda = "\n".join(p.read_text() for p in CUDA_SOURCES)
    half = (ROOT / "csrc" / "kernels" / "cuda" / "half_kernels.cuh").read_text()
    assert "device_kernels.cu" in {p.name for p in CUDA_SOURCES}
    for k in kernels:
        if (k.impls.get("cuda") == "generic" or k.impls.get("opencl") == "generic") and not k.expr:
            # (`expr` kernels: gen_kernels.py writes their device bodies, tt_kernels_expr.cl)
            assert f"SUF(tt_{k.name})(" in device, f"{k.name}: no portable device kernel in csrc/kernels/opencl/"
        if k.impls.get("cuda") == "custom":
            assert f"tt_cuda_{k.name}(" in cuda, f"{k.name}: cuda:custom but no tt_cuda_{k.name} in csrc/kernels/cuda/"
        if k.impls.get("cuda") == "generic" and k.has_half:
            assert f"__global__ void tt_{k.name}_half(" in half, \
                f"{k.name}: takes f16/bf16 but has no tt_{k.name}_half<H> in csrc/kernels/cuda/half_kernels.cuh"


needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found (install the CUDA toolkit to compile-check the "
                                                      "CUDA bodies)")


@pytest.fixture(scope="module")
def compiles(gen_dir, tmp_path_factory):
    """Every .cu compiling at once (nvcc is one thread: the files overlap on the cores), as
    ``{name: (command, Popen, object path)}``, or ``{name: skip reason}``."""
    out = tmp_path_factory.mktemp("cuda")
    tt.wait()  # puts the runtime's polling workers to sleep: they would slow nvcc down 2-3x
    jobs = {}
    for source in CUDA_SOURCES:
        includes = [ROOT / "csrc" / "include", gen_dir]
        if "cublas" in source.read_text():
            inc = _cublas_include()
            if inc is None:
                jobs[source.name] = ("cuBLAS headers (cublas_v2.h) not found: install the CUDA toolkit's cuBLAS or "
                                     "the nvidia-cublas wheel to compile-check this file")
                continue
            includes.append(inc)
        # A virtual architecture only (PTX, no ptxas): the front end and code generation check
        # syntax and types in about half the time of a full object for a real GPU.
        obj = out / (source.stem + ".o")
        cmd = [NVCC, "-c", "-std=c++17", "-arch=compute_75", "-code=compute_75", "-Werror", "all-warnings",
               *(f"-I{p}" for p in includes), "-o", str(obj), str(source)]
        jobs[source.name] = (cmd, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
                             obj)
    yield jobs
    for job in jobs.values():
        if not isinstance(job, str) and job[1].poll() is None:
            job[1].kill()
            job[1].wait()


@needs_nvcc
@pytest.mark.parametrize("source", CUDA_SOURCES, ids=[p.name for p in CUDA_SOURCES])
def test_cuda_body_compiles(source, compiles):
    job = compiles[source.name]
    if isinstance(job, str):
        pytest.skip(job)
    cmd, proc, obj = job
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{output}"
    assert obj.stat().st_size > 0
