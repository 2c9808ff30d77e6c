"""tiletrain.geometric.nn against torch_geometric.nn with the same weights (a PyG state_dict
loaded as it is), float64 to 1e-10: outputs and the gradients of every parameter and of x,
on graphs with isolated nodes, self-loops, duplicate edges, and tilings with smaller last
tiles; bad input rejected before any task."""
import numpy as np
import pytest
import torch
import torch_geometric.nn as pyg_nn

import tiletrain as tt
from conftest import submits_nothing
from tiletrain.geometric.nn import GATConv, GCNConv, SAGEConv

TOL = dict(rtol=1e-10, atol=1e-10)


def _graph(rng, N=13, E=40):
    ei = rng.integers(0, N - 2, (2, E)).astype(np.int64)  # nodes N-2, N-1 isolated
    ei[:, 0] = [3, 3]                                       # a self-loop
    ei[:, 1] = ei[:, 2]                                      # a duplicate edge
    return ei


def _compare(rng, ours, theirs, x, ei, x_tiles, **kw):
    ours.load_state_dict(theirs.state_dict())
    assert set(ours.state_dict()) == set(theirs.state_dict())
    X = tt.from_numpy(x, x_tiles).requires_grad_()
    out = ours(X, ei, **kw)
    xt = torch.from_numpy(x.copy()).requires_grad_()
    ref = theirs(xt, torch.from_numpy(ei), **kw)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), **TOL)
    g = rng.standard_normal(ref.shape)
    (out * tt.from_numpy(g, out.tiles)).sum().backward()
    (ref * torch.from_numpy(g)).sum().backward()
    np.testing.assert_allclose(X.grad.numpy(), xt.grad.numpy(), **TOL)
    mine = dict(ours.named_parameters())
    for name, p in theirs.named_parameters():
        np.testing.assert_allclose(mine[name].grad.numpy(), p.grad.numpy(), err_msg=name, **TOL)


@pytest.mark.parametrize("x_tiles", [(13, 5), (4, 3)])
@pytest.mark.parametrize("kwargs", [{}, dict(improved=True), dict(normalize=False), dict(bias=False),
                                    dict(cached=True)])
def test_gcnconv(rng, x_tiles, kwargs):
    ei = _graph(rng)
    x = rng.standard_normal((13, 5))
    theirs = pyg_nn.GCNConv(5, 4, **kwargs).double()
    torch.nn.init.normal_(theirs.bias) if theirs.bias is not None else None
    ours = GCNConv(5, 4, dtype=np.float64, **kwargs)
    _compare(rng, ours, theirs, x, ei, x_tiles)
    if kwargs.get("cached"):  # the cached adjacency gives the same again
        _compare(rng, ours, theirs, x, ei, x_tiles)


def test_gcnconv_edge_weight(rng):
    ei = _graph(rng)
    w = rng.random(ei.shape[1]) + 0.5
    x = rng.standard_normal((13, 5))
    theirs = pyg_nn.GCNConv(5, 3).double()
    ours = GCNConv(5, 3, dtype=np.float64)
    ours.load_state_dict(theirs.state_dict())
    out = ours(tt.from_numpy(x), ei, w)
    ref = theirs(torch.from_numpy(x), torch.from_numpy(ei), torch.from_numpy(w))
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), **TOL)


def test_layers_on_one_graph_share_its_adjacency_and_only_while_it_lives(rng, monkeypatch):
    """A 3-layer GCN (and SAGE) on one graph builds the normalised adjacency once per forward
    (the layers share it while it is alive), with PyG's outputs; an edge_index changed in place,
    other edge weights or other options build it anew, and nothing keeps it alive: once the
    outputs and their graph are gone, the next call builds again."""
    from tiletrain.geometric import nn as gnn
    builds = []
    real = gnn.adjacency
    monkeypatch.setattr(gnn, "adjacency", lambda *a, **k: builds.append(1) or real(*a, **k))
    ei = _graph(rng)
    x = rng.standard_normal((13, 5))
    dims = [(5, 6), (6, 6), (6, 3)]
    theirs = [pyg_nn.GCNConv(a, b).double() for a, b in dims]
    ours = [GCNConv(a, b, dtype=np.float64) for a, b in dims]
    for o, t in zip(ours, theirs):
        o.load_state_dict(t.state_dict())

    def run(layers, h, e, w=None):
        for layer in layers:
            h = layer(h, e, w)
        return h

    out = run(ours, tt.from_numpy(x).requires_grad_(), ei)
    ref = run(theirs, torch.from_numpy(x), torch.from_numpy(ei))
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), **TOL)
    assert len(builds) == 1
    run(ours, tt.from_numpy(x), ei.copy())                  # equal content, another array: shared
    assert len(builds) == 1
    ei[0, 5] = (ei[0, 5] + 1) % 11                            # changed in place: built anew, right
    out2 = run(ours, tt.from_numpy(x), ei)
    np.testing.assert_allclose(out2.detach().numpy(), run(theirs, torch.from_numpy(x), torch.from_numpy(ei))
                               .detach().numpy(), **TOL)
    assert len(builds) == 2
    w = rng.random(ei.shape[1]) + 0.5
    out3 = run(ours, tt.from_numpy(x), ei, w)                 # edge weights: another adjacency
    np.testing.assert_allclose(out3.detach().numpy(), run(theirs, torch.from_numpy(x), torch.from_numpy(ei),
                                                          torch.from_numpy(w)).detach().numpy(), **TOL)
    assert len(builds) == 3
    improved = GCNConv(5, 6, improved=True, dtype=np.float64)
    improved(tt.from_numpy(x), ei)                            # another option: another adjacency
    assert len(builds) == 4
    sage = SAGEConv(5, 4, dtype=np.float64)
    sage(tt.from_numpy(x), ei)
    assert len(builds) == 5                                   # another layer kind: its own
    del out, out2, out3
    import gc
    gc.collect()
    run(ours, tt.from_numpy(x), ei)                           # nothing kept alive: built again
    assert len(builds) == 6


@pytest.mark.parametrize("x_tiles", [(13, 5), (4, 2)])
@pytest.mark.parametrize("kwargs", [{}, dict(root_weight=False), dict(normalize=True), dict(bias=False)])
def test_sageconv(rng, x_tiles, kwargs):
    ei = _graph(rng)
    x = rng.standard_normal((13, 5))
    theirs = pyg_nn.SAGEConv(5, 4, **kwargs).double()
    _compare(rng, SAGEConv(5, 4, dtype=np.float64, **kwargs), theirs, x, ei, x_tiles)


@pytest.mark.parametrize("x_tiles", [(13, 5), (4, 3)])
@pytest.mark.parametrize("kwargs", [{}, dict(heads=3), dict(heads=2, concat=False), dict(negative_slope=0.1),
                                    dict(add_self_loops=False), dict(bias=False, heads=2)])
def test_gatconv(rng, x_tiles, kwargs):
    ei = _graph(rng)
    x = rng.standard_normal((13, 5))
    theirs = pyg_nn.GATConv(5, 4, **kwargs).double()
    if theirs.bias is not None:
        torch.nn.init.normal_(theirs.bias)
    _compare(rng, GATConv(5, 4, dtype=np.float64, **kwargs), theirs, x, ei, x_tiles)


def test_gatconv_attention_weights(rng):
    ei = _graph(rng)
    x = rng.standard_normal((13, 5))
    theirs = pyg_nn.GATConv(5, 4, heads=2).double()
    ours = GATConv(5, 4, heads=2, dtype=np.float64)
    ours.load_state_dict(theirs.state_dict())
    _, (ei_o, a_o) = ours(tt.from_numpy(x), ei, return_attention_weights=True)
    _, (ei_t, a_t) = theirs(torch.from_numpy(x), torch.from_numpy(ei), return_attention_weights=True)
    np.testing.assert_array_equal(ei_o, ei_t.numpy())
    np.testing.assert_allclose(a_o.detach().numpy(), a_t.detach().numpy(), **TOL)


def test_parameter_names_are_pygs():
    assert set(dict(GCNConv(3, 2).named_parameters())) == {"lin.weight", "bias"}
    assert set(dict(SAGEConv(3, 2).named_parameters())) == {"lin_l.weight", "lin_l.bias", "lin_r.weight"}
    assert set(dict(GATConv(3, 2, heads=2).named_parameters())) == {"lin.weight", "att_src", "att_dst", "bias"}


def test_bad_input_is_rejected_before_any_task(rng):
    x = tt.from_numpy(rng.standard_normal((5, 3)).astype(np.float32))
    conv, sage, gat = GCNConv(3, 2), SAGEConv(3, 2), GATConv(3, 2)
    A = tt.sparse_csr_tensor(np.array([0, 1, 2]), np.array([0, 2]), np.ones(2, np.float32), (2, 3))
    tt.wait()
    with submits_nothing():
        for layer in (conv, sage, gat):
            with pytest.raises(ValueError, match="out of range for 5 nodes"):
                layer(x, np.array([[0, 1], [2, 5]]))
            with pytest.raises(ValueError, match="negative"):
                layer(x, np.array([[0, -1], [2, 3]]))
            with pytest.raises(TypeError, match="int64"):
                layer(x, np.array([[0, 1], [2, 3]], np.int32))
            with pytest.raises(ValueError, match=r"\(2, E\)"):
                layer(x, np.array([[0, 1, 2]]))
        with pytest.raises(ValueError, match="square"):
            conv(x, A)
        from tiletrain.geometric.nn import adjacency
        ei = np.array([[0, 1, 2], [1, 2, 3]])
        for values in (np.ones(2), np.ones((3, 1)), tt.from_numpy(np.ones(4))):
            with pytest.raises(ValueError, match=r"values must have shape \(3,\) \(one per edge\)"):
                adjacency(ei, values, 5, (4, 4), np.float64)
        with pytest.raises(ValueError, match="out of range"):
            adjacency(np.array([[0, 1], [1, 5]]), np.ones(2), 5, (4, 4), np.float64)



def test_gcn_norm_equals_pyg(rng):
    """gcn_norm (one C pass) gives PyG's edge list and values in float64, weighted or not,
    improved or not, with or without self-loops added, on a graph with a self-loop (twice),
    a duplicate edge and isolated nodes; an edge out of range is refused."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm as pyg_gcn_norm

    from tiletrain.geometric.nn import gcn_norm
    ei = _graph(rng)
    ei[:, 5] = [4, 4]
    ei[:, 6] = [4, 4]
    w = rng.uniform(0.5, 2.0, ei.shape[1])
    for weighted in (False, True):
        for improved in (False, True):
            for loops in (True, False):
                e, v = gcn_norm(ei, w if weighted else None, 13, improved=improved, add_self_loops=loops)
                pe, pv = pyg_gcn_norm(torch.from_numpy(ei), torch.from_numpy(w) if weighted else None, 13,
                                      improved=improved, add_self_loops=loops, dtype=torch.float64)
                np.testing.assert_array_equal(e, pe.numpy())
                np.testing.assert_allclose(v, pv.numpy(), rtol=1e-14, atol=0)
    with pytest.raises(ValueError, match=r"edge 1 \(0 -> 13\) is out of range for 13 nodes"):
        gcn_norm(np.array([[0, 0], [1, 13]]), None, 13)
