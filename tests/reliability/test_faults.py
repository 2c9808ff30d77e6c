"""Fault scenarios end cleanly (issue 16): under `mpirun -np 2` any error on any rank ends the
whole job non-zero with that error printed (never a hang: each launch has a timeout), ranks
that exit together exit cleanly, and tt.shutdown() racing with a submitting thread never
crashes.  benchmarks/faults.py runs the same scenarios and prints the timings."""
import pytest

from faults import BENCHMARK_ONLY, MPI_SCENARIOS, RACE_DELAYS, check_mpi_result, have_mpi, run_mpi_scenario, run_shutdown_race

requires_mpi = pytest.mark.skipif(not have_mpi(), reason="mpirun or a StarPU-MPI build of tiletrain is missing")


@requires_mpi
@pytest.mark.mpi
@pytest.mark.parametrize("name", sorted(set(MPI_SCENARIOS) - set(BENCHMARK_ONLY)))
def test_mpi_fault_ends_the_job(name):
    res = run_mpi_scenario(name)
    problem = check_mpi_result(name, res)
    assert problem is None, f"{problem}\n{res.output}"
    code, text = MPI_SCENARIOS[name]
    if code is None:  # an error: the failing rank's message comes before the job is torn down
        assert res.after_fault is not None, res.output
        for later in ("MPI_ABORT was invoked", "every rank stops"):
            if later in res.output:
                assert res.output.find(text) < res.output.find(later), res.output

def test_failure_check_catches_a_hang_and_a_wrong_exit_code():
    # the checks above can fail: a killed job and a silent exit 0 are both reported
    from faults import Result
    assert "hung" in check_mpi_result("with_raise", Result(None, 45.0, None, ""))
    assert "exit code 0" in check_mpi_result("with_raise", Result(0, 3.0, 1.0, "ValueError: deliberate failure on rank 0"))
    assert "lacks" in check_mpi_result("exit0_one_rank", Result(1, 3.0, 1.0, "something else"))


@pytest.mark.parametrize("run", range(10))
def test_shutdown_racing_with_a_submitting_thread(run):
    res = run_shutdown_race(RACE_DELAYS[run % len(RACE_DELAYS)])
    assert res.returncode == 0, f"exit {res.returncode}\n{res.output}"
    assert "thread stopped with:" in res.output, res.output
    assert "shut down" in res.output or "not initialised" in res.output, res.output
