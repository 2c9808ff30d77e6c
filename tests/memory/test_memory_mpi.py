"""MPI data mode under a memory limit with a disk node equals one process without one."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mpi"))
from mpi_launch import requires_mpi, run_mpi, run_single  # noqa: E402

pytestmark = [requires_mpi, pytest.mark.mpi]

TEXT = "def add(a, b):\n    return a + b\n\nclass Tile:\n    pass\n" * 400


def _losses(path):
    with np.load(path) as d:
        return d["losses"]


def test_data_mode_with_a_memory_limit_and_disk_node_equals_one_process(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    ooc = tmp_path / "ooc"
    ooc.mkdir()
    common = (f"data={corpus}", "dtype=float64")
    run_single("train.py", tmp_path, "single", *common)
    ref = _losses(tmp_path / "single-rank0.npz")
    assert len(ref) == 4 and np.isfinite(ref).all()
    budget = ("mem_limit=64M", f"ooc_dir={ooc}")
    run_single("train.py", tmp_path, "single-limit", *common, *budget)
    np.testing.assert_array_equal(_losses(tmp_path / "single-limit-rank0.npz"), ref)
    run_mpi("train.py", 2, tmp_path, "data-limit", *common, "dist=data", *budget, timeout=90)
    for r in range(2):
        np.testing.assert_allclose(_losses(tmp_path / f"data-limit-rank{r}.npz"), ref, rtol=1e-9, atol=0)
