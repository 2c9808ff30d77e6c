"""tiletrain.geometric.utils against torch_geometric.utils (add_self_loops, remove_self_loops,
degree, softmax forward and backward in float64), the Data record (also from a PyG Data) and
the stochastic block model (reproducible, class-correlated, undirected)."""
import numpy as np
import pytest
import torch
import torch_geometric.data
import torch_geometric.utils as pyg_utils
from conftest import submits_nothing

import tiletrain as tt
from tiletrain.geometric import Data, GraphSAINTSampler, sbm
from tiletrain.geometric.utils import add_remaining_self_loops, add_self_loops, degree, remove_self_loops, softmax
from tiletrain.pipeline import node_chunks


def test_self_loops_and_degree(rng):
    ei = rng.integers(0, 6, (2, 15)).astype(np.int64)
    ei[:, 0] = [2, 2]
    w = rng.standard_normal(15)
    ours, ow = add_self_loops(ei, w, fill_value=0.5, num_nodes=8)
    ref, rw = pyg_utils.add_self_loops(torch.from_numpy(ei), torch.from_numpy(w), fill_value=0.5, num_nodes=8)
    np.testing.assert_array_equal(ours, ref.numpy())
    np.testing.assert_array_equal(ow, rw.numpy())
    ours, ow = remove_self_loops(ei, tt.from_numpy(w))
    ref, rw = pyg_utils.remove_self_loops(torch.from_numpy(ei), torch.from_numpy(w))
    np.testing.assert_array_equal(ours, ref.numpy())
    np.testing.assert_array_equal(ow.numpy(), rw.numpy())
    np.testing.assert_array_equal(degree(ei[1], 8).numpy(), pyg_utils.degree(torch.from_numpy(ei[1]), 8).numpy())
    with pytest.raises(ValueError, match="out of range"):
        degree(ei[1], 3)


@pytest.mark.parametrize("shape,tiles", [((20,), (20,)), ((20, 3), (7, 2))])
def test_softmax(rng, shape, tiles):
    index = rng.integers(0, 6, shape[0]).astype(np.int64)  # nodes 6, 7: no entries
    src = rng.standard_normal(shape)
    S = tt.from_numpy(src, tiles).requires_grad_()
    out = softmax(S, index, num_nodes=8)
    st = torch.from_numpy(src.copy()).requires_grad_()
    ref = pyg_utils.softmax(st, torch.from_numpy(index), num_nodes=8)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(shape)
    out.backward(tt.from_numpy(g, out.tiles))
    ref.backward(torch.from_numpy(g))
    np.testing.assert_allclose(S.grad.numpy(), st.grad.numpy(), rtol=1e-10, atol=1e-10)


def test_data_record_and_from_pyg(rng):
    x = rng.standard_normal((4, 3)).astype(np.float32)
    ei = np.array([[0, 1, 2], [1, 2, 3]])
    pd = torch_geometric.data.Data(x=torch.from_numpy(x), edge_index=torch.from_numpy(ei),
                                   y=torch.tensor([0, 1, 0, 1]), train_mask=torch.tensor([True, False, True, False]))
    d = Data.from_pyg(pd)
    assert d.num_nodes == 4 and d.num_edges == 3 and d.num_features == 3
    np.testing.assert_array_equal(d.x, x)
    np.testing.assert_array_equal(d.train_mask, [True, False, True, False])
    assert "Data(x=[4, 3]" in repr(d)
    with pytest.raises(ValueError, match="out of range"):
        Data(x=x, edge_index=np.array([[0], [4]]))


def test_sbm_is_reproducible_and_class_correlated():
    a, b = sbm(2000, 4, 0.02, 0.001, 16, seed=3), sbm(2000, 4, 0.02, 0.001, 16, seed=3)
    np.testing.assert_array_equal(a.edge_index, b.edge_index)
    np.testing.assert_array_equal(a.x, b.x)
    src, dst = a.edge_index
    assert (src != dst).all()
    assert set(zip(src.tolist(), dst.tolist())) == set(zip(dst.tolist(), src.tolist()))  # undirected
    same = (a.y[src] == a.y[dst]).mean()
    # expected fraction of intra-class edges: 0.02 * 4 * C(500, 2) / (that + 0.001 * 6 * 500^2)
    within, between = 0.02 * 4 * 500 * 499 / 2, 0.001 * 6 * 500 * 500
    assert abs(same - within / (within + between)) < 0.03
    assert abs(a.num_edges / 2 - (within + between)) < 4 * np.sqrt(within + between)
    # class means differ: a nearest-centre classifier beats chance by far
    mu = np.stack([a.x[a.y == c].mean(0) for c in range(4)])
    pred = np.argmin(((a.x[:, None, :] - mu[None]) ** 2).sum(-1), axis=1)
    assert (pred == a.y).mean() > 0.6
    assert (a.train_mask.sum(), a.val_mask.sum(), a.test_mask.sum()) == (1200, 400, 400)


def test_bad_edge_index_is_rejected_everywhere_before_any_task():
    """The issue's bad inputs (out of range, negative, wrong dtype, wrong shape) for every
    entry point that takes node ids: the utilities, Data, the sampler, node_chunks."""
    x = np.zeros((4, 2))
    cases = [(np.array([[0, 1], [1, 4]]), ValueError, "out of range"),
             (np.array([[0, -1], [1, 2]]), ValueError, "negative"),
             (np.array([[0, 1], [1, 2]], np.int32), TypeError, "int64"),
             (np.array([[0, 1], [1, 2]], np.float64), TypeError, "int64"),
             (np.array([0, 1, 2]), ValueError, r"\(2, E\)"),
             (np.zeros((3, 2), np.int64), ValueError, r"\(2, E\)")]
    tt.wait()
    with submits_nothing():
        for ei, exc, msg in cases:
            calls = [lambda: add_self_loops(ei, num_nodes=4), lambda: Data(x=x, edge_index=ei),
                     lambda: GraphSAINTSampler(ei, 2, num_nodes=4),
                     lambda: node_chunks(x, ei, np.zeros(4, np.int64), np.ones(4, bool), 2)]
            if msg != "out of range":   # these know no number of nodes (as PyG's)
                calls += [lambda: add_remaining_self_loops(ei), lambda: remove_self_loops(ei)]
            for call in calls:
                with pytest.raises(exc, match=msg):
                    call()
        with pytest.raises(ValueError, match="negative|out of range"):
            degree(np.array([0, -1, 2]), 4)
        with pytest.raises(TypeError, match="int64"):
            degree(np.array([0.0, 1.0]), 4)
