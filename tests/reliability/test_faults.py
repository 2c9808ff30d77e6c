"""Fault scenarios end cleanly (issue 16): under `mpirun -np 2` any error on any rank ends the
whole job non-zero with that error printed (never a hang: each launch has a timeout), ranks
that exit together exit cleanly, and tt.shutdown() racing with a submitting thread never
crashes.  benchmarks/faults.py runs the same scenarios and prints the timings."""
import pytest

from faults import (BENCHMARK_ONLY, MPI_SCENARIOS, RACE_DELAYS, Result, check_mpi_result, run_mpi_scenario,
                    run_shutdown_race)
from fault_timing import assert_quick_exit  # tests/mpi: on the path once faults is imported
from mpi_launch import requires_mpi


@requires_mpi
@pytest.mark.mpi
@pytest.mark.parametrize("name", sorted(set(MPI_SCENARIOS) - set(BENCHMARK_ONLY)))
def test_mpi_fault_ends_the_job(name):
    res = run_mpi_scenario(name)
    problem = check_mpi_result(name, res)
    assert problem is None, f"{problem}\n{res.output}"
    code, text = MPI_SCENARIOS[name]
    if code is None:  # an error (its exit time is checked above): the failing rank's message comes first
        for later in ("MPI_ABORT was invoked", "every rank stops"):
            if later in res.output:
                assert res.output.find(text) < res.output.find(later), res.output


def test_failure_check_catches_a_hang_a_wrong_exit_code_and_a_slow_exit():
    # the checks above can fail: a killed job, a silent exit 0, a slow or unmarked exit are reported
    text = "ValueError: deliberate failure on rank 0"
    assert "hung" in check_mpi_result("with_raise", Result(None, 45.0, None, ""))
    assert "exit code 0" in check_mpi_result("with_raise", Result(0, 3.0, 1.0, text))
    assert "lacks" in check_mpi_result("exit0_one_rank", Result(1, 3.0, 1.0, "something else"))
    assert "5.1 s from the fault to the job's exit" in check_mpi_result("with_raise", Result(1, 8.0, 5.1, text))
    assert "no FAULT-AT mark" in check_mpi_result("with_raise", Result(1, 3.0, None, text))
    assert check_mpi_result("with_raise", Result(1, 3.0, 0.4, text)) is None
    assert check_mpi_result("exit0_all_ranks", Result(0, 3.0, None, "")) is None  # no fault: no exit time
    with pytest.raises(AssertionError, match="6.0 s from the fault"):  # the tests/mpi failure tests' check
        assert_quick_exit("FAULT-AT 100.000\n", exited=106.0)


@pytest.mark.parametrize("run", range(10))
def test_shutdown_racing_with_a_submitting_thread(run):
    res = run_shutdown_race(RACE_DELAYS[run % len(RACE_DELAYS)])
    assert res.returncode == 0, f"exit {res.returncode}\n{res.output}"
    assert "thread stopped with:" in res.output, res.output
    assert "shut down" in res.output or "not initialised" in res.output, res.output
