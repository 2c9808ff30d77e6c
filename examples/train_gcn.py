"""Train a two-layer GCN on a graph, full-graph or on GraphSAINT subgraphs, and print the
accuracy per epoch (docs/geometric.md).

    python examples/train_gcn.py                          # karate club, full graph
    python examples/train_gcn.py --graph sbm --nodes 20000 --sampled
"""
import argparse

import numpy as np

import tiletrain as tt
import tiletrain.functional as F
from tiletrain.geometric import GraphSAINTSampler, sbm
from tiletrain.geometric.data import karate_club
from tiletrain.geometric.nn import GCNConv

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--graph", choices=["karate", "sbm"], default="karate")
p.add_argument("--nodes", type=int, default=20000)
p.add_argument("--epochs", type=int, default=30)
p.add_argument("--hidden", type=int, default=16)
p.add_argument("--lr", type=float, default=0.02)
p.add_argument("--sampled", action="store_true", help="GraphSAINT random-walk subgraphs instead of the full graph")
p.add_argument("--roots", type=int, default=500, help="random walks per subgraph")
p.add_argument("--ncpu", type=int, default=2)
args = p.parse_args()

data = karate_club() if args.graph == "karate" else sbm(args.nodes, 8, 40 / args.nodes, 2 / args.nodes, 64, seed=0,
                                                       feature_signal=0.3)
C = int(data.y.max()) + 1
tt.init(ncpu=args.ncpu)
conv1 = GCNConv(data.num_features, args.hidden, cached=not args.sampled)
conv2 = GCNConv(args.hidden, C, cached=not args.sampled)
opt = tt.optim.AdamW(list(conv1.parameters()) + list(conv2.parameters()), lr=args.lr, weight_decay=5e-4)
tile = min(4096, data.num_nodes)
x_all = tt.from_numpy(data.x, (tile, data.num_features))


def model(x, edge_index, edge_weight=None):
    h = F.relu(conv1(x, edge_index, edge_weight))  # (N, hidden)
    return conv2(h, edge_index, edge_weight)        # (N, C)


def accuracy() -> float:
    with tt.no_grad():
        pred = model(x_all, data.edge_index).numpy().argmax(1)
    return float((pred == data.y)[data.test_mask].mean())


sampler = (GraphSAINTSampler(data, args.roots, kind="random_walk", walk_length=2, num_steps=5, sample_coverage=20,
                             in_flight=2, seed=0) if args.sampled else None)
for epoch in range(args.epochs):
    if sampler is None:
        train = np.flatnonzero(data.train_mask)
        logits = model(x_all, data.edge_index)
        loss = F.cross_entropy(tt.index_select(logits, 0, tt.from_numpy(train)), tt.from_numpy(data.y[train]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    else:  # each subgraph is drawn by a task while the previous step trains
        for sub in sampler:
            local = np.flatnonzero(data.train_mask[sub.node_idx])
            if not len(local):
                continue
            x = tt.index_select(x_all, 0, tt.from_numpy(sub.node_idx))
            logits = model(x, sub.edge_index, sub.edge_norm)
            w = tt.from_numpy((sub.node_norm[local] * data.num_nodes / len(local)).astype(np.float32))
            nll = F.cross_entropy(tt.index_select(logits, 0, tt.from_numpy(local)),
                                  tt.from_numpy(data.y[sub.node_idx][local]), reduction="none")
            loss = (nll * w).mean()  # GraphSAINT's normalised loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    print(f"epoch {epoch:3d}  loss {float(loss):.4f}  test accuracy {accuracy():.3f}")
tt.shutdown()
