"""Several models placed differently in one script under mpirun -np 2: each steps under its
own plan with ``tiletrain.parallel.using`` (place() makes the last plan current)."""
import numpy as np
import pytest

from mpi_launch import requires_mpi, run_mpi, run_single

pytestmark = [requires_mpi, pytest.mark.mpi]


def test_each_model_runs_under_its_own_plan(tmp_path):
    run_single("two_plans.py", tmp_path, "one")
    run_mpi("two_plans.py", 2, tmp_path, "mpi", timeout=120)
    one = np.load(tmp_path / "one-rank0.npz")
    ranks = [np.load(tmp_path / f"mpi-rank{r}.npz") for r in range(2)]
    for got in ranks:
        np.testing.assert_allclose(got["a"], one["a"], rtol=0, atol=1e-9)
        np.testing.assert_allclose(got["b"], one["b"], rtol=0, atol=1e-9)
    # A is in data mode: each rank runs its own shard's attention forwards, half of one
    # process' -- not all of them on rank 0, as under the pipeline plan placed after A (what
    # the step gave without using(): 24 on rank 0, 0 on rank 1)
    n = [int(got["attn_fwd"]) for got in ranks]
    assert n[0] == n[1] > 0 and 2 * n[0] == int(one["attn_fwd"]), n
    # and its backward's row statistics, a temporary made in C, where its shard's attention
    # runs (they were all computed on rank 0: C temporaries took tt_tensor_new's rank 0)
    rows = [int(got["attn_bwd_rows"]) for got in ranks]
    assert rows[0] == rows[1] > 0 and 2 * rows[0] == int(one["attn_bwd_rows"]), rows
