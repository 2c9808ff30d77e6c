"""Index, scatter, CSR and graph-layer ops on block-cyclic tensors; saves every result (as
seen by this rank) to <out>/<tag>-rank<r>.npz.  Run alone and under mpirun: they must agree."""
import sys

import numpy as np

import tiletrain as tt
from tiletrain.distribution import BlockCyclic
from tiletrain.geometric.nn import GATConv, GCNConv

out, tag = sys.argv[1], sys.argv[2]
tt.init()
rng = np.random.default_rng(7)
res = {}
x = rng.standard_normal((11, 6))
X = tt.from_numpy(x, (3, 4), dist=BlockCyclic()).requires_grad_()
idx = rng.integers(0, 11, 9).astype(np.int64)
sel = tt.index_select(X, 0, idx)
res["index_select"] = sel.detach().numpy()
src = rng.standard_normal((9, 6))
S = tt.from_numpy(src, (4, 3), dist=BlockCyclic((1, 2))).requires_grad_()
res["index_add"] = tt.index_add(X, 0, idx, S, alpha=0.5).detach().numpy()
gi = rng.integers(0, 11, (11, 6)).astype(np.int64)
red = tt.scatter_reduce(X, 0, gi, X * 2.0, "amax", include_self=False)
res["scatter_reduce"] = red.detach().numpy()
(sel.sum() + red.sum()).backward()
res["X.grad"] = X.grad.numpy()
ei = rng.integers(0, 11, (2, 30)).astype(np.int64)
conv, gat = GCNConv(6, 4, dtype=np.float64, rng=np.random.default_rng(1)), GATConv(4, 3, heads=2, dtype=np.float64,
                                                                                   rng=np.random.default_rng(2))
h = gat(conv(X, ei), ei)
res["gcn_gat"] = h.detach().numpy()
h.sum().backward()
for layer, mod in (("gcn", conv), ("gat", gat)):
    for name, p in mod.named_parameters():
        res[f"grad {layer} {name}"] = p.grad.numpy()
tt.wait()
np.savez(f"{out}/{tag}-rank{tt.rank()}.npz", **res)
tt.shutdown()
