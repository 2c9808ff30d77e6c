"""Asking for workers that do not exist, and interop without its requirements: clear
errors that name what is missing and how to get it.  `tiletrain info` lists the OpenCL
worker.  (Subprocesses: each starts its own runtime.)"""
import importlib.util
import os
import subprocess
import sys

import pytest

from tiletrain.config import RuntimeConfig
from tiletrain.runtime.hetero import build_option



def _run(code_or_args, env=None, cli=False):
    cmd = [sys.executable, "-m", "tiletrain", *code_or_args] if cli else [sys.executable, "-c", code_or_args]
    full_env = {**os.environ, "STARPU_SILENT": "1", **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=120)


def test_starpu_env_lets_opencl_workers_use_cpu_devices():
    assert RuntimeConfig(nopencl=1).starpu_env()["STARPU_OPENCL_ON_CPUS"] == "1"
    assert RuntimeConfig(nopencl=1).starpu_env()["STARPU_NOPENCL"] == "1"
    # every session: StarPU discovers OpenCL devices once per process
    assert RuntimeConfig().starpu_env()["STARPU_OPENCL_ON_CPUS"] == "1"
    assert RuntimeConfig().starpu_env()["STARPU_NOPENCL"] == "0"


def test_an_opencl_session_after_a_cpu_only_one():
    r = _run("import tiletrain as tt\ntt.init(ncpu=1); tt.shutdown()\n"
             "rt = tt.init(ncpu=1, nopencl=1)\nprint(sorted(w.kind for w in rt.workers()))")
    if r.returncode != 0 and "OpenCL" in r.stderr and "found 0" in r.stderr:
        # no device at all, or the discovery of the first session was cached: tell them apart
        alone = _run("import tiletrain as tt; tt.init(ncpu=1, nopencl=1)")
        assert alone.returncode != 0, "OpenCL works in a first session but not after a CPU-only one"
        pytest.skip(f"no OpenCL worker: {alone.stderr.strip()[-200:]}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['cpu', 'opencl']"


def test_info_lists_the_opencl_worker():
    r = _run(["info", "--ncpu", "1", "--nopencl", "1"], cli=True)
    if r.returncode != 0 and "OpenCL" in r.stderr:
        pytest.skip(f"no OpenCL worker: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(line.split()[1:3] == ["opencl", "node"] for line in lines if line.startswith("  ")), r.stdout
    assert any(line.split()[1:2] == ["cpu"] for line in lines if line.startswith("  ")), r.stdout
    assert "memory nodes   2" in r.stdout


@pytest.mark.skipif(build_option("tiletrain_opencl_kernels") != "yes", reason="built without OpenCL kernels")
def test_opencl_workers_without_an_opencl_device(tmp_path):
    # an ICD loader that finds no platform (an empty vendors directory)
    r = _run("import tiletrain as tt; tt.init(ncpu=1, nopencl=1)", env={"OCL_ICD_VENDORS": str(tmp_path)})
    assert r.returncode != 0
    assert "asked for 1 OpenCL worker(s), StarPU found 0 OpenCL device(s)" in r.stderr, r.stderr
    assert "pocl-opencl-icd" in r.stderr


@pytest.mark.skipif(build_option("starpu_cuda") == "yes", reason="this StarPU has CUDA")
def test_cuda_workers_with_a_starpu_without_cuda():
    r = _run(["info", "--ncuda", "1"], cli=True)
    assert r.returncode == 2
    assert "built without CUDA" in r.stderr and "scripts/build-starpu.sh" in r.stderr, r.stderr


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="cupy is installed")
def test_cupy_interop_without_cupy():
    import numpy as np

    import tiletrain as tt
    t = tt.from_numpy(np.ones((3, 2), np.float32))
    with pytest.raises(ImportError, match="need cupy.*pip install cupy"):
        t.to_cupy()
    with pytest.raises(ImportError, match="need cupy"):
        tt.from_cupy(np.ones(3))
