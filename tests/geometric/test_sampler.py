"""GraphSAINT samplers (tiletrain/geometric/sampler.py): the sampler task's subgraphs equal the
NumPy reference's draws (same seed, same step) for the node, edge and random-walk kinds, are
the induced subgraphs of their nodes, are reproducible for a seed; samples are submitted
ahead (in flight); the loss normalisation from pre-sampling makes an unbiased estimate of the
mean over all nodes (checked against the exact mean on a small graph)."""
import numpy as np
import pytest

import tiletrain as tt
from tiletrain._ffi import lib
from tiletrain.geometric import Data, GraphSAINTSampler, sbm
from tiletrain.testing.references_sampler import saint_sample_ref


def _graph():
    return sbm(60, 3, 0.2, 0.02, 4, seed=5)


@pytest.mark.parametrize("kind", ["node", "edge", "random_walk"])
def test_samples_match_the_reference_and_are_induced(kind):
    d = _graph()
    s = GraphSAINTSampler(d, batch_size=7, kind=kind, walk_length=3, num_steps=3, seed=11)
    ei = d.edge_index
    perm = np.lexsort((ei[1], ei[0]))
    rowptr = np.concatenate([[0], np.cumsum(np.bincount(ei[0], minlength=60))])
    edges = set(zip(ei[0].tolist(), ei[1].tolist()))
    for step, sub in enumerate(s):
        ref = saint_sample_ref(rowptr, ei[1][perm], 60, ei.shape[1], dict(node=0, edge=1, random_walk=2)[kind], 7, 3,
                               11, step, 10_000)
        m, k = int(ref[0]), int(ref[1])
        np.testing.assert_array_equal(sub.node_idx, ref[2:2 + m])
        assert sub.edge_index.shape == (2, k)
        nodes = set(sub.node_idx.tolist())
        induced = {(u, v) for u, v in edges if u in nodes and v in nodes}
        got = {(int(sub.node_idx[a]), int(sub.node_idx[b])) for a, b in sub.edge_index.T}
        assert got == induced
        np.testing.assert_array_equal(ei[:, sub.edge_idx], sub.node_idx[sub.edge_index])


def test_reproducible_for_a_seed_and_different_across_seeds():
    d = _graph()
    a = [s.node_idx for s in GraphSAINTSampler(d, 10, num_steps=4, seed=1)]
    b = [s.node_idx for s in GraphSAINTSampler(d, 10, num_steps=4, seed=1)]
    c = [s.node_idx for s in GraphSAINTSampler(d, 10, num_steps=4, seed=2)]
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    assert not np.array_equal(a[0], a[1])  # steps differ


def test_samples_are_submitted_ahead():
    d = _graph()
    k = lib.TT_K_SAINT_SAMPLE
    tt.wait()
    before = lib.tt_kernel_ntasks(k)
    it = iter(GraphSAINTSampler(d, 5, num_steps=6, in_flight=3, seed=0))
    next(it)
    assert lib.tt_kernel_ntasks(k) - before == 3  # the first sample read, two more in flight
    next(it)
    assert lib.tt_kernel_ntasks(k) - before == 4


def test_small_capacity_grows():
    d = _graph()
    s = GraphSAINTSampler(d, 40, kind="edge", num_steps=1, seed=3)
    s._cap = 8  # far too small: the sample is drawn again with room, identically
    sub = s.sample(0)
    t = GraphSAINTSampler(d, 40, kind="edge", num_steps=1, seed=3).sample(0)
    np.testing.assert_array_equal(sub.node_idx, t.node_idx)
    np.testing.assert_array_equal(sub.edge_index, t.edge_index)


@pytest.mark.parametrize("kind", ["node", "random_walk"])
def test_loss_normalisation_is_unbiased(kind):
    """E[sum over the sampled nodes of L_v node_norm_v] = mean(L) (PyG's node_norm)."""
    d = _graph()
    s = GraphSAINTSampler(d, 8, kind=kind, walk_length=2, num_steps=50, sample_coverage=400, seed=4)
    L = np.random.default_rng(0).random(60)
    est = np.array([(L[sub.node_idx] * sub.node_norm).sum() for _ in range(4) for sub in s])
    err = abs(est.mean() - L.mean())
    assert err < 4 * est.std() / np.sqrt(len(est)) + 0.01 * L.mean(), (est.mean(), L.mean())


def test_bad_input():
    d = _graph()
    with pytest.raises(ValueError, match="kind"):
        GraphSAINTSampler(d, 5, kind="forest")
    with pytest.raises(ValueError, match="batch_size"):
        GraphSAINTSampler(d, 0)
    with pytest.raises(ValueError, match="out of range"):
        GraphSAINTSampler(np.array([[0, 1], [1, 9]]), 2, num_nodes=5)
    with pytest.raises(ValueError, match="num_nodes"):
        GraphSAINTSampler(np.array([[0, 1], [1, 2]]), 2)
    assert isinstance(d, Data)


def test_a_graph_larger_than_a_default_tile():
    """The sampler task reads the whole graph: its CSR must be one tile however large."""
    d = sbm(5000, 8, 0.008, 0.0004, 4, seed=0)
    sub = GraphSAINTSampler(d, 300, kind="random_walk", walk_length=2, num_steps=1, seed=0).sample(0)
    assert sub.num_nodes > 500 and sub.edge_index.shape[1] > 0
    np.testing.assert_array_equal(d.edge_index[:, sub.edge_idx], sub.node_idx[sub.edge_index])
