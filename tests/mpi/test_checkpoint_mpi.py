"""Checkpoint saves under mpirun are collective (rank 0 writes what the other ranks send):
a write that fails on rank 0 fails on every rank (at most fault_timing.MAX_EXIT_S after the
fault), and the ranks stay in step."""
import json

from fault_timing import after_fault, exit_time_problem
from mpi_launch import requires_mpi, run_mpi

import pytest

pytestmark = [requires_mpi, pytest.mark.mpi]


def test_a_save_that_fails_on_rank_0_fails_on_every_rank_and_the_next_one_works(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    path = ckpt / "model.safetensors"
    out = run_mpi("save_fail.py", 2, tmp_path, "fail", path, timeout=120).stdout
    res = [json.loads((tmp_path / f"fail-rank{r}.json").read_text()) for r in range(2)]
    problem = exit_time_problem(after_fault(out, max(got["error_at"] for got in res)), "every rank's error")
    assert problem is None, f"{problem}\n{out}"
    assert "No space left on device" in res[0]["error"], res
    assert "rank 0 could not write it" in res[1]["error"], res
    for got in res:  # the second save: every tile reached rank 0 (nothing left over from the first)
        assert got["step"] == 2 and got["equal"] and got["hf_equal"], res
    assert sorted(p.name for p in ckpt.iterdir()) == ["model.safetensors"]  # no temporaries left
    assert sorted(p.name for p in (tmp_path / "fail-hf").iterdir()) == ["config.json", "model.safetensors"]
