"""Under mpirun -np 2: index/scatter ops, CSR products and the GCN/GAT layers on block-cyclic
tensors give the single-process results on every rank (the task lists are the same on every
rank; StarPU-MPI runs each task where its output tile lives and moves the tiles it reads);
a 16-layer residual GCN pipelined over the two ranks (ModelPipeline, 1F1B, node chunks as
micro-batches) gives the plain loop's losses and gradients in one process."""
import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mpi"))
from mpi_launch import SCRIPTS as _MPI_SCRIPTS, requires_mpi, run_mpi, run_single  # noqa: E402

pytestmark = [requires_mpi, pytest.mark.mpi]
SCRIPT = Path(__file__).resolve().parent / "scripts" / "gnn_mpi.py"
PIPE_SCRIPT = Path(__file__).resolve().parent / "scripts" / "gnnpipe_mpi.py"


def _load(path):
    with np.load(path) as d:
        return {k: d[k] for k in d.files}


def test_gnn_ops_under_mpirun_match_one_process(tmp_path):
    rel = os.path.relpath(SCRIPT, _MPI_SCRIPTS)  # the launch helpers take scripts relative to theirs
    run_single(rel, tmp_path, "single", timeout=180)
    run_mpi(rel, 2, tmp_path, "mpi", timeout=180)
    ref = _load(tmp_path / "single-rank0.npz")
    for r in range(2):
        got = _load(tmp_path / f"mpi-rank{r}.npz")
        assert set(got) == set(ref)
        for k, v in ref.items():
            np.testing.assert_allclose(got[k], v, rtol=1e-9, atol=1e-9, err_msg=f"rank {r}: {k}")


def test_pipelined_deep_gcn_under_mpirun_equals_one_process(tmp_path):
    rel = os.path.relpath(PIPE_SCRIPT, _MPI_SCRIPTS)
    run_single(rel, tmp_path, "single", timeout=240)
    run_mpi(rel, 2, tmp_path, "mpi", timeout=240)
    ref = _load(tmp_path / "single-rank0.npz")
    assert len([k for k in ref if k.startswith("grad 0 ")]) == 2 + 2 * 16 + 2
    for r in range(2):
        got = _load(tmp_path / f"mpi-rank{r}.npz")
        assert set(got) == set(ref)
        for k, v in ref.items():
            np.testing.assert_allclose(got[k], v, rtol=1e-9, atol=1e-9, err_msg=f"rank {r}: {k}")
