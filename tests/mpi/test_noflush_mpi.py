"""Pipelines without a flush (pb with SC+LWP, pb with EMA-reconstructed weights, local) and
1F1B on stage modules under mpirun -np 2 (stage s on rank s) give the one-process losses
(float64)."""
import numpy as np
import pytest

from mpi_launch import requires_mpi, run_mpi, run_single

pytestmark = [requires_mpi, pytest.mark.mpi]


def test_noflush_schedules_under_mpirun_give_the_one_process_losses(tmp_path):
    run_single("noflush.py", tmp_path, "one")
    run_mpi("noflush.py", 2, tmp_path, "mpi", timeout=240)
    one = np.load(tmp_path / "one-rank0.npz")
    assert sorted(one.files) == ["1f1b", "local", "pb-ema", "pb-sc-lwp"]
    for r in range(2):
        got = np.load(tmp_path / f"mpi-rank{r}.npz")
        for name in one.files:
            np.testing.assert_allclose(got[name], one[name], rtol=0, atol=1e-10, err_msg=f"rank {r}: {name}")
