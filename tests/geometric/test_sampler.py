"""GraphSAINT samplers (tiletrain/geometric/sampler.py): the sampler task's subgraphs equal the
NumPy reference's draws (same seed, same step) for the node, edge and random-walk kinds, are
the induced subgraphs of their nodes, are reproducible for a seed; samples are submitted
ahead (in flight); each node is drawn with GraphSAINT's probability (node: deg(v) / E; edge:
p_e proportional to 1/deg(u) + 1/deg(v); random walk: the chance a walk from a uniform root
visits v, computed exactly); the loss normalisation from pre-sampling makes an unbiased
estimate of the mean over all nodes and the aggregation normalisation an unbiased estimate
of each node's neighbour sum (checked against the exact values on a small graph)."""
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


def test_samples_in_flight_when_the_room_grows_read_alike():
    """Samples submitted with the old capacity, read after the first one made it grow (the
    read buffer follows each sample's own size): every subgraph equals a fresh draw."""
    d = _graph()
    s = GraphSAINTSampler(d, 40, kind="random_walk", num_steps=4, in_flight=3, seed=5)
    s._cap = 8
    got = list(s)
    for step, sub in enumerate(got):
        want = GraphSAINTSampler(d, 40, kind="random_walk", num_steps=4, seed=5).sample(step)
        np.testing.assert_array_equal(sub.node_idx, want.node_idx)
        np.testing.assert_array_equal(sub.edge_index, want.edge_index)
        np.testing.assert_array_equal(sub.edge_idx, want.edge_idx)
    assert s._cap > 8


def _csr(d):
    ei, N = d.edge_index, d.num_nodes
    perm = np.lexsort((ei[1], ei[0]))
    rowptr = np.concatenate([[0], np.cumsum(np.bincount(ei[0], minlength=N))])
    return rowptr, ei[1][perm]


def _inclusion(d, kind: str, length: int) -> np.ndarray:
    """P(node v is in a sample of one root), exactly, for GraphSAINT's samplers."""
    ei, N, E = d.edge_index, d.num_nodes, d.edge_index.shape[1]
    outdeg = np.bincount(ei[0], minlength=N)
    if kind == "node":
        return outdeg / E
    if kind == "edge":
        deg = np.maximum(outdeg, 1).astype(float)
        w = 1.0 / deg[ei[0]] + 1.0 / deg[ei[1]]
        p = w / w.sum()
        inc = np.bincount(ei[0], p, N) + np.bincount(ei[1], p, N)
        return inc - np.bincount(ei[0], p * (ei[0] == ei[1]), N)  # a self-loop counts once
    rowptr, col = _csr(d)
    P = np.zeros((N, N))  # the walk's transition matrix (a node without out-edges stays)
    for u in range(N):
        if outdeg[u]:
            np.add.at(P[u], col[rowptr[u]:rowptr[u + 1]], 1.0 / outdeg[u])
        else:
            P[u, u] = 1.0
    inc = np.zeros(N)
    for v in range(N):  # h[u] = P(the walk from u meets v within t steps)
        h = (np.arange(N) == v).astype(float)
        for _ in range(length):
            h = P @ h
            h[v] = 1.0
        inc[v] = h.mean()
    return inc


@pytest.mark.parametrize("kind", ["node", "edge", "random_walk"])
def test_nodes_are_drawn_with_graphsaints_probabilities(kind):
    d = sbm(30, 3, 0.3, 0.05, 4, seed=2)
    b, n = 3, 1500
    p = 1.0 - (1.0 - _inclusion(d, kind, 2)) ** b  # b independent roots
    s = GraphSAINTSampler(d, b, kind=kind, walk_length=2, num_steps=n, in_flight=8, seed=9)
    count = np.zeros(d.num_nodes)
    for sub in s:
        count[sub.node_idx] += 1
    z = np.abs(count / n - p) / np.sqrt(np.maximum(p * (1 - p), 1e-12) / n)
    assert z.max() < 4.5, (kind, z.max(), np.c_[count / n, p][z.argmax()])


def test_edge_probabilities_differ_from_uniform_edges():
    """The graph of the test above has unequal degrees: GraphSAINT's edge weights and uniform
    edges give inclusion probabilities that test can tell apart."""
    d = sbm(30, 3, 0.3, 0.05, 4, seed=2)
    uniform = np.bincount(d.edge_index.ravel(), minlength=30) / d.edge_index.shape[1]
    assert np.abs(_inclusion(d, "edge", 0) - uniform).max() > 0.01


@pytest.mark.parametrize("kind", ["node", "edge", "random_walk"])
def test_loss_normalisation_is_unbiased(kind):
    """E[sum over the sampled nodes of L_v node_norm_v] = mean(L) (PyG's node_norm)."""
    d = _graph()
    s = GraphSAINTSampler(d, 8, kind=kind, walk_length=2, num_steps=50, sample_coverage=400, seed=4)
    L = np.random.default_rng(0).random(60)
    est = np.array([(L[sub.node_idx] * sub.node_norm).sum() for _ in range(4) for sub in s])
    err = abs(est.mean() - L.mean())
    assert err < 4 * est.std() / np.sqrt(len(est)) + 0.01 * L.mean(), (est.mean(), L.mean())


@pytest.mark.parametrize("kind", ["node", "edge", "random_walk"])
def test_aggregation_normalisation_is_unbiased(kind):
    """PyG's edge_norm = C_u / C_(u,v) for an edge from u: given u in the sample, the sum of
    y_v edge_norm over u's sampled edges estimates u's whole neighbour sum (pooled over the
    nodes, within 6 %; measured 0.97, 1.00, 1.01); without the weights it is far too small
    (0.13 to 0.50)."""
    d = _graph()
    s = GraphSAINTSampler(d, 8, kind=kind, walk_length=2, num_steps=50, sample_coverage=400, seed=4)
    y = np.random.default_rng(1).random(60) + 0.5
    exact = np.bincount(d.edge_index[0], y[d.edge_index[1]], 60)
    est, plain, seen = np.zeros(60), np.zeros(60), np.zeros(60)
    for _ in range(8):
        for sub in s:
            u, v = sub.node_idx[sub.edge_index[0]], sub.node_idx[sub.edge_index[1]]
            est += np.bincount(u, y[v] * sub.edge_norm, 60)
            plain += np.bincount(u, y[v], 60)
            seen[sub.node_idx] += 1
    ok = (seen > 20) & (exact > 0)
    assert ok.sum() > 40
    ratio = (est[ok] / seen[ok]).sum() / exact[ok].sum()  # pooled over nodes (each alone is noisy)
    assert abs(ratio - 1) < 0.06, ratio
    assert (plain[ok] / seen[ok]).sum() / exact[ok].sum() < 0.7


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


@pytest.mark.parametrize("kind,batch", [("node", 2), ("random_walk", 1), ("edge", 3), ("random_walk", 300)])
def test_both_node_lookups_give_the_reference(kind, batch):
    """The task finds the induced edges in a bitmap of the graph's nodes, or in a hash table of
    the sampled ones when the graph has more than 512 nodes per drawn node (the first three
    cases here: a few draws on 5000 nodes): both give the NumPy reference's subgraph."""
    d = sbm(5000, 8, 0.008, 0.0004, 4, seed=0)
    ei = d.edge_index
    perm = np.lexsort((ei[1], ei[0]))
    rowptr = np.concatenate([[0], np.cumsum(np.bincount(ei[0], minlength=5000))])
    s = GraphSAINTSampler(d, batch_size=batch, kind=kind, walk_length=2, num_steps=3, seed=4)
    for step, sub in enumerate(s):
        ref = saint_sample_ref(rowptr, ei[1][perm], 5000, ei.shape[1], dict(node=0, edge=1, random_walk=2)[kind],
                               batch, 2, 4, step, 100_000)
        m, k = int(ref[0]), int(ref[1])
        np.testing.assert_array_equal(sub.node_idx, ref[2:2 + m])
        np.testing.assert_array_equal(sub.edge_index, ref[2 + m:2 + m + 2 * k].reshape(2, k))
        np.testing.assert_array_equal(sub.edge_idx, perm[ref[2 + m + 2 * k:2 + m + 3 * k]])
