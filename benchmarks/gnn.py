"""Graph neural networks (issue 33): full-graph GCN training on a stochastic block model,
tiletrain against PyG's GCNConv with the same threads, and feature-dimension against row-only
tiling of the propagation A @ X.  Prints tables (medians).

    python benchmarks/gnn.py                       # 100k nodes, ~1M edges, 128 features, 2 threads
    python benchmarks/gnn.py --nodes 20000 --epochs 5 --threads 2

Each framework runs in a child process of its own (peak RSS per framework, no shared
allocator state).  Both models start from the same weights (PyG's, loaded into tiletrain
through its state_dict) and use cached normalised adjacencies (``cached=True``): an epoch is
forward + cross-entropy on the training nodes + backward + Adam step, timed until the loss
and the updated weights are there."""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import environment, median, table  # noqa: E402


def _graph(args):
    from tiletrain.geometric import sbm
    N, K, deg, intra = args.nodes, args.classes, args.degree, 0.8
    size = N / K
    within, between = intra * N * deg / 2, (1 - intra) * N * deg / 2
    p_in = within / (K * size * (size - 1) / 2)
    p_out = between / (N * (N - 1) / 2 - K * size * (size - 1) / 2)
    return sbm(N, K, p_in, p_out, args.features, seed=args.seed, feature_signal=args.signal)


def _pyg_model(args):
    import torch
    import torch_geometric.nn as pyg_nn
    torch.manual_seed(args.seed)
    dims = [args.features] + [args.hidden] * (args.layers - 1) + [args.classes]
    return torch.nn.ModuleList([pyg_nn.GCNConv(a, b, cached=True) for a, b in zip(dims[:-1], dims[1:])])


def run_pyg(args) -> dict:
    import torch
    torch.set_num_threads(args.threads)
    d = _graph(args)
    convs = _pyg_model(args)
    x, ei = torch.from_numpy(d.x), torch.from_numpy(d.edge_index)
    y, train = torch.from_numpy(d.y), torch.from_numpy(np.flatnonzero(d.train_mask))
    opt = torch.optim.Adam(convs.parameters(), lr=args.lr)
    times, accs = [], []
    for epoch in range(args.epochs + 1):
        t = time.perf_counter()
        h = x
        for i, conv in enumerate(convs):
            h = conv(h, ei)
            if i < len(convs) - 1:
                h = h.relu()
        loss = torch.nn.functional.cross_entropy(h[train], y[train])
        opt.zero_grad()
        loss.backward()
        opt.step()
        float(loss)
        times.append(time.perf_counter() - t)
        accs.append(float((h.argmax(1) == y)[torch.from_numpy(d.test_mask)].float().mean()))
    return dict(times=times[1:], first=times[0], accs=accs, rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def run_tiletrain(args) -> dict:
    import tiletrain as tt
    import tiletrain.functional as F
    from tiletrain.geometric.nn import GCNConv
    d = _graph(args)
    ref = _pyg_model(args)
    dims = [args.features] + [args.hidden] * (args.layers - 1) + [args.classes]
    out = {}
    with tt.init(ncpu=args.threads):
        convs = tt.nn.ModuleList([GCNConv(a, b, cached=True) for a, b in zip(dims[:-1], dims[1:])])
        convs.load_state_dict(ref.state_dict())
        x = tt.from_numpy(d.x, (args.tile, args.features))
        train = tt.from_numpy(np.flatnonzero(d.train_mask))
        y_train = tt.from_numpy(d.y[d.train_mask])
        opt = tt.optim.AdamW(convs.parameters(), lr=args.lr, weight_decay=0.0)
        times, accs = [], []
        for epoch in range(args.epochs + 1):
            t = time.perf_counter()
            h = x
            for i, conv in enumerate(convs):
                h = conv(h, d.edge_index)
                if i < len(convs) - 1:
                    h = F.relu(h)
            loss = F.cross_entropy(tt.index_select(h, 0, train), y_train)
            opt.zero_grad()
            loss.backward()
            opt.step()
            float(loss)
            tt.wait()
            times.append(time.perf_counter() - t)
            pred = h.numpy().argmax(1)
            accs.append(float((pred == d.y)[d.test_mask].mean()))
        out.update(times=times[1:], first=times[0], accs=accs)
        # propagation alone: row tiling (one feature block) against feature-dimension tiling
        A = convs[0]._cached_adj
        for name, ft in (("rows only", args.features), ("rows x features/4", max(1, args.features // 4))):
            X = tt.from_numpy(d.x, (args.tile, ft))
            (A @ X).numpy()
            ts = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                Y = A @ X
                tt.wait()
                ts.append(time.perf_counter() - t)
            del Y
            out[f"prop {name}"] = median(ts)
    out["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--degree", type=float, default=10.0, help="mean degree (directed edges per node)")
    p.add_argument("--classes", type=int, default=8)
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--signal", type=float, default=0.3)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tile", type=int, default=8192, help="rows per tile (and CSR block)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--child", choices=["pyg", "tiletrain"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(run_pyg(args) if args.child == "pyg" else run_tiletrain(args)))
        return
    print(environment())
    res = {}
    for name in ("pyg", "tiletrain"):
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS="1")
        cmd = [sys.executable, __file__, "--child", name] + sys.argv[1:]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode:
            sys.exit(f"{name} failed:\n{proc.stderr}")
        res[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    d = _graph(args)
    print(f"\nSBM: {d.num_nodes} nodes, {d.num_edges} directed edges, {args.features} features, {args.classes} classes;"
          f" GCN {args.layers} layers (hidden {args.hidden}), {args.threads} threads, tile {args.tile} rows")
    pyg, ours = res["pyg"], res["tiletrain"]
    rows = []
    for name, r in (("PyG GCNConv", pyg), ("tiletrain GCNConv", ours)):
        rows.append([name, f"{median(r['times']) * 1e3:.1f}", f"{r['first'] * 1e3:.1f}", f"{r['rss'] / 1024:.0f}",
                     f"{r['accs'][-1]:.3f}"])
    print(table(["framework", "epoch ms (median)", "first epoch ms", "peak RSS MiB", "test acc"], rows))
    print(f"speed-up (PyG time / tiletrain time): {median(pyg['times']) / median(ours['times']):.2f}x; "
          f"memory ratio (tiletrain / PyG): {ours['rss'] / pyg['rss']:.2f}")
    print(table(["propagation A @ X", "ms (median)"],
                [[k[5:], f"{v * 1e3:.1f}"] for k, v in ours.items() if k.startswith("prop ")]))


if __name__ == "__main__":
    main()
