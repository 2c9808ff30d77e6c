"""`tiletrain train --dist pipeline|data` under mpirun gives the single-process losses;
distributions that do not fit are rejected on every rank; checkpoints written under MPI
resume in one process and vice versa.  Each launch has a timeout (mpi_launch.py)."""
import numpy as np
import pytest

from fault_timing import assert_quick_exit
from mpi_launch import requires_mpi, run_mpi, run_single

from tiletrain.parallel import check_fit
from tiletrain.utils.runlog import is_run_file, read_metrics

pytestmark = [requires_mpi, pytest.mark.mpi]

TEXT = "def add(a, b):\n    return a + b\n\nclass Tile:\n    pass\n" * 400


@pytest.fixture
def corpus(tmp_path):
    f = tmp_path / "corpus.txt"
    f.write_text(TEXT)
    return f"data={f}"


def _load(path):
    with np.load(path) as d:
        return {k: d[k] for k in d.files}


def _mpi_matches(tmp_path, corpus, nprocs, tag, ref, *args, rtol=1e-9, timeout=90):
    """train.py under mpirun: every rank's losses equal the single-process ``ref`` and every
    rank executed tasks; returns rank 0's record."""
    run_mpi("train.py", nprocs, tmp_path, tag, corpus, *args, timeout=timeout)
    for r in range(nprocs):
        got = _load(tmp_path / f"{tag}-rank{r}.npz")
        np.testing.assert_allclose(got["losses"], ref, rtol=rtol, atol=0, err_msg=f"{tag} rank {r}")
        assert got["executed"] > 0, (tag, r)  # every rank computes its part
    return _load(tmp_path / f"{tag}-rank0.npz")


@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-9), ("float32", 1e-5)])
def test_pipeline_and_data_match_one_process(tmp_path, corpus, dtype, rtol):
    run_single("train.py", tmp_path, "single", corpus, f"dtype={dtype}")
    ref = _load(tmp_path / "single-rank0.npz")["losses"]
    assert len(ref) == 4 and np.isfinite(ref).all()
    for dist in ("pipeline", "data"):
        o = _mpi_matches(tmp_path, corpus, 2, dist, ref, f"dtype={dtype}", f"dist={dist}", rtol=rtol)
        if dist == "pipeline":  # 2 blocks on 2 stages: embeddings + block 0 on 0, block 1 + ln_f on 1
            assert (o["owner_wte"], o["owner_h0"], o["owner_hlast"], o["owner_ln_f"]) == (0, 0, 1, 1)
        else:  # parameters spread whole over the ranks
            assert {int(o[k]) for k in ("owner_wte", "owner_h0", "owner_hlast", "owner_ln_f")} == {0, 1}


def test_three_ranks_uneven_pipeline(tmp_path, corpus):
    """3 ranks (oversubscribed on 2 cores): 4 layers on 3 stages (2 + 1 + 1 blocks)."""
    run_single("train.py", tmp_path, "single", corpus, "dtype=float64", "n_layer=4", "steps=2")
    ref = _load(tmp_path / "single-rank0.npz")["losses"]
    o = _mpi_matches(tmp_path, corpus, 3, "pipe3", ref, "dtype=float64", "n_layer=4", "steps=2", "dist=pipeline",
                     timeout=120)
    assert (o["owner_wte"], o["owner_h0"], o["owner_hlast"], o["owner_ln_f"]) == (0, 0, 2, 2)


def test_pipeline_plus_data_on_four_ranks(tmp_path, corpus):
    """4 ranks (oversubscribed on 2 cores) as 2 stages x 2 replicas: the single-process
    losses, every rank computing, each stage's parameters on that stage's two ranks."""
    run_single("train.py", tmp_path, "single", corpus, "dtype=float64", "steps=2")
    ref = _load(tmp_path / "single-rank0.npz")["losses"]
    o = _mpi_matches(tmp_path, corpus, 4, "pd", ref, "dtype=float64", "steps=2", "dist=pipeline+data", "stages=2",
                     timeout=150)
    # rank = replica * 2 + stage: stage 0 on ranks 0 and 2, stage 1 on ranks 1 and 3
    assert int(o["owner_wte"]) in (0, 2) and int(o["owner_h0"]) in (0, 2)
    assert int(o["owner_hlast"]) in (1, 3) and int(o["owner_ln_f"]) in (1, 3)


@pytest.mark.parametrize("args, message", [
    (("dist=pipeline+data",), "--dist pipeline+data: 3 ranks cannot form 2 stages x at least 2 replicas"),
    (("dist=pipeline+data", "stages=3"), "--dist pipeline+data: 3 ranks cannot form 3 stages x at least 2 replicas"),
    (("dist=pipeline",), "--dist pipeline: 3 stages (one per rank) but the model has only 2 layers"),
    (("dist=data",), "--dist data: the batch of 4 sequences cannot be split evenly over 3 ranks"),
])
def test_a_distribution_that_does_not_fit_is_rejected_before_any_task(tmp_path, corpus, args, message):
    """The first case under mpirun -np 3 (every rank refuses before the runtime starts); the
    others through ``parallel.check_fit`` with the same world, the check train() makes on every
    rank (it depends only on its arguments)."""
    if args != ("dist=pipeline+data",):
        kw = dict(a.split("=", 1) for a in args)
        with pytest.raises(ValueError) as exc:
            check_fit(kw["dist"], n_layer=2, batch=4, world=3, stages=int(kw["stages"]) if "stages" in kw else None)
        assert message in str(exc.value)
        return
    res = run_mpi("train.py", 3, tmp_path, "bad", corpus, *args, timeout=60, check=False)
    assert_quick_exit(res.stdout)
    assert res.returncode != 0
    assert message in res.stdout, res.stdout
    assert "model:" not in res.stdout  # rejected before the runtime started (nothing submitted)


def test_mpi_checkpoint_resumes_in_one_process_and_back(tmp_path, corpus):
    # uninterrupted single-process reference: 4 steps
    run_single("train.py", tmp_path, "full", corpus, "dtype=float64", "steps=4")
    full = _load(tmp_path / "full-rank0.npz")["losses"]
    # 2 steps under mpirun (data mode), checkpoint, then steps 3-4 in one process
    a = tmp_path / "a"
    run_mpi("train.py", 2, tmp_path, "a1", corpus, "dtype=float64", "dist=data", f"ckpt_dir={a}", "stop_after=2",
            timeout=90)
    saves = [int(_load(tmp_path / f"a1-rank{r}.npz")["saves"]) for r in range(2)]
    assert saves[0] >= 1 and saves[1] == saves[0], saves  # collective: the ranks send, rank 0 writes
    # atomic: no temporaries left; beside the checkpoint only rank 0's run files (metrics.jsonl, ...)
    assert sorted(p.name for p in a.iterdir() if not is_run_file(p.name)) == ["checkpoint.safetensors"]
    assert [m["step"] for m in read_metrics(a)] == [1, 2]  # one line per step, written once (rank 0)
    run_single("train.py", tmp_path, "a2", corpus, "dtype=float64", f"ckpt_dir={a}", "resume=1")
    first = _load(tmp_path / "a1-rank0.npz")["losses"]
    second = _load(tmp_path / "a2-rank0.npz")["losses"]
    np.testing.assert_allclose(np.concatenate([first, second]), full, rtol=1e-9, atol=0)
    # and back: 2 steps in one process, steps 3-4 under mpirun (pipeline mode)
    b = tmp_path / "b"
    run_single("train.py", tmp_path, "b1", corpus, "dtype=float64", f"ckpt_dir={b}", "stop_after=2")
    run_mpi("train.py", 2, tmp_path, "b2", corpus, "dtype=float64", "dist=pipeline", f"ckpt_dir={b}", "resume=1",
            timeout=90)
    for r in range(2):
        got = np.concatenate([_load(tmp_path / "b1-rank0.npz")["losses"], _load(tmp_path / f"b2-rank{r}.npz")["losses"]])
        np.testing.assert_allclose(got, full, rtol=1e-9, atol=0)


@pytest.mark.parametrize("mode, nprocs", [("data", 2), ("pipeline+data", 4)])
def test_the_mpirun_example_trains(tmp_path, corpus, mode, nprocs):
    """examples/mpirun_gpt.sh as a user runs it (tiny model, a few steps)."""
    import os
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
    env.update(NP=str(nprocs), PY=os.environ.get("PYTHON", __import__("sys").executable))
    ckpt = tmp_path / "ckpt"
    cmd = ["bash", str(root / "examples" / "mpirun_gpt.sh"), mode, "--steps", "2", "--n-layer", "2", "--n-embd", "32",
           "--n-head", "2", "--seq-len", "16", "--batch", "4", "--eval-every", "0", "--sample-tokens", "0",
           "--data", corpus.split("=", 1)[1], "--ckpt-dir", str(ckpt)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (ckpt / "checkpoint.safetensors").is_file()
    assert "done at step 2" in res.stdout, res.stdout
