"""MPI data mode under a memory limit with a disk node equals one process without one; a
checkpoint save and load under mpirun stream (no rank holds a copy of the model)."""
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mpi"))
from mpi_launch import requires_mpi, run_mpi, run_single  # noqa: E402

import tiletrain.checkpoint as ck  # noqa: E402
from tiletrain.tensors.tensor import ROW_BLOCK_BYTES  # noqa: E402
from tiletrain.utils.runlog import is_run_file, read_metrics  # noqa: E402

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
    # checkpointed at step 2 and resumed, under mpirun with the same cap and disk node: the same
    # losses (the save streams every rank's tiles to rank 0, the load reads each rank's own)
    ckpt = tmp_path / "ckpt"
    mpi = (*common, "dist=data", *budget, f"ckpt_dir={ckpt}")
    run_mpi("train.py", 2, tmp_path, "half", *mpi, "stop_after=2", timeout=90)
    run_mpi("train.py", 2, tmp_path, "rest", *mpi, "resume=1", timeout=90)
    assert sorted(p.name for p in ckpt.iterdir() if not is_run_file(p.name)) == ["checkpoint.safetensors"]
    assert [m["step"] for m in read_metrics(ckpt)] == [1, 2, 3, 4]  # the resumed run continued the log
    for r in range(2):
        got = np.concatenate([_losses(tmp_path / f"{tag}-rank{r}.npz") for tag in ("half", "rest")])
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=0)


@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK), reason="needs /proc/self/clear_refs")
def test_checkpoint_save_and_load_stream_under_mpirun_with_a_memory_limit(tmp_path):
    """scripts/stream_checkpoint.py: a GPT of 84 MB (float32) spread over 2 ranks (each rank's
    share alone is over the 16 MiB cap), placed, saved and loaded with a disk node: each
    rank's peak RSS grows by about one block of tile rows (rank 0: the block and its received
    tiles; rank 1 only sends, one block at a time), never by the model; the file equals the
    one-process save byte for byte, and so does the loaded model saved again.  (Placing the
    model hung 6 runs of 8 at this cap before the tasks ahead were bounded under MPI.)"""
    cap = 16 << 20
    ooc = tmp_path / "ooc"
    ooc.mkdir()
    path = tmp_path / "mpi.safetensors"
    run_mpi("stream_checkpoint.py", 2, tmp_path, "s", "16M", ooc, path, timeout=300)
    res = [json.loads((tmp_path / f"s-rank{r}.json").read_text()) for r in range(2)]
    size = res[0]["model_bytes"]
    assert size > 2.5 * cap
    for r, got in enumerate(res):
        assert got["owned_bytes"] > cap, (r, got)  # this rank's parameters alone do not fit
        assert got["used"] <= cap, (r, got)
        assert got["save"] < min(size / 3, 3 * ROW_BLOCK_BYTES), (r, got)
        assert got["load"] < min(size / 3, 3 * ROW_BLOCK_BYTES), (r, got)
    assert res[1]["save"] < ROW_BLOCK_BYTES, res  # a sender holds no block
    again = Path(f"{path}.again")  # the loaded model, saved again: what was loaded is what was saved
    assert again.read_bytes() == path.read_bytes()
    # the same model saved by one process (this one, no cap) is the same file
    from tiletrain.nn import GPT, GPTConfig
    from tiletrain.nn.gpt import Tiling
    from tiletrain.nn.pretrained import model_tensors
    model = GPT(GPTConfig(vocab_size=16384, block_size=64, n_layer=4, n_head=4, n_embd=512),
                tiling=Tiling(width=256, hidden=512, vocab=256), seed=0)
    one = ck.save(tmp_path / "one.safetensors", model_tensors(model), {"step": 1})
    assert path.stat().st_size == one.stat().st_size
    assert path.read_bytes() == one.read_bytes()
