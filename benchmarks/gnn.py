"""Graph neural networks (issue 33): full-graph GCN training on a stochastic block model,
tiletrain against PyG's GCNConv with the same threads; sampled training (GraphSAINT random
walks) to 90 % of the full-graph accuracy; feature-dimension against row-only tiling of the
propagation A @ X.  Prints tables (medians).

    python benchmarks/gnn.py                       # 100k nodes, ~1M edges, 128 features, 2 threads
    python benchmarks/gnn.py --nodes 20000 --epochs 5 --threads 2
    python benchmarks/gnn.py --skip-sampled        # the full-graph and propagation tables only

Sampled training: tiletrain draws random-walk subgraphs with ``GraphSAINTSampler`` (tasks in
the training's task graph, ``--in-flight`` samples ahead: subgraph k+1 is drawn while step k
trains); PyG's own ``GraphSAINTRandomWalkSampler`` needs torch-sparse, which PyG 2.8 on this
Python does not bring, so the PyG side draws the same kind of subgraph (uniform roots, walks
of ``--walk-length`` steps, the induced subgraph) with a plain NumPy loop before each step,
as a serial sampler does.  Both train the same GCN from the same weights with Adam on the
cross-entropy of the subgraph's training nodes (no GraphSAINT normalisation on either side),
at the size of PyG's GraphSAINT example (``--roots 6000`` walks of length 2, hidden width
``--sampled-hidden 256``), tiletrain's features in ``--sampled-tile 4096``-row tiles (a
subgraph of ~16,000 nodes in four row tiles for two workers);
every ``--eval-every`` steps the clock stops and a full-graph forward measures the test
accuracy.  Reported: training time and steps until the test accuracy first reaches 90 % of
the full-graph run's, the accuracy after ``--sampled-steps`` steps, and for tiletrain the
trace's mean worker idle fraction over ``--trace-steps`` steps (no waiting inside them but
for the samples themselves).

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


def _dims(args, hidden: int) -> list[int]:
    return [args.features] + [hidden] * (args.layers - 1) + [args.classes]


def _pyg_model(args, cached: bool = True, hidden: int | None = None):
    import torch
    import torch_geometric.nn as pyg_nn
    torch.manual_seed(args.seed)
    dims = _dims(args, args.hidden if hidden is None else hidden)
    return torch.nn.ModuleList([pyg_nn.GCNConv(a, b, cached=cached) for a, b in zip(dims[:-1], dims[1:])])


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
    dims = _dims(args, args.hidden)
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
            pred = h.detach().numpy().argmax(1)
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


def _sub_targets(d, nodes):
    """The subgraph's training nodes (local ids) and their classes."""
    local = np.flatnonzero(d.train_mask[nodes])
    return local, d.y[nodes[local]]


def numpy_random_walk_subgraph(rowptr, col, ei, N, roots, length, rng):
    """PyG side's sampler: GraphSAINT random walks (uniform roots, uniform neighbours; a node
    without out-edges stays) and the induced subgraph, with NumPy, serially."""
    u = rng.integers(0, N, roots)
    walk = [u]
    for _ in range(length):
        deg = rowptr[u + 1] - rowptr[u]
        step = rowptr[u] + (rng.random(roots) * np.maximum(deg, 1)).astype(np.int64)
        u = np.where(deg > 0, col[np.minimum(step, len(col) - 1)], u)
        walk.append(u)
    nodes = np.unique(np.concatenate(walk))
    inside = np.zeros(N, bool)
    inside[nodes] = True
    keep = inside[ei[0]] & inside[ei[1]]
    return nodes, np.searchsorted(nodes, ei[:, keep])


def run_pyg_sampled(args) -> dict:
    import torch
    torch.set_num_threads(args.threads)
    d = _graph(args)
    convs = _pyg_model(args, cached=False, hidden=args.sampled_hidden)
    N, ei = d.num_nodes, d.edge_index
    perm = np.lexsort((ei[1], ei[0]))
    rowptr = np.concatenate([[0], np.cumsum(np.bincount(ei[0], minlength=N))])
    col = ei[1][perm]
    x_all, ei_all = torch.from_numpy(d.x), torch.from_numpy(ei)
    test = torch.from_numpy(d.test_mask)
    y_all = torch.from_numpy(d.y)
    opt = torch.optim.Adam(convs.parameters(), lr=args.lr)
    rng = np.random.default_rng(args.seed)

    def forward(x, e):
        h = x
        for i, conv in enumerate(convs):
            h = conv(h, e)
            if i < len(convs) - 1:
                h = h.relu()
        return h

    clock, curve, step_times = 0.0, [], []
    for step in range(1, args.sampled_steps + 1):
        t = time.perf_counter()
        nodes, sub_ei = numpy_random_walk_subgraph(rowptr, col, ei, N, args.roots, args.walk_length, rng)
        local, yl = _sub_targets(d, nodes)
        h = forward(x_all[torch.from_numpy(nodes)], torch.from_numpy(sub_ei))
        loss = torch.nn.functional.cross_entropy(h[torch.from_numpy(local)], torch.from_numpy(yl))
        opt.zero_grad()
        loss.backward()
        opt.step()
        float(loss)
        dt = time.perf_counter() - t
        clock += dt
        step_times.append(dt)
        if step % args.eval_every == 0 or step == args.sampled_steps:
            with torch.no_grad():
                acc = float((forward(x_all, ei_all).argmax(1) == y_all)[test].float().mean())
            curve.append((step, clock, acc))
    return dict(curve=curve, step_times=step_times)


def run_tiletrain_sampled(args) -> dict:
    import tiletrain as tt
    import tiletrain.functional as F
    from tiletrain.geometric import GraphSAINTSampler
    from tiletrain.geometric.nn import GCNConv
    from tiletrain.trace import metrics, recording
    d = _graph(args)
    ref = _pyg_model(args, cached=False, hidden=args.sampled_hidden)
    dims = _dims(args, args.sampled_hidden)
    with tt.init(ncpu=args.threads, profile=True):
        convs = tt.nn.ModuleList([GCNConv(a, b) for a, b in zip(dims[:-1], dims[1:])])
        convs.load_state_dict(ref.state_dict())
        x = tt.from_numpy(d.x, (args.sampled_tile, args.features))
        opt = tt.optim.AdamW(convs.parameters(), lr=args.lr, weight_decay=0.0)
        sampler = GraphSAINTSampler(d, args.roots, kind="random_walk", walk_length=args.walk_length,
                                    num_steps=args.sampled_steps, in_flight=args.in_flight, seed=args.seed)

        def forward(h, e):
            for i, conv in enumerate(convs):
                h = conv(h, e)
                if i < len(convs) - 1:
                    h = F.relu(h)
            return h

        def train_step(sub):
            local, yl = _sub_targets(d, sub.node_idx)
            h = forward(tt.index_select(x, 0, sub.node_idx), sub.edge_index)
            loss = F.cross_entropy(tt.index_select(h, 0, local), tt.from_numpy(yl))
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        clock, curve, step_times = 0.0, [], []
        it = iter(sampler)
        for step in range(1, args.sampled_steps + 1):
            t = time.perf_counter()
            float(train_step(next(it)))
            tt.wait()
            dt = time.perf_counter() - t
            clock += dt
            step_times.append(dt)
            if step % args.eval_every == 0 or step == args.sampled_steps:
                pred = forward(x, d.edge_index).detach().numpy().argmax(1)
                curve.append((step, clock, float((pred == d.y)[d.test_mask].mean())))
        # the overlap: trace_steps steps submitted back to back (samples in flight), idle per worker
        trace_sampler = GraphSAINTSampler(d, args.roots, kind="random_walk", walk_length=args.walk_length,
                                          num_steps=args.trace_steps, in_flight=args.in_flight, seed=args.seed + 1)
        tt.wait()
        with recording() as rec:
            cpu = time.thread_time()  # the submitting thread's own CPU: what it takes from the workers' cores
            for sub in trace_sampler:
                train_step(sub)
            cpu = time.thread_time() - cpu
        m = metrics(rec.trace, args.threads)
        sample_us = float(rec.trace.duration[rec.trace.tasks["kernel"] == "saint_sample"].sum())
    return dict(curve=curve, step_times=step_times, idle=m.mean_idle_fraction, makespan_us=m.makespan_us,
                sample_us=sample_us, work_us=m.work_us, submit_cpu_us=cpu * 1e6, idle_causes=m.idle_causes)


def _time_to(curve, target):
    for step, clock, acc in curve:
        if acc >= target:
            return step, clock
    return None, None


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
    p.add_argument("--roots", type=int, default=6000,
                   help="sampled: random walks per subgraph (PyG's GraphSAINT example on Flickr, 89k nodes, "
                        "draws 6000 walks of length 2)")
    p.add_argument("--walk-length", type=int, default=2)
    p.add_argument("--sampled-hidden", type=int, default=256,
                   help="sampled: hidden width of the GCN (PyG's GraphSAINT example trains 256)")
    p.add_argument("--sampled-tile", type=int, default=4096,
                   help="sampled: rows per tile (a 6000-root subgraph has ~16,000 nodes: 4 tiles for 2 workers)")
    p.add_argument("--in-flight", type=int, default=2, help="sampled: samples submitted ahead (tiletrain)")
    p.add_argument("--sampled-steps", type=int, default=60)
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--trace-steps", type=int, default=30)
    p.add_argument("--skip-sampled", action="store_true")
    p.add_argument("--child", choices=list(CHILDREN), help=argparse.SUPPRESS)
    args = p.parse_args()
    for name in ("nodes", "classes", "features", "hidden", "layers", "epochs", "repeats", "threads", "tile", "roots",
                 "sampled_hidden", "sampled_tile", "in_flight", "sampled_steps", "eval_every", "trace_steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.child:
        print(json.dumps(CHILDREN[args.child](args)))
        return
    print(environment())
    res = {}
    for name in ("pyg", "tiletrain") + (() if args.skip_sampled else ("pyg_sampled", "tiletrain_sampled")):
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
    if args.skip_sampled:
        return
    full = ours["accs"][-1]
    target = 0.9 * full
    print(f"\nSampled training: GraphSAINT random walks ({args.roots} roots, length {args.walk_length}), GCN "
          f"{args.layers} layers (hidden {args.sampled_hidden}), {args.threads} workers, tile {args.sampled_tile} rows; target 90 % of the full-graph test accuracy {full:.3f} = {target:.3f}")
    rows = []
    for name, key in (("PyG GCNConv, NumPy sampler loop (serial)", "pyg_sampled"),
                      (f"tiletrain GCNConv, sampler tasks ({args.in_flight} in flight)", "tiletrain_sampled")):
        r = res[key]
        step, clock = _time_to(r["curve"], target)
        rows.append([name, "not reached" if step is None else f"{clock:.2f}", "-" if step is None else str(step),
                     f"{median(r['step_times']) * 1e3:.1f}", f"{r['curve'][-1][2]:.3f}",
                     f"{r['idle']:.3f}" if "idle" in r else "-"])
    print(table(["sampled training", "s to 90 %", "steps", "step ms (median)",
                 f"test acc after {args.sampled_steps} steps", "trace idle fraction"], rows))
    ts, ps = res["tiletrain_sampled"], res["pyg_sampled"]
    print(f"step time ratio (PyG / tiletrain): {median(ps['step_times']) / median(ts['step_times']):.2f}x; "
          f"accuracy difference (tiletrain - PyG): {100 * (ts['curve'][-1][2] - ps['curve'][-1][2]):+.1f} points; "
          f"trace over {args.trace_steps} steps: makespan {ts['makespan_us'] / 1e3:.1f} ms, sampler tasks "
          f"{ts['sample_us'] / 1e3:.1f} ms of {ts['work_us'] / 1e3:.1f} ms work, mean idle {ts['idle']:.3f}; "
          f"the submitting thread {ts['submit_cpu_us'] / 1e3 / args.trace_steps:.2f} ms CPU per step; idle by cause "
          f"(what a worker's next task waited for): " + ", ".join(f"{k} {v:.3f}" for k, v in ts["idle_causes"].items()))


CHILDREN = {"pyg": run_pyg, "tiletrain": run_tiletrain, "pyg_sampled": run_pyg_sampled,
            "tiletrain_sampled": run_tiletrain_sampled}

if __name__ == "__main__":
    main()
