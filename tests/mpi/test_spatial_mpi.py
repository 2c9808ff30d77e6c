"""Spatial parallelism under mpirun: a small float64 3D CNN whose input volumes are split in
space over 2 ranks (tiletrain.distribution.Spatial), or batch x space over 2 x 2 ranks, trains to the one-process losses and
parameters (1e-9), each rank holds exactly its share of every activation (from the tile
owners), and only halo slabs cross ranks.  Each launch has a timeout (mpi_launch.py)."""
import re
import time

import numpy as np
import pytest

from mpi_launch import requires_mpi, run_mpi, run_single

pytestmark = [requires_mpi, pytest.mark.mpi]


def _load(path):
    with np.load(path) as d:
        return {k: d[k] for k in d.files}


def _check(tmp_path, tag, nprocs, share):
    ref = _load(tmp_path / "single-rank0.npz")
    assert ref["losses"][-1] < ref["losses"][0]
    assert ref["halo"][0] == 0
    acts = sum(ref[f"owners_{n}"].sum() for n in ("a1", "a2", "a3", "a4"))
    for r in range(nprocs):
        got = _load(tmp_path / f"{tag}-rank{r}.npz")
        np.testing.assert_allclose(got["losses"], ref["losses"], rtol=1e-9, atol=1e-12)
        for i in range(8):
            np.testing.assert_allclose(got[f"p{i}"], ref[f"p{i}"], rtol=1e-9, atol=1e-12, err_msg=f"param {i}")
        for name in ("a1", "a2", "a3", "a4"):
            per = got[f"owners_{name}"]
            total = ref[f"owners_{name}"].sum()
            assert per.sum() == total and len(per) == nprocs
            # each rank holds its share of the volume (a tile row more or less where a size is odd)
            assert per.min() >= share * total and per.max() <= (2 * (1 / nprocs) - share) * total, (name, per)
        # halo slabs crossed ranks, a fraction of the activations' bytes per step
        per_step = got["halo"][0] / 3
        assert 0 < per_step < 0.3 * acts, (got["halo"], acts)


def test_spatial_cnn_matches_one_process(tmp_path):
    """Split along D over 2 ranks (Spatial(dims=(2,), grid=(2,)))."""
    run_single("spatial_cnn.py", tmp_path, "single")
    run_mpi("spatial_cnn.py", 2, tmp_path, "mpi", timeout=240)
    _check(tmp_path, "mpi", 2, 0.4)


def test_hybrid_data_spatial_on_4_ranks(tmp_path):
    """Batch x D over a 2 x 2 rank grid (Spatial(dims=(0, 2), grid=(2, 2))), oversubscribed."""
    run_single("spatial_cnn.py", tmp_path, "single", "0,2", "2,2")
    run_mpi("spatial_cnn.py", 4, tmp_path, "hyb", "0,2", "2,2", timeout=400)
    _check(tmp_path, "hyb", 4, 0.2)


def _losses(out: str) -> list[float]:
    """The `step N loss X` lines' losses.  Searched in the whole output, not line by line:
    mpirun interleaves the ranks' output, and another rank's unfinished line can precede one
    (seen: "... peak tiles 5.9 MiBstep 2 loss 0.244054394209")."""
    return [float(x) for x in re.findall(r"step \d+ loss (-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)", out)]


def _read(out: str) -> dict[int, int]:
    """rank -> bytes of volumes it read (the examples' last lines)."""
    return {int(r): int(b) for r, b in re.findall(r"rank (\d+)/\d+: read (\d+) bytes", out)}


@pytest.mark.parametrize("mode, nprocs", [("spatial", 2), ("data", 2), ("hybrid", 4)])
def test_cosmoflow_example_matches_one_process(tmp_path, mode, nprocs):
    """examples/cosmoflow.py --dist spatial|data|hybrid gives the one-process losses (float64,
    1e-9), and each rank reads only its share of the volumes."""
    common = ["--size", "32", "--steps", "3", "--batch", "4", "--dtype", "float64", "--seed", "3", "--width", "4",
              "--samples", "8", "--data", str(tmp_path / "data")]
    one = run_single("cosmoflow.py", *common, "--dist", "none", timeout=240)
    echo = tmp_path / "echo"
    echo.mkdir()
    res = run_mpi("cosmoflow.py", nprocs, *common, "--dist", mode, timeout=400, env={"COSMOFLOW_ECHO_DIR": str(echo)})
    want, got = _losses(one.stdout), _losses(res.stdout)
    assert len(want) == 3 and len(got) == 3, res.stdout
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    total = _read(one.stdout)[0]
    read = _read("".join(p.read_text() for p in sorted(echo.glob("rank*.txt"))))  # each rank's own lines
    assert sorted(read) == list(range(nprocs)) and sum(read.values()) == total, (read, total)
    assert all(v == total // nprocs for v in read.values()), (read, total)


_SMALL = ["--size", "32", "--steps", "2", "--batch", "4", "--dtype", "float64", "--seed", "3", "--width", "4",
          "--samples", "8"]


def test_tight_mem_limit_raises_on_every_rank(tmp_path):
    """A per-rank mem_limit the split volumes do not fit under: the ranks raise the same
    MemoryError at the same tensor (each rank counts every rank's tiles from the owners) and
    the job ends at once -- it used to hang, one rank's StarPU waiting for memory forever
    (without the check this test runs into its timeout)."""
    common = [*_SMALL, "--data", str(tmp_path / "data")]
    run_single("cosmoflow.py", *common, "--steps", "1", timeout=240)     # the dataset, made once
    t0 = time.monotonic()
    res = run_mpi("cosmoflow.py", 2, *common, "--dist", "spatial", "--mem-limit", "12M", timeout=120, check=False)
    took = time.monotonic() - t0
    assert res.returncode != 0, res.stdout
    # every rank that reaches the tensor raises the same error (both do here, as a rule); a rank
    # still blocked behind the first one's missing tasks is ended by its MPI_Abort instead
    raised = [r for r in range(2) if f"rank {r} of 2 raised MemoryError: tensor_new:" in res.stdout]
    assert raised, res.stdout
    assert "bytes per rank (mem_limit)" in res.stdout
    assert not _losses(res.stdout)
    assert took < 60, f"{took:.0f} s to fail"


def test_volume_too_big_for_one_rank_trains_on_two(tmp_path):
    """The scaled-down case of the 128^3 benchmark row: under a 40 MiB mem_limit one process
    cannot hold the step's activations (MemoryError), 2 ranks splitting every volume in space
    can, and train to the losses of an unlimited run."""
    common = [*_SMALL, "--data", str(tmp_path / "data")]
    free = run_single("cosmoflow.py", *common, timeout=240)
    capped = ["--mem-limit", "40M"]
    one = run_single("cosmoflow.py", *common, *capped, timeout=240, check=False)
    assert one.returncode != 0 and "MemoryError: tensor_new:" in one.stdout, one.stdout
    two = run_mpi("cosmoflow.py", 2, *common, *capped, "--dist", "spatial", timeout=400)
    want, got = _losses(free.stdout), _losses(two.stdout)
    assert len(want) == 2 and len(got) == 2, two.stdout
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_cosmoflow_each_rank_holds_its_share_of_every_activation(tmp_path):
    """The mini-CosmoFlow model itself (examples/cosmoflow.py) on 2 ranks split along D: the
    one-process loss (float64, 1e-9), and every activation -- the 15 conv, leaky ReLU and pool
    outputs -- held half by each rank (from the tile owners) down to the 1^3 output of the last
    pool, which one rank holds whole."""
    run_single("cosmoflow_shares.py", tmp_path, "single", timeout=240)
    run_mpi("cosmoflow_shares.py", 2, tmp_path, "mpi", timeout=400)
    ref = _load(tmp_path / "single-rank0.npz")
    for r in range(2):
        got = _load(tmp_path / f"mpi-rank{r}.npz")
        np.testing.assert_allclose(got["loss"], ref["loss"], rtol=1e-9, atol=1e-12)
        names = [k[len("share_"):] for k in got if k.startswith("share_")]
        assert len(names) == 15
        for name in names:
            per, total = got[f"share_{name}"], ref[f"share_{name}"].sum()
            assert per.sum() == total, name
            if got[f"depth_{name}"][0] >= 2:
                assert per.tolist() == [total / 2, total / 2], (name, per)
            else:
                assert sorted(per.tolist()) == [0, total], (name, per)
