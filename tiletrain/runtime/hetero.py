"""Heterogeneous workers: which kinds were asked for and started, where tasks ran, and a
placement preference.

StarPU decides where each tile task runs among the workers whose kind has an
implementation of its kernel (the kernel table's device column, csrc/kernels.def).
``prefer("opencl")`` restricts the tasks of kernels that have an OpenCL implementation to
the OpenCL workers (the others still run where they can) — for tests, benchmarks and
pinning work to an accelerator."""
from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Iterable

from .._ffi import check, cstr, ffi, lib
from .registry import KINDS, kernel_info


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
    return set(kernel_info(name).impls)


def build_option(name: str) -> str:
    for item in cstr(lib.tt_build_options()).split():
        key, _, value = item.partition("=")
        if key == name:
            return value
    return "?"


def starpu_prefix() -> str | None:
    """The install prefix of the StarPU this library was built against (None: unknown)."""
    return cstr(lib.tt_starpu_prefix()) or None


def build_info() -> dict:
    """What this library was built against: the StarPU (version, where its source came from:
    ``debian-source``, ``tarball`` or ``system``, its install prefix, STARPU_MAXCPUS, CUDA,
    FxT, OpenCL, MPI) and tiletrain's own device kernels."""
    opts = dict(item.partition("=")[::2] for item in cstr(lib.tt_build_options()).split())
    yes = {"yes": True, "no": False}
    prefix = starpu_prefix()
    built = {}  # what scripts/build-starpu.sh recorded beside its build
    if prefix and os.path.exists(os.path.join(prefix, "share", "tiletrain", "starpu-build.txt")):
        with open(os.path.join(prefix, "share", "tiletrain", "starpu-build.txt")) as f:
            built = dict(line.rstrip("\n").partition("=")[::2] for line in f if "=" in line and line[0] != "#")
    return {"starpu_version": cstr(lib.tt_starpu_version()),
            "starpu_source": opts.get("starpu_source", "?"),
            "starpu_prefix": prefix,
            "starpu_cuda_root": built.get("cuda_root") or None,
            "starpu_maxcpus": int(opts["starpu_maxcpus"]),
            "starpu_cuda": yes.get(opts.get("starpu_cuda")),
            "starpu_fxt": yes.get(opts.get("starpu_fxt")),
            "starpu_opencl": yes.get(opts.get("starpu_opencl")),
            "starpu_mpi": yes.get(opts.get("starpu_mpi")),
            "tiletrain_cuda_kernels": yes.get(opts.get("tiletrain_cuda_kernels")),
            "tiletrain_opencl_kernels": yes.get(opts.get("tiletrain_opencl_kernels"))}


def max_cpu_workers() -> int:
    """STARPU_MAXCPUS of this StarPU build: the most CPU workers one process can have."""
    return int(build_option("starpu_maxcpus"))


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
    if cfg.ncpu is not None and cfg.ncpu > max_cpu_workers():
        raise ValueError(
            f"ncpu={cfg.ncpu}: this StarPU build allows at most {max_cpu_workers()} CPU workers per process "
            f"(STARPU_MAXCPUS = {max_cpu_workers()}, StarPU {build_option('starpu_source')}); ask for at most "
            f"{max_cpu_workers()}" + ("" if build_option("starpu_source") != "system" else
                                      ", or build tiletrain's own StarPU (`make setup`, without STARPU=system: "
                                      "256 per process)"))
    if cfg.fxt and build_option("starpu_fxt") != "yes":
        raise RuntimeError(
            "fxt=True (or TILETRAIN_FXT=1) needs a StarPU built with FxT, and this one was not (Debian's "
            "libstarpu-dev, STARPU=system, is not): `make setup` builds tiletrain's own StarPU, which is")
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
                f"asked for {cfg.ncuda} CUDA worker(s), but this StarPU was built without CUDA: `make setup` "
                "(scripts/build-starpu.sh) builds tiletrain's own StarPU with CUDA where nvcc is found, not with "
                "STARPU=system (docs/install.md: The StarPU that setup builds), or start with ncuda=0")
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
    info = kernel_info(name)
    args = ffi.new(info.args)
    args.dtype = dtype_code
    for k, v in fields.items():
        setattr(args, k, v)
    bufs = ffi.new("void *[]", [ffi.from_buffer(b, require_writable=True) for b in buffers])
    sizes = ffi.new("int64_t[]", [b.nbytes for b in buffers])
    check(lib.tt_run_kernel(info.id, args, len(buffers), bufs, sizes, _mask(kinds)))


__all__ = ["KINDS", "kernel_devices", "prefer", "executed_tasks", "build_option", "build_info", "max_cpu_workers",
           "run_kernel", "starpu_prefix"]
