"""Distributions (tiletrain.distribution) in one process: owner maps as data, and the same
code running with every tile local."""
import numpy as np
import pytest

import tiletrain as tt
from tiletrain.distribution import BlockCyclic, Explicit, SingleRank, default, use


def test_block_cyclic_owner_maps():
    assert BlockCyclic((2, 1)).owners((3, 2), world=2).tolist() == [0, 0, 1, 1, 0, 0]
    assert BlockCyclic((1, 2)).owners((3, 2), world=2).tolist() == [0, 1, 0, 1, 0, 1]
    assert BlockCyclic((2, 2)).owners((3, 3), world=4).reshape(3, 3).tolist() == [[0, 1, 0], [2, 3, 2], [0, 1, 0]]
    # a 3-rank grid over an uneven tile count
    assert BlockCyclic((3,)).owners((4, 2), world=3).reshape(4, 2)[:, 0].tolist() == [0, 1, 2, 0]
    # fewer axes than the process grid: the leading entries; more: the extra axes not split
    assert BlockCyclic((2, 2)).owners((3,), world=4).tolist() == [0, 1, 0]
    assert BlockCyclic((2,)).owners((2, 2, 2), world=2).tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert BlockCyclic((2, 2)).owners((), world=4).tolist() == [0]
    # one process: every tile local
    assert (BlockCyclic((2, 2)).owners((3, 3), world=1) == 0).all()


def test_single_and_explicit():
    assert SingleRank(1).owners((2, 2), world=2).tolist() == [1, 1, 1, 1]
    assert Explicit([[0, 1], [1, 0]]).owners((2, 2), world=2).tolist() == [0, 1, 1, 0]
    with pytest.raises(ValueError, match="4 tiles"):
        Explicit([0, 1, 1]).owners((2, 2), world=2)
    with pytest.raises(ValueError, match="rank must be an int >= 0"):
        SingleRank(-1)
    with pytest.raises(ValueError, match="pgrid"):
        BlockCyclic((2, 0))
    with pytest.raises(ValueError, match="the job has 2"):
        BlockCyclic((2, 2)).check(2)
    with pytest.raises(ValueError, match="the job has 2"):
        SingleRank(2).check(2)
    with pytest.raises(ValueError, match="process grid has 4 ranks; the job has 3"):
        BlockCyclic((2, 2)).owners((3, 3), world=3)
    with pytest.raises(ValueError, match="non-negative"):
        Explicit([-1, 0])


def test_traits_carry_the_distribution():
    d = BlockCyclic((2, 1))
    tr = tt.TensorTraits((6, 4, 2), (2, 2, 2), d)
    assert tr.dist is d and tr.drop_axis(1).dist is d
    assert tr == tt.TensorTraits((6, 4, 2), (2, 2, 2))  # equality is geometry only
    assert "BlockCyclic((2, 1))" in repr(tr)
    with pytest.raises(TypeError, match="Distribution"):
        tt.TensorTraits((2,), None, dist=(2, 1))


def test_one_process_ignores_owners():
    assert tt.rank() == 0 and tt.world_size() == 1
    a = np.arange(20.0).reshape(5, 4)
    x = tt.from_numpy(a, (2, 2), dist=BlockCyclic((2, 2)))
    assert x.dist == BlockCyclic((2, 2))
    assert (x.owners() == 0).all() and x.owners().shape == (3, 2)
    y = tt.add(x, x)  # the output reuses x's traits, so its distribution
    assert y.dist == BlockCyclic((2, 2))
    np.testing.assert_array_equal(y.numpy(), 2 * a)
    assert default() == SingleRank(0)
    with use(BlockCyclic((4, 4))):  # larger than the job: fine in one process
        assert (tt.zeros((4, 4), tiles=2).owners() == 0).all()
    with use(BlockCyclic()):
        z = tt.zeros((4, 4), tiles=2)
        assert z.dist == BlockCyclic()
    assert default() == SingleRank(0)
    with pytest.raises(TypeError, match="Distribution"):
        with use("cyclic"):
            pass
