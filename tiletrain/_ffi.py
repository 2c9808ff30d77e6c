"""The only importer of the compiled module: loads it, checks versions, maps C errors to
Python exceptions."""
from __future__ import annotations

import importlib

from ._version import __version__
from .config import simulated_machine

# The flavour of this process, fixed when the library loads (one StarPU per process):
# "real", or "sim" when TILETRAIN_SIMULATE names a machine (config.simulated_machine;
# `tiletrain simulate` sets it): the same library built against StarPU with SimGrid, which
# runs the task graph on a simulated machine (docs/simulation.md).
FLAVOUR = "sim" if simulated_machine() else "real"

# Loaded with the default RTLD_LOCAL: the library's OpenBLAS must not interpose its
# symbols on other libraries in the process (PyTorch's BLAS calls would otherwise land in
# it and run several times slower).
# (the compiled modules, by name: tiletrain/_build_ffi.py's FLAVOURS)
_MODULES = {"real": "_tiletrain_cffi", "sim": "_tiletrain_sim_cffi"}
try:
    _mod = importlib.import_module(f".{_MODULES[FLAVOUR]}", __package__)
except ImportError as exc:  # pragma: no cover - depends on the build
    if FLAVOUR == "sim":
        raise ImportError(
            f"TILETRAIN_SIMULATE={simulated_machine()} needs tiletrain's simulation flavour, which "
            f"could not be loaded ({exc}). It is built by `make setup` where SimGrid is installed "
            "(apt-get install libsimgrid-dev, then make setup; docs/simulation.md). Unset TILETRAIN_SIMULATE "
            "to run for real."
        ) from exc
    raise ImportError(
        f"tiletrain's compiled extension could not be loaded ({exc}). Build it with `make setup` "
        "(or `pip install -e .` once StarPU, OpenBLAS and cmake are installed)."
    ) from exc

ffi = _mod.ffi
lib = _mod.lib



def check_versions(package_version: str, library_version: str, library_abi: int, module_abi: int) -> None:
    """Refuse a compiled library that was built for another version of the Python package."""
    if library_version != package_version:
        raise ImportError(
            f"tiletrain version mismatch: the Python package is {package_version} but the compiled "
            f"library libtiletrain is {library_version}; rebuild with `make setup` (or `pip install -e .`)."
        )
    if library_abi != module_abi:
        raise ImportError(
            f"tiletrain ABI mismatch: libtiletrain has ABI {library_abi}, the cffi module was built "
            f"for {module_abi}; rebuild with `make setup`."
        )


check_versions(__version__, ffi.string(lib.tt_version()).decode(), lib.tt_abi_version(), lib.TT_ABI_VERSION)

_EXC = {
    lib.TT_EINVAL: ValueError,
    lib.TT_ENOTINIT: RuntimeError,
    lib.TT_EDEAD: RuntimeError,
    lib.TT_ENOMEM: MemoryError,
    lib.TT_ESTARPU: RuntimeError,
    lib.TT_EBUSY: RuntimeError,
}


def last_error() -> str:
    return ffi.string(lib.tt_last_error()).decode(errors="replace")


def check(rc: int) -> int:
    """Raise the Python exception for a negative tt_status, else return rc."""
    if rc < 0:
        raise _EXC.get(rc, RuntimeError)(last_error() or f"tiletrain C error {rc}")
    return rc


def cstr(p) -> str:
    return ffi.string(p).decode() if p != ffi.NULL else ""
