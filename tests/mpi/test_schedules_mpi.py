"""Pipeline schedules on the real GPT under mpirun -np 2 (ranks as stages): every schedule
(seq1f1b with 2 sequence chunks too) gives the losses of the plain loop in one process
(float64, 1e-9), with dropout too (zb-v, seq1f1b)."""
import numpy as np
import pytest

from mpi_launch import requires_mpi, run_mpi, run_single

pytestmark = [requires_mpi, pytest.mark.mpi]


@pytest.mark.parametrize("mechanism", ["priority", "deps"])
def test_every_schedule_under_mpirun_gives_the_one_process_losses(tmp_path, mechanism):
    run_single("schedules.py", tmp_path, "one", mechanism)
    run_mpi("schedules.py", 2, tmp_path, "mpi", mechanism, timeout=300)
    one = np.load(tmp_path / "one-rank0.npz")
    assert np.abs(one["reference"] - one["reference-dropout"]).max() > 1e-3   # the masks matter
    for r in range(2):
        got = np.load(tmp_path / f"mpi-rank{r}.npz")
        assert len(got.files) == 12   # 10 schedules, and zb-v and seq1f1b with dropout
        for name in got.files:
            ref = one["reference-dropout" if name.endswith("-dropout") else "reference"]
            np.testing.assert_allclose(got[name], ref, rtol=0, atol=1e-9, err_msg=f"rank {r}: {name} / {mechanism}")
