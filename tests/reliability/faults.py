"""Launch the fault scenarios of tests/reliability/scripts and time them (shared by
tests/reliability/test_faults.py and benchmarks/faults.py).

Each MPI scenario runs under `mpirun -np 2`; the failing rank prints ``FAULT-AT <time>``
when it fails, so that the time from the failure to the job's exit is measured, and checked
(at most tests/mpi/fault_timing.py MAX_EXIT_S) for every scenario with a fault."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mpi"))
from fault_timing import after_fault, exit_time_problem  # noqa: E402
from mpi_launch import _env, have_mpi  # noqa: E402

from tiletrain.utils import mpirun  # noqa: E402

SCRIPTS = Path(__file__).resolve().parent / "scripts"

# scenario -> (expected exit code: None = any non-zero, text the output must hold)
MPI_SCENARIOS = {
    "with_raise": (None, "ValueError: deliberate failure on rank 0"),
    "with_raise_rank1": (None, "ValueError: deliberate failure on rank 1"),
    "finally_raise": (None, "ValueError: deliberate failure on rank 0"),
    "except_shutdown": (None, "ValueError: deliberate failure on rank 0"),
    "uncaught": (None, "ValueError: deliberate failure on rank 0"),
    "exit0_one_rank": (None, "rank 0 has shut down (its program ended or called sys.exit)"),
    "exit1_one_rank": (None, "rank 0 has shut down (its program ended or called sys.exit)"),
    "train_bad_ckpt_dir": (None, "is not a directory"),
    "train_options_differ": (None, "the ranks were given different training options"),
    "train_disk_full": (None, "No space left on device (deliberate failure on rank 0)"),
    "exit0_all_ranks": (0, ""),
    "exit0_all_ranks_with": (0, ""),
    "exit3_all_ranks": (3, ""),
    "clean": (0, "sum 48.0"),
}


# in benchmarks/faults.py only (the suite keeps under 90 s): covered by tests/mpi, or by a sibling
BENCHMARK_ONLY = ("uncaught", "clean", "exit3_all_ranks")


@dataclass
class Result:
    returncode: int | None  # None: killed after the timeout (a hang)
    seconds: float          # launch to exit
    after_fault: float | None  # first FAULT-AT to exit (None: no fault marked)
    output: str


def _run(cmd: list[str], timeout: float, env: dict) -> Result:
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # mpirun and its ranks (their own session)
        out, _ = p.communicate()
        rc = None
    end = time.time()
    return Result(rc, end - t0, after_fault(out, end), out)


def run_mpi_scenario(name: str, timeout: float = 45) -> Result:
    cmd = mpirun.command(2, [sys.executable, SCRIPTS / "mpi_fault.py", name])
    return _run(cmd, timeout, _env())


def run_shutdown_race(delay: float, timeout: float = 60) -> Result:
    cmd = [sys.executable, str(SCRIPTS / "shutdown_race.py"), str(delay)]
    env = _env({"STARPU_NCPU": "2"})
    return _run(cmd, timeout, env)


RACE_DELAYS = (0.0, 0.005, 0.02, 0.1)


def check_mpi_result(name: str, res: Result) -> str | None:
    """Why the scenario's outcome is wrong, or None."""
    code, text = MPI_SCENARIOS[name]
    if res.returncode is None:
        return f"{name}: hung (killed after {res.seconds:.0f} s)"
    if (code is None and res.returncode == 0) or (code is not None and res.returncode != code):
        return f"{name}: exit code {res.returncode}, expected {'non-zero' if code is None else code}"
    if text not in res.output:
        return f"{name}: the output lacks {text!r}"
    if "unexpected received messages" in res.output:
        return f"{name}: StarPU-MPI aborted on unexpected messages"
    slow = exit_time_problem(res.after_fault) if code is None else None  # a fault: the job leaves fast
    return f"{name}: {slow}" if slow else None


__all__ = ["BENCHMARK_ONLY", "MPI_SCENARIOS", "RACE_DELAYS", "Result", "check_mpi_result", "have_mpi", "run_mpi_scenario",
           "run_shutdown_race"]
