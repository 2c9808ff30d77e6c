"""Data mode under mpirun -np 2: each rank submits its own replica's shard only
(``parallel.shard_backward``): the same results as every rank walking every replica, and a
clear error, not a hang, for a shard that needs something no rank sends ahead (the job ends
at most fault_timing.MAX_EXIT_S after the fault)."""
import numpy as np
import pytest

from fault_timing import assert_quick_exit
from mpi_launch import requires_mpi, run_mpi

pytestmark = [requires_mpi, pytest.mark.mpi]


def test_own_replica_walk_matches_walking_every_replica(tmp_path):
    run_mpi("own_replica.py", 2, tmp_path, "own", "own", timeout=120)
    run_mpi("own_replica.py", 2, tmp_path, "all", "all", timeout=120)
    own = [np.load(tmp_path / f"own-rank{r}.npz") for r in range(2)]
    every = [np.load(tmp_path / f"all-rank{r}.npz") for r in range(2)]
    ref = every[0]
    assert ref["losses"].shape == (3, 4) and np.isfinite(ref["losses"]).all()
    assert len(set(ref["losses"][0].round(12))) == 4   # four shards, four losses (dropout differs too)
    for got in own + every[1:]:
        for name in ref.files:
            if name != "next_tag":
                np.testing.assert_allclose(got[name], ref[name], rtol=0, atol=1e-12, err_msg=name)
    # the replicas' tensors took tags of their own stream: the process-wide counter advanced
    # alike on both ranks, and less than when every rank made every replica's tensors
    assert own[0]["next_tag"] == own[1]["next_tag"] < every[0]["next_tag"] == every[1]["next_tag"]


@pytest.mark.parametrize("mode, message", [
    ("stray", "a task reads a tile of rank 0 that was not sent ahead"),
    ("read", "a collective read while one replica's shard is submitted on its rank only"),
])
def test_a_shard_that_needs_another_ranks_part_fails_clearly(tmp_path, mode, message):
    res = run_mpi("own_replica.py", 2, tmp_path, mode, mode, timeout=60, check=False)
    assert_quick_exit(res.stdout)
    assert res.returncode != 0
    assert message in res.stdout, res.stdout[-3000:]
