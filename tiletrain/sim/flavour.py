"""What the simulation flavour of this build can simulate, asked of it in a fresh process
(a process loads one flavour: tiletrain/_ffi.py), once per process.

Simulated CUDA devices need codelets with a CUDA function: csrc/gen_kernels.py gives the
kernels with a `cuda` column one under TT_SIMULATION (never called: StarPU simulates the
task's time).  A simulation flavour built before that, or none at all, cannot simulate GPUs.
"""
from __future__ import annotations

import functools
import os
import subprocess
import sys

from ..config import SIMULATE_ENV

_PROBE = """
from tiletrain import _ffi
lib = _ffi.lib
names = {_ffi.cstr(lib.tt_kernel_name(k)): k for k in range(lib.tt_kernel_count())}
print("cuda_codelets", int(bool(lib.tt_kernel_cuda_func(names["gemm"]))))
"""


@functools.lru_cache(maxsize=None)
def cuda_simulation() -> str | None:
    """None when the simulation flavour simulates CUDA devices, else why it cannot."""
    env = dict(os.environ)
    env[SIMULATE_ENV] = "probe"  # loads the simulation flavour; no machine is needed to import it
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        r = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "loading the simulation flavour did not finish within 120 s"
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        return f"the simulation flavour could not be loaded ({last})"
    if "cuda_codelets 1" not in r.stdout:
        return ("this build's simulation flavour has no CUDA codelets (libtiletrain_sim.so built before "
                "csrc/gen_kernels.py gave them a simulated CUDA function): rebuild it with `make sim`")
    return None


__all__ = ["cuda_simulation"]
