"""Two ranks of 6 CPU workers each on a 2-core machine (12 workers and two StarPU-MPI
threads sharing 2 cores): the GPT of scripts/gpt.py, tiles dealt over the ranks, trains to
the losses of one rank with its 2 workers (tiletrain's own StarPU: 256 workers per process)."""
import numpy as np
import pytest

from mpi_launch import requires_mpi, run_mpi, run_single
from tiletrain.runtime.hetero import build_option, max_cpu_workers

pytestmark = [requires_mpi, pytest.mark.mpi]


@pytest.mark.skipif(max_cpu_workers() < 6, reason=f"this StarPU build allows at most {max_cpu_workers()} CPU "
                    f"workers per process (StarPU {build_option('starpu_source')})")
def test_two_ranks_of_six_workers_give_the_two_worker_losses(tmp_path):
    run_single("gpt.py", tmp_path, "single", "cyclic", env={"STARPU_NCPU": "2"})
    res = run_mpi("gpt.py", 2, tmp_path, "mpi", "cyclic", env={"STARPU_NCPU": "6"}, timeout=120)
    assert res.stdout.count("cpu_workers 6") == 2, res.stdout
    with np.load(tmp_path / "single-rank0.npz") as ref:
        for r in range(2):
            with np.load(tmp_path / f"mpi-rank{r}.npz") as got:
                np.testing.assert_allclose(got["losses"], ref["losses"], rtol=1e-12, atol=1e-12)
                np.testing.assert_allclose(got["wte"], ref["wte"], rtol=1e-12, atol=1e-12)
