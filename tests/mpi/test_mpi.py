"""Under mpirun: the same scripts give the single-process results, and a failing rank ends
the whole job quickly (at most fault_timing.MAX_EXIT_S from the fault to the job's exit).
Each launch has a timeout (tests/mpi/mpi_launch.py)."""
import numpy as np
import pytest

from fault_timing import assert_quick_exit
from mpi_launch import requires_mpi, run_mpi, run_single

pytestmark = [requires_mpi, pytest.mark.mpi]


def _load(path):
    with np.load(path) as d:
        return {k: d[k] for k in d.files}


def _compare(ref: dict, got: dict, rtol: float, skip=("executed",)):
    for key, want in ref.items():
        if key in skip or key.startswith("owners"):
            continue
        np.testing.assert_allclose(got[key], want, rtol=rtol, atol=rtol, err_msg=key)


@pytest.mark.parametrize("nprocs", [2, 3])
def test_ops_on_block_cyclic_tensors_match_one_process(tmp_path, nprocs):
    run_single("ops.py", tmp_path, "single")
    run_mpi("ops.py", nprocs, tmp_path, "mpi")
    ref = _load(tmp_path / "single-rank0.npz")
    # the single-process run against NumPy: the reference itself is right
    rng = np.random.default_rng(42)
    a, b, m = rng.standard_normal((7, 5)), rng.standard_normal((7, 5)), rng.standard_normal((5, 6))
    np.testing.assert_allclose(ref["matmul"], a @ m, rtol=1e-12)
    np.testing.assert_allclose(ref["add"], a + 2 * b, rtol=1e-12)
    np.testing.assert_allclose(ref["sum1"], b.sum(axis=1), rtol=1e-12)
    assert (ref["owners_A"] == 0).all()
    executed = []
    for r in range(nprocs):
        got = _load(tmp_path / f"mpi-rank{r}.npz")
        _compare(ref, got, 1e-12)  # every rank sees the full values
        # the tiles really are spread: A's tile rows cycle over the ranks
        assert got["owners_A"][:, 0].tolist() == [i % nprocs for i in range(3)]
        assert got["owners_B"][0].tolist() == [j % nprocs for j in range(3)]
        executed.append(int(got["executed"]))
    assert all(n > 0 for n in executed), executed  # every rank ran some of the tasks
    assert sum(executed) <= int(ref["executed"]) + 2 * nprocs, (executed, int(ref["executed"]))


def test_mlp_adamw_steps_match_one_process(tmp_path):
    run_single("mlp.py", tmp_path, "single")
    run_mpi("mlp.py", 2, tmp_path, "mpi")
    ref = _load(tmp_path / "single-rank0.npz")
    assert ref["losses"][2] < ref["losses"][0]
    for r in range(2):
        got = _load(tmp_path / f"mpi-rank{r}.npz")
        assert got["owners_w1"].ravel().tolist() == [0, 0, 1, 1]
        _compare(ref, got, 1e-12)


@pytest.mark.parametrize("mode", ["raise", "kill"])
def test_a_failing_rank_ends_the_job_quickly(mode):
    res = run_mpi("fail.py", 2, mode, timeout=60, check=False)
    assert_quick_exit(res.stdout)  # from the failing rank's FAULT-AT mark to the job's exit
    assert res.returncode != 0, res.stdout
    if mode == "raise":
        assert "rank 1 of 2 raised ValueError: deliberate failure on rank 1" in res.stdout, res.stdout
    else:
        assert "rank 1" in res.stdout, res.stdout


@pytest.mark.parametrize("driver", ["1", "0"])
def test_task_records_under_mpirun(tmp_path, driver):
    """profile=True under mpirun: each rank records the tasks it ran, with its rank (with
    StarPU-MPI's thread running worker 0's tasks, and without)."""
    run_mpi("trace.py", 2, tmp_path, "tr", env={"TILETRAIN_MPI_DRIVER": driver})
    counts = []
    for r in range(2):
        got = _load(tmp_path / f"tr-rank{r}.npz")
        assert got["err"] < 1e-12
        assert len(got["ranks"]) > 0 and (got["ranks"] == r).all()
        assert (got["worker_ranks"] == r).all()
        assert "gemm" in set(got["kernels"].tolist())
        counts.append(len(got["ranks"]))
    # C has 4 x 2 tiles, each a chain of 3 gemm tasks: recorded once, by the rank running it
    assert sum(counts) == 24, counts


def test_other_ranks_tiles_are_registered_only_when_needed(tmp_path):
    run_mpi("lazy.py", 2, tmp_path, "lz")
    r0, r1 = (_load(tmp_path / f"lz-rank{r}.npz") for r in range(2))
    assert r0["err"] == 0 and r1["err"] == 0
    assert r0["before"].tolist() == [0, 0]           # rank 0 owns everything: nothing lazy
    created, registered = r1["before"].tolist()
    assert created == 12 and registered == 0, (created, registered)  # x, x*x and y: 3 x 4 tiles, untouched
    assert r1["after"].tolist() == [12, 4]           # the read needed y's 4 tiles


def test_mpi_true_without_mpirun_runs_as_one_rank():
    res = run_single("singleton.py")
    assert res.stdout.strip().endswith("ok"), res.stdout


def test_gpt_trained_with_tiles_dealt_over_ranks_matches_one_process(tmp_path):
    """The whole GPT (embeddings with tied weights, attention, LayerNorm, cross-entropy,
    AdamW) built and trained under BlockCyclic(): the losses of one process, in float64."""
    run_single("gpt.py", tmp_path, "single", "cyclic")
    run_mpi("gpt.py", 2, tmp_path, "mpi", "cyclic")
    ref = _load(tmp_path / "single-rank0.npz")
    assert ref["losses"][2] < ref["losses"][0]
    for r in range(2):
        got = _load(tmp_path / f"mpi-rank{r}.npz")
        assert got["owners"][:, 0].tolist() == [0, 1]  # wte's two row tiles on two ranks
        _compare(ref, got, 1e-12)


def test_launch_helpers_drop_the_parents_launcher_variables():
    """tiletrain.utils.mpirun: children of a process run under mpirun must not inherit its
    OMPI_/PMIX_/PMI_ variables (they would join the parent's job); the rank settings are added
    only for ranks; bad rank counts are refused."""
    from tiletrain.utils import mpirun
    env = mpirun.environment({"OMPI_COMM_WORLD_RANK": "1", "PMIX_RANK": "1", "PMI_FD": "3", "HOME": "/h"},
                             STARPU_NCPU="2")
    assert env == {"HOME": "/h", **mpirun.RANK_ENV, "STARPU_NCPU": "2"}
    assert mpirun.environment({"PMI_FD": "3", "A": "b"}, ranks=False) == {"A": "b"}
    with pytest.raises(ValueError, match="nprocs must be a positive int"):
        mpirun.command(0, ["x"])
