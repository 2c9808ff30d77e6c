"""The CPU BLAS chosen at build time (CMake TT_BLAS: openblas or mkl)."""
import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tiletrain as tt
from tiletrain._ffi import cstr, lib
from tiletrain.runtime.hetero import starpu_prefix

ROOT = Path(__file__).resolve().parents[1]


def test_info_names_the_blas_it_was_built_with():
    blas = cstr(lib.tt_blas_info())
    built = cstr(lib.tt_build_options()).split("blas=")[1].split()[0]
    assert built in ("openblas", "mkl") and blas.startswith(built + " (")
    assert tt.current().info()["blas"] == blas


AVX512 = {"avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl"}
HASWELL = "openblas (OpenBLAS 0.3.21 DYNAMIC_ARCH Haswell; core Haswell)"


def test_blas_note_names_avx2_kernels_on_an_avx512_cpu():
    from tiletrain.runtime import blas_note
    note = blas_note(HASWELL, AVX512 | {"avx512_bf16"}, {"OPENBLAS_CORETYPE": "Haswell"})
    assert "OPENBLAS_CORETYPE=Haswell" in note and "unset it" in note and "Cooperlake" in note
    note = blas_note(HASWELL, AVX512, {})  # an OpenBLAS older than the CPU chose AVX2 by itself
    assert note.startswith("OpenBLAS chose its Haswell") and "OPENBLAS_CORETYPE=SkylakeX" in note
    assert blas_note(HASWELL, {"avx2", "fma"}, {"OPENBLAS_CORETYPE": "Haswell"}) is None  # no AVX-512
    assert blas_note(HASWELL.replace("core Haswell", "core SkylakeX"), AVX512, {}) is None
    assert blas_note("mkl (Intel oneMKL 2026)", AVX512, {"OPENBLAS_CORETYPE": "Haswell"}) is None
    assert tt.current().info()["blas_note"] == blas_note()


# the kernel tests whose bodies call BLAS (gemm and its epilogues, attention's products, conv
# through the registry's reference of every kernel); the element-wise ones never reach it
BLAS_KERNEL_TESTS = ("test_gemm_vector.py", "test_attention_blocks.py", "test_registry.py")


def test_kernels_agree_under_every_openblas_core_type_this_cpu_runs():
    """The kernel tests under each OpenBLAS core type the CPU can run, not only the one this
    process uses (OPENBLAS_CORETYPE, or OpenBLAS's detection): AVX-512 kernels once let a NaN
    through an alpha-0 gemm that the AVX2 ones kept out."""
    from tiletrain.runtime import _cpu_flags
    info = cstr(lib.tt_blas_info())
    if not info.startswith("openblas"):
        pytest.skip("tiletrain is built with MKL")
    flags = _cpu_flags()
    cores = [c for c, need in (("Haswell", {"avx2", "fma"}),
                               ("SkylakeX", {"avx512f", "avx512bw", "avx512dq", "avx512vl"}),
                               ("Cooperlake", {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_bf16"}))
             if need <= flags and not info.endswith(f"core {c})")]
    if not cores:
        pytest.skip("no other OpenBLAS core type runs on this CPU")
    for core in cores:
        env = {**os.environ, "OPENBLAS_CORETYPE": core}
        used = subprocess.run([sys.executable, "-c", "from tiletrain._ffi import cstr, lib; print(cstr(lib.tt_blas_info()))"],
                              env=env, capture_output=True, text=True, timeout=120)
        assert used.stdout.strip().endswith(f"core {core})"), used.stdout + used.stderr
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                            *(str(ROOT / "tests" / "kernels" / f) for f in BLAS_KERNEL_TESTS)],
                           env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, f"tests/kernels with OPENBLAS_CORETYPE={core}:\n{r.stdout[-4000:]}{r.stderr[-2000:]}"


def _starpu_arg() -> str:
    """CMake's StarPU: the one this build's library was compiled against (its own build in
    the cache, or Debian's package: then pkg-config's default)."""
    return f"-DTT_STARPU_PREFIX={starpu_prefix() or ''}"


def _mkl_prefix():
    for prefix in (sys.prefix, os.environ.get("TILETRAIN_MKL_PREFIX", "")):
        if prefix and glob.glob(os.path.join(prefix, "lib", "libmkl_core.so*")) and \
                os.path.exists(os.path.join(prefix, "include", "mkl_cblas.h")):
            return prefix
    return None


@pytest.mark.skipif(_mkl_prefix() is None, reason="the mkl-devel wheel is not installed here")
def test_the_other_blas_builds(tmp_path):
    """Configure and build the C library with the BLAS this build does not use."""
    built = cstr(lib.tt_build_options()).split("blas=")[1].split()[0]
    other = "openblas" if built == "mkl" else "mkl"
    build = tmp_path / "build"
    subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                    f"-DTT_VERSION={tt.__version__}", f"-DTT_BLAS={other}", f"-DTT_MKL_PREFIX={_mkl_prefix()}",
                    _starpu_arg()],
                   check=True, capture_output=True, timeout=300)
    subprocess.run(["cmake", "--build", str(build), "-j", "2", "--target", "tiletrain"], check=True,
                   capture_output=True, timeout=900)
    so = build / "libtiletrain.so"
    needed = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True, check=True).stdout
    assert ("libmkl_core" in needed) == (other == "mkl")


def test_a_bad_blas_choice_is_refused(tmp_path):
    r = subprocess.run(["cmake", "-S", str(ROOT), "-B", str(tmp_path / "b"), "-DTT_BLAS=atlas", _starpu_arg()],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "TT_BLAS must be openblas or mkl" in r.stdout + r.stderr


@pytest.mark.skipif(shutil.which("cmake") is None, reason="no cmake")
def test_mkl_without_its_wheel_is_a_clear_error(tmp_path):
    r = subprocess.run(["cmake", "-S", str(ROOT), "-B", str(tmp_path / "b"), "-DTT_BLAS=mkl", _starpu_arg(),
                        f"-DTT_MKL_PREFIX={tmp_path / 'nothing'}"], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "pip install mkl-devel" in r.stdout + r.stderr


def test_numpys_openblas_is_single_threaded_while_a_runtime_is_up():
    """NumPy's own OpenBLAS (a wheel's libscipy_openblas, not tiletrain's) runs on the workers'
    cores: one thread while a runtime is up (its idle threads would spin after each NumPy
    product), its own count back after shutdown."""
    code = (
        "import json, numpy, tiletrain as tt\n"
        "from threadpoolctl import ThreadpoolController\n"
        "def counts():\n"
        "    return {c.filepath: c.num_threads for c in ThreadpoolController().select(internal_api='openblas').lib_controllers}\n"
        "numpy.dot(numpy.ones((64, 64)), numpy.ones((64, 64)))\n"
        "before = counts()\n"
        "tt.init(ncpu=2)\n"
        "during = counts()\n"
        "tt.shutdown()\n"
        "print(json.dumps([before, during, counts()]))\n")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    before, during, after = json.loads(out.stdout.strip().splitlines()[-1])
    numpys = [k for k in before if "tiletrain" not in k and "libopenblasp" not in k]
    assert numpys and all(before[k] == 2 for k in numpys), before     # numpy's, as the environment set it
    assert set(during.values()) == {1}, during
    assert all(after[k] == before[k] for k in numpys), after
