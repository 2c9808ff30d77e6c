"""tiletrain.geometric: graph neural networks on tiles, mirroring PyTorch Geometric (PyG 2.x).

``tiletrain.geometric.nn`` holds the layers (GCNConv, SAGEConv, GATConv, with PyG's parameter
names, so that a PyG ``state_dict()`` loads), ``tiletrain.geometric.utils`` the graph
utilities (add_self_loops, remove_self_loops, degree, softmax), ``tiletrain.geometric.data``
the Data record and the stochastic-block-model generator, ``GraphSAINTSampler`` subgraphs
drawn by tasks in the training's task graph.  Propagation is a tiled CSR
product (tiletrain.sparse.mm) or a gather/scatter pair (tiletrain/ops/index.py); see
docs/geometric.md."""
from . import data, nn, sampler, utils
from .data import Data, sbm
from .sampler import GraphSAINTSampler

__all__ = ["Data", "GraphSAINTSampler", "data", "nn", "sampler", "sbm", "utils"]
