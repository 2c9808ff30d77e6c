"""tiletrain.data.volume: the Gaussian-random-field generator (seeded, its spectrum follows
the targets), VolumeDataset batches (values, tiling, bytes read) and the Spatial layout
checks."""
import numpy as np
import pytest

from tiletrain.data.volume import COSMO_PARAMS, VolumeDataset, gaussian_random_fields, write_volumes
from tiletrain.distribution import Spatial


def test_fields_are_seeded_and_follow_their_slope():
    x, y = gaussian_random_fields(4, 16, seed=5, dtype=np.float64)
    x2, y2 = gaussian_random_fields(4, 16, seed=5, dtype=np.float64)
    assert x.shape == (4, 1, 16, 16, 16) and y.shape == (4, 4)
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(y, y2)
    assert np.abs(y).max() <= 1.0
    assert not np.allclose(x, gaussian_random_fields(4, 16, seed=6, dtype=np.float64)[0])
    # a steeper spectrum puts more power at low frequencies: smoother fields
    xs, ys = gaussian_random_fields(24, 16, seed=1, dtype=np.float64)
    rough = np.array([np.mean(np.diff(v[0], axis=0) ** 2) / np.var(v[0]) for v in xs])
    slope = ys[:, list(COSMO_PARAMS).index("slope")]
    assert np.corrcoef(slope, rough)[0, 1] < -0.3


def test_batch_values_tiles_and_bytes_read(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((5, 2, 6, 4, 5)), rng.standard_normal((5, 3))
    ds = VolumeDataset(write_volumes(tmp_path / "v", x, y))
    assert len(ds) == 5 and ds.shape == (2, 6, 4, 5)
    sp = Spatial(dims=(2,), grid=(2,))
    xb, yb = ds.batch([3, 1], sp)
    assert xb.tiles == (2, 2, 3, 4, 5) and yb.tiles == (2, 3)
    np.testing.assert_array_equal(xb.numpy(), x[[3, 1]])
    np.testing.assert_array_equal(yb.numpy(), y[[3, 1]])
    assert ds.bytes_read == x[[3, 1]].nbytes          # one process owns every tile
    xb, _ = ds.batch([0], tiles=(1, 2, 4, 4, 5))
    np.testing.assert_array_equal(xb.numpy(), x[[0]])


def test_bad_layouts_rejected(tmp_path):
    sp = Spatial(dims=(2,), grid=(2,))
    with pytest.raises(ValueError, match="does not divide its size 5"):
        sp.tiles((1, 1, 5, 4, 4))
    with pytest.raises(ValueError, match="does not divide its 3 tiles"):
        sp.check_layout((1, 1, 6, 4, 4), (1, 1, 2, 4, 4))
    with pytest.raises(ValueError, match="channel axis"):
        Spatial(dims=(1,), grid=(2,))
    with pytest.raises(ValueError, match="the job has 2"):
        Spatial(dims=(0, 2), grid=(2, 2)).owners((2, 1, 2), world=2)
    # owners: blocks along the split axes, row-major over the grid
    assert Spatial(dims=(0, 2), grid=(2, 2)).owners((2, 1, 4), world=4).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert Spatial(dims=(2,), grid=(2,)).owners((1, 1, 1), world=2).tolist() == [0]   # collapsed: rank 0
    ds = VolumeDataset(write_volumes(tmp_path / "v", np.zeros((2, 1, 5, 4, 4)), np.zeros((2, 1))))
    with pytest.raises(ValueError, match="does not divide"):
        ds.batch([0, 1], sp)
    with pytest.raises(IndexError):
        ds.batch([2])
