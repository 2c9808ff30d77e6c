"""Launching a Python program on several ranks of one machine: the `mpirun` command line and
the per-rank environment tiletrain's tests, benchmarks and examples use (docs/howto/mpirun.md;
examples/mpirun_env.sh is the same for the shell).

    subprocess.run(command(2, [sys.executable, "train.py"]), env=environment())
"""
from __future__ import annotations

import os
import shutil

# --allow-run-as-root: Open MPI refuses root without it (containers); --oversubscribe: more
# ranks than cores; --bind-to none: the OS places the ranks (StarPU binds nothing, below).
FLAGS = ("--allow-run-as-root", "--oversubscribe", "--bind-to", "none")

# Ranks sharing one machine's cores (measured best on 2 cores): one CPU worker each, no
# worker or MPI-progress binding (every rank would pin to the same core), single-threaded
# BLAS, StarPU's banner off (one copy per rank otherwise), idle workers napping 200 us at a
# time instead of polling (a polling worker takes a core from the other ranks' threads:
# data and pipeline steps 0-3 % faster, README "Running under mpirun").
RANK_ENV = {"STARPU_NCPU": "1", "STARPU_WORKERS_NOBIND": "1", "STARPU_MPI_NOBIND": "1",
            "OPENBLAS_NUM_THREADS": "1", "STARPU_SILENT": "1", "TILETRAIN_IDLE_NAP_US": "200"}

_LAUNCHER = ("OMPI_", "PMIX_", "PMI_")


def command(nprocs: int, argv: list[str]) -> list[str]:
    """`mpirun FLAGS -np nprocs argv...`; RuntimeError when mpirun is not on PATH."""
    if not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs must be a positive int, got {nprocs!r}")
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise RuntimeError("mpirun is not on PATH (Debian: apt-get install openmpi-bin; `make setup` does)")
    return [mpirun, *FLAGS, "-np", str(nprocs), *map(str, argv)]


def environment(base: dict | None = None, ranks: bool = True, **extra: str) -> dict:
    """A copy of base (default os.environ) without this process' own launcher variables
    (OMPI_*, PMIX_*, PMI_*: a parent run under mpirun must not leak into its children), with
    RANK_ENV where ranks is true, then extra."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith(_LAUNCHER)}
    if ranks:
        env.update(RANK_ENV)
    env.update(extra)
    return env
