"""A deep residual GCN (16 layers) in a pipeline (tiletrain/pipeline/gnn.py's stage program
run by ModelPipeline): split into stages, chunks of nodes as micro-batches, run by built-in
schedules in one process (ranks = worker groups), the split backward (zb-h1) too: the losses
and every gradient equal the plain loop's (reference_step) in float64; bad schedules and
chunks are rejected."""
import numpy as np
import pytest

import tiletrain as tt
from tiletrain.geometric import sbm
from tiletrain.geometric.nn import DeepGCN
from tiletrain.pipeline import ModelPipeline, node_chunks, schedules
from tiletrain.pipeline.gnn import reference_step


def _setup(m=4):
    d = sbm(48, 3, 0.25, 0.03, 5, seed=3)
    chunks = node_chunks(d.x, d.edge_index, d.y, np.ones(48, bool), m)
    return d, chunks


def _model(layers=16):
    return DeepGCN(5, 6, 3, layers, dtype=np.float64, rng=np.random.default_rng(0))


def _grads(model):
    return {n: p.grad.numpy() for n, p in model.named_parameters()}


@pytest.mark.parametrize("name,ranks,virtual", [("gpipe", 2, None), ("1f1b", 2, None), ("interleaved-1f1b", 2, 2),
                                                ("zb-h1", 2, None)])
def test_pipelined_deep_gcn_equals_the_plain_loop(name, ranks, virtual):
    d, chunks = _setup()
    ref_model, model = _model(), _model()
    ref = [float(v) for v in reference_step(ref_model, chunks)]
    pipe = ModelPipeline(model, schedules.get(name, ranks, len(chunks), virtual=virtual))
    got = [float(v) for v in pipe.step(chunks).losses]
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    want = _grads(ref_model)
    for n, g in _grads(model).items():
        np.testing.assert_allclose(g, want[n], rtol=1e-10, atol=1e-12, err_msg=n)
    assert len(want) == 2 + 2 * 16 + 2


def test_chunks_are_induced_subgraphs_and_bad_input():
    d, chunks = _setup()
    for c in chunks:
        sub = set(map(tuple, (c.edge_index + c.nodes[0]).T.tolist()))
        inside = {(u, v) for u, v in d.edge_index.T.tolist() if u in set(c.nodes) and v in set(c.nodes)}
        assert sub == inside
    with pytest.raises(ValueError, match="no training node"):
        node_chunks(d.x, d.edge_index, d.y, np.arange(48) < 10, 4)
    with pytest.raises(ValueError, match="chunks must be"):
        node_chunks(d.x, d.edge_index, d.y, np.ones(48, bool), 0)
    with pytest.raises(ValueError, match="out of range"):
        node_chunks(d.x, np.array([[0, 1], [1, 48]]), d.y, np.ones(48, bool), 2)
    with pytest.raises(ValueError, match="micro-batches"):
        ModelPipeline(_model(), schedules.get("1f1b", 2, 3)).step(chunks)
    with pytest.raises(ValueError, match="blocks"):
        ModelPipeline(_model(1), schedules.get("1f1b", 2, 4))
    with pytest.raises(TypeError, match="DeepGCN"):
        ModelPipeline(tt.nn.Linear(2, 2), schedules.get("1f1b", 2, 4))
