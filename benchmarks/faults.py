"""Fault figures of issue 16: for each MPI fault scenario (mpirun -np 2), the exit code and the
time from the failing rank's failure to the job's exit (more than 5 s fails the scenario); and
crashes of tt.shutdown() racing with a submitting thread over N runs.

    .venv/bin/python benchmarks/faults.py [--races 50] [--skip-mpi]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reliability"))
from faults import (MPI_SCENARIOS, RACE_DELAYS, check_mpi_result, have_mpi, run_mpi_scenario,  # noqa: E402
                    run_shutdown_race)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--races", type=int, default=50, help="shutdown-race runs (default 50)")
    ap.add_argument("--skip-mpi", action="store_true", help="only the shutdown race")
    a = ap.parse_args()
    bad = 0
    if not a.skip_mpi and have_mpi():
        print(f"{'MPI scenario (mpirun -np 2)':28s} {'exit':>5s} {'fault->exit s':>14s} {'launch->exit s':>15s}  verdict")
        for name in MPI_SCENARIOS:
            res = run_mpi_scenario(name)
            problem = check_mpi_result(name, res)
            bad += problem is not None
            after = "-" if res.after_fault is None else f"{res.after_fault:.2f}"
            print(f"{name:28s} {str(res.returncode):>5s} {after:>14s} {res.seconds:15.1f}  {problem or 'ok'}",
                  flush=True)
    elif not a.skip_mpi:
        print("MPI scenarios skipped: mpirun or a StarPU-MPI build is missing")
    crashes, times = [], []
    for i in range(a.races):
        res = run_shutdown_race(RACE_DELAYS[i % len(RACE_DELAYS)])
        times.append(res.seconds)
        if res.returncode != 0:
            crashes.append((i, res.returncode, res.output.strip().splitlines()[-1:] or [""]))
    print(f"shutdown racing with a submitting thread: {len(crashes)} crashes in {a.races} runs "
          f"(median run {statistics.median(times) if times else 0:.2f} s)")
    for i, rc, last in crashes:
        print(f"  run {i}: exit {rc}: {last[0]}")
    return 1 if bad or crashes else 0


if __name__ == "__main__":
    sys.exit(main())
