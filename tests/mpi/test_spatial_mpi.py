"""Spatial parallelism under mpirun: a small float64 3D CNN whose input volumes are split in
space over 2 ranks (tiletrain.distribution.Spatial), or batch x space over 2 x 2 ranks, trains to the one-process losses and
parameters (1e-9), each rank holds exactly its share of every activation (from the tile
owners), and only halo slabs cross ranks.  Each launch has a timeout (mpi_launch.py)."""
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
    return [float(line.split()[3]) for line in out.splitlines() if line.startswith("step ")]


def _read(out: str) -> dict[int, int]:
    """rank -> bytes of volumes it read (the examples' last lines)."""
    return {int(line.split()[1].split("/")[0]): int(line.split()[3]) for line in out.splitlines()
            if line.startswith("rank ") and " read " in line}


@pytest.mark.parametrize("mode, nprocs", [("spatial", 2), ("data", 2), ("hybrid", 4)])
def test_cosmoflow_example_matches_one_process(tmp_path, mode, nprocs):
    """examples/cosmoflow.py --dist spatial|data|hybrid gives the one-process losses (float64,
    1e-9), and each rank reads only its share of the volumes."""
    common = ["--size", "32", "--steps", "3", "--batch", "4", "--dtype", "float64", "--seed", "3", "--width", "4",
              "--samples", "8", "--data", str(tmp_path / "data")]
    one = run_single("cosmoflow.py", *common, "--dist", "none", timeout=240)
    res = run_mpi("cosmoflow.py", nprocs, *common, "--dist", mode, timeout=400)
    want, got = _losses(one.stdout), _losses(res.stdout)
    assert len(want) == 3 and len(got) == 3, res.stdout
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    total = _read(one.stdout)[0]
    read = _read(res.stdout)
    assert sorted(read) == list(range(nprocs)) and sum(read.values()) == total, (read, total)
    assert all(v == total // nprocs for v in read.values()), (read, total)
