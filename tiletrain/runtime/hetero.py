"""Heterogeneous workers: which kinds were asked for and started, where tasks ran, and a
placement preference.

StarPU decides where each tile task runs among the workers whose kind has an
implementation of its kernel (the kernel table's device column, csrc/kernels.def).
``prefer("opencl")`` restricts the tasks of kernels that have an OpenCL implementation to
the OpenCL workers (the others still run where they can) — for tests, benchmarks and
pinning work to an accelerator."""
from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable

from .._ffi import check, cstr, ffi, lib

KINDS = {"cpu": 1, "cuda": 2, "opencl": 4}  # TT_WHERE_* bits


def _mask(kinds: str | Iterable[str]) -> int:
    if isinstance(kinds, str):
        kinds = [kinds]
    mask = 0
    for k in kinds:
        if k not in KINDS:
            raise ValueError(f"unknown worker kind {k!r}; known: {', '.join(KINDS)}")
        mask |= KINDS[k]
    return mask


def kernel_devices(name: str) -> set[str]:
    """Worker kinds that have an implementation of kernel ``name`` in this build."""
    ids = {cstr(lib.tt_kernel_name(k)): k for k in range(lib.tt_kernel_count())}
    if name not in ids:
        raise ValueError(f"unknown kernel {name!r}")
    bits = lib.tt_kernel_impls(ids[name])
    return {k for k, b in KINDS.items() if bits & b}


def build_option(name: str) -> str:
    for item in cstr(lib.tt_build_options()).split():
        key, _, value = item.partition("=")
        if key == name:
            return value
    return "?"


@contextlib.contextmanager
def prefer(kinds: str | Iterable[str]):
    """Tasks submitted inside run on workers of these kinds when their kernel has an
    implementation for one of them (``prefer("opencl")``, ``prefer(["cuda"])``)."""
    mask = _mask(kinds)
    old = check(lib.tt_set_where(mask))
    try:
        yield
    finally:
        lib.tt_set_where(old)


def executed_tasks(workers) -> dict[str, int]:
    """Tasks run since init, per worker kind (counted by every kernel wrapper in C)."""
    counts: Counter[str] = Counter()
    for w in workers:
        n = lib.tt_worker_executed(w.id)
        if n >= 0:
            counts[w.kind] += n
    return dict(counts)


def check_build(cfg) -> None:
    """Reject worker kinds that this StarPU or this tiletrain build cannot provide (before
    StarPU starts)."""
    if cfg.nopencl:
        if build_option("starpu_opencl") != "yes":
            raise RuntimeError(
                f"asked for {cfg.nopencl} OpenCL worker(s), but this StarPU was built without OpenCL: use a "
                "StarPU with OpenCL (Debian's libstarpu-dev has it) or start with nopencl=0")
        if build_option("tiletrain_opencl_kernels") != "yes":
            raise RuntimeError(
                f"asked for {cfg.nopencl} OpenCL worker(s), but tiletrain was built without its OpenCL kernels "
                "(CMake found no OpenCL headers or ICD loader): install ocl-icd-opencl-dev and opencl-headers "
                "(`make setup` does) and rebuild, or start with nopencl=0")
    if cfg.ncuda:
        if build_option("starpu_cuda") != "yes":
            raise RuntimeError(
                f"asked for {cfg.ncuda} CUDA worker(s), but this StarPU was built without CUDA: build one with "
                "scripts/build-starpu.sh, set PKG_CONFIG_PATH to it and rebuild tiletrain (README: GPUs), or "
                "start with ncuda=0")
        if build_option("tiletrain_cuda_kernels") != "yes":
            raise RuntimeError(
                f"asked for {cfg.ncuda} CUDA worker(s), but tiletrain was built without its CUDA kernels (no nvcc "
                "at build time): install the CUDA toolkit and rebuild, or start with ncuda=0")


def check_started(cfg, workers) -> None:
    """Reject a session that started fewer OpenCL/CUDA workers than asked for."""
    got = Counter(w.kind for w in workers)
    if cfg.nopencl and got["opencl"] < cfg.nopencl:
        raise RuntimeError(
            f"asked for {cfg.nopencl} OpenCL worker(s), StarPU found {got['opencl']} OpenCL device(s): install an "
            "OpenCL platform (on Debian, `apt-get install pocl-opencl-icd` gives one on the CPU; `clinfo -l` lists "
            "the devices)")
    if cfg.ncuda and got["cuda"] < cfg.ncuda:
        raise RuntimeError(
            f"asked for {cfg.ncuda} CUDA worker(s), StarPU found {got['cuda']} CUDA device(s) (`nvidia-smi` lists "
            "the GPUs)")


def run_kernel(name: str, fields: dict, buffers, kinds: str | Iterable[str], dtype_code: int) -> None:
    """Run one kernel synchronously on NumPy buffers, on workers of the given kinds (the
    device registry test: the same cases as the CPU bodies' registry test)."""
    ids = {cstr(lib.tt_kernel_name(k)): k for k in range(lib.tt_kernel_count())}
    args = ffi.new(f"tt_args_{name} *")
    args.dtype = dtype_code
    for k, v in fields.items():
        setattr(args, k, v)
    bufs = ffi.new("void *[]", [ffi.from_buffer(b, require_writable=True) for b in buffers])
    sizes = ffi.new("int64_t[]", [b.nbytes for b in buffers])
    check(lib.tt_run_kernel(ids[name], args, len(buffers), bufs, sizes, _mask(kinds)))


__all__ = ["KINDS", "kernel_devices", "prefer", "executed_tasks", "build_option", "run_kernel"]
