"""Run a Python script under `mpirun -np N` (or alone) with the flags a one-machine, 2-core
job needs, with a hard timeout so that a hang fails the test instead of blocking the suite."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tiletrain.utils import mpirun

SCRIPTS = Path(__file__).resolve().parent / "scripts"
MPIRUN = shutil.which("mpirun")



def have_mpi() -> bool:
    from tiletrain._ffi import lib
    return MPIRUN is not None and bool(lib.tt_mpi_available())


requires_mpi = pytest.mark.skipif(not have_mpi(), reason="mpirun or a StarPU-MPI build of tiletrain is missing")


def _env(extra: dict | None = None) -> dict:
    env = mpirun.environment()  # the per-rank settings of README "Running under mpirun"
    env.setdefault("STARPU_HOME", str(Path(__file__).resolve().parents[2] / "build" / "starpu-home-test"))
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env


def _run(cmd: list[str], timeout: float, env: dict) -> subprocess.CompletedProcess:
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # mpirun forwards SIGTERM to its ranks; then make sure nothing of the group survives
        p.send_signal(signal.SIGTERM)
        try:
            out, _ = p.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
        pytest.fail(f"timed out after {timeout} s: {' '.join(cmd)}\n{out}")
    return subprocess.CompletedProcess(cmd, p.returncode, out, "")


def run_mpi(script: str, nprocs: int, *args, timeout: float = 60, env: dict | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
    """`mpirun -np nprocs python scripts/<script> args...`; check: fail the test on a non-zero exit."""
    cmd = mpirun.command(nprocs, [sys.executable, SCRIPTS / script, *args])
    res = _run(cmd, timeout, _env(env))
    if check and res.returncode != 0:
        pytest.fail(f"exit {res.returncode}: {' '.join(cmd)}\n{res.stdout}")
    return res


def run_single(script: str, *args, timeout: float = 60, env: dict | None = None,
               check: bool = True) -> subprocess.CompletedProcess:
    """The same script in one plain process (no MPI); check: fail the test on a non-zero exit."""
    cmd = [sys.executable, str(SCRIPTS / script), *map(str, args)]
    res = _run(cmd, timeout, _env(env))
    if check and res.returncode != 0:
        pytest.fail(f"exit {res.returncode}: {' '.join(cmd)}\n{res.stdout}")
    return res
