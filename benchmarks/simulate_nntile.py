"""NNTile's headline, simulated: the largest GPT that trains on 8 simulated
GPUs when tiletrain spreads its tiles over the GPUs' memory and the host's (StarPU evicts what
does not fit a GPU to main memory and brings it back), against data-parallel replicas, where
every GPU must hold the whole training state and one micro-batch's activations.

By default on a scaled node: each GPU has --gpu-memory (default 256 MiB, not the claim's
16 GiB) and the GPT is 512 wide, so that the models around the limits simulate in about a
minute each.  At the claim's size (`--gpu-memory 16G --n-embd 4096 --tiles 4,128,4096`), tiles
as wide as the model keep a step's task count that of the scaled one (a simulation's real
time follows its tasks, not the sizes of its tiles); each depth then takes a few minutes.
What is compared is the ratio of the two limits, while the GPT's activations stay small beside
its state (B 8, T 128 here).

For each depth of a GPT of width --n-embd (AdamW), a fresh simulated process on the derived
node (GPUs --gpu-speed x a calibrated core, --gpu-memory each, 25 GB/s links; host memory
folded, as every simulation without --execute) runs three steps:
  1. creates AdamW's moments;
  2. measures what one replica holds (tiletrain's live tensor bytes after the forward, after
     the backward and after the update: weights, moments and activations or gradients);
     the largest of the three is a lower bound of a replica's need (gradients accumulate
     while activations are freed), so the data-parallel limit is if anything optimistic;
  3. is timed on the simulated clock (tiletrain.time()).
A depth trains on the node when the three steps complete; its replica fits one GPU when the
need is at most --gpu-memory.  The depths are --layers; the node's limit is not searched past
the deepest one (a lower bound of the ratio when every depth trains).

    python benchmarks/simulate_nntile.py [--layers 2 4 8 16 32] [--n-embd 512] [--tiles B,T,C] [--gpus 8]
        [--gpu-memory 256M] [--gpu-speed 20] [--out benchmarks/results]

Prints a table and the ratio, writes simulate_nntile.csv and .png under --out (gitignored).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import run_worker, save_png  # noqa: E402

from tiletrain.train import parse_tiles  # noqa: E402


def worker(a) -> None:
    """In the simulated process: three steps of the GPT a.n_layer x a.n_embd, one RESULT line."""
    import numpy as np

    import tiletrain as tt
    from tiletrain._ffi import lib
    from tiletrain.nn import GPT, GPTConfig, Tiling
    from tiletrain.optim import AdamW

    rt = tt.init(sched=a.sched)
    cfg = GPTConfig(vocab_size=256, block_size=a.seq_len, n_layer=a.n_layer, n_head=4, n_embd=a.n_embd)
    model = GPT(cfg, Tiling.from_tiles(a.tiles), seed=0)
    opt = AdamW(model.parameters(), lr=1e-4)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (a.batch, a.seq_len))
    y = np.roll(x, -1, axis=1)
    params = int(sum(p.numel() for p in model.parameters()))

    def live() -> int:
        tt.wait()
        return int(rt.memory()["live_tensor_bytes"])

    gpus = [n for n in range(lib.tt_nmemnodes()) if n != 0]  # node 0: main memory
    need, step_s, gpu_used = 0, 0.0, 0
    for step in range(3):
        t0 = tt.time()
        loss = model.loss(x, y)
        if step == 1:
            need = max(need, live())
        loss.backward()
        if step == 1:
            need = max(need, live())
        opt.step()
        opt.zero_grad()
        if step == 1:
            need = max(need, live())
        tt.wait()
        if step == 2:
            step_s = tt.time() - t0
            gpu_used = max(int(lib.tt_memory_used(n)) for n in gpus) if gpus else -1
    print("RESULT " + json.dumps({"n_layer": a.n_layer, "params": params, "state_bytes": 16 * params,
                                  "replica_bytes": need, "step_s": step_s, "gpu_used_bytes": gpu_used,
                                  "gpus": len(gpus)}), flush=True)
    tt.shutdown()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, nargs="+", default=[2, 4, 8, 16, 32], help="the GPT depths tried")
    p.add_argument("--n-layer", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--n-embd", type=int, default=512)
    p.add_argument("--tiles", type=parse_tiles, default=None,
                   help="tile sizes B,T,C (default: tiletrain's; at the claim's size, C = n_embd keeps the task count)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--gpu-memory", default="256M", help="memory per simulated GPU (the claim's node: 16G)")
    p.add_argument("--gpu-speed", type=float, default=20.0)
    p.add_argument("--sched", default="dmdas")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    a = p.parse_args()
    if a.worker:
        worker(a)
        return 0
    from tiletrain.config import machines_in, parse_bytes
    from tiletrain.sim.calibrate import calibrate
    from tiletrain.sim.machine import derive

    gpu_mem = parse_bytes(a.gpu_memory, "--gpu-memory")
    if a.gpus < 1 or min(a.layers) < 1:
        p.error("--gpus and every --layers value must be >= 1")
    rows = []
    t_all = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tiletrain-nntile-") as tmp, machines_in(tmp):
        print(f"# calibrating one block of the GPT (width {a.n_embd}, T={a.seq_len}, B={a.batch}, tiles "
              f"{','.join(map(str, a.tiles)) if a.tiles else 'default'}) here ...",
              flush=True)
        tiles = {"tiles": a.tiles} if a.tiles else {}
        calibrate("nntile-base", steps=10, sched="dmda", say=lambda s: None, n_layer=1, n_embd=a.n_embd,
                  batch=a.batch, seq_len=a.seq_len, **tiles)
        name = f"nntile-g{a.gpus}"
        derive(name, "nntile-base", gpus=a.gpus, gpu_speed=a.gpu_speed, gpu_memory=gpu_mem, link_bandwidth_gbs=25.0,
               overwrite=True)
        env = dict(os.environ, TILETRAIN_SIMULATE=name, TILETRAIN_MACHINES=tmp, STARPU_SIMGRID_VARIANCE="0",
                   STARPU_SIMGRID_CUDA_MALLOC_COST="0")
        for n in a.layers:
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--n-layer", str(n), "--n-embd",
                   str(a.n_embd), "--batch", str(a.batch), "--seq-len", str(a.seq_len), "--sched", a.sched]
            if a.tiles:
                cmd += ["--tiles", ",".join(map(str, a.tiles))]
            t = time.monotonic()
            got = run_worker(cmd, env, f"GPT {n}x{a.n_embd} on {a.gpus} simulated GPUs")
            row = got[0] if got else {"n_layer": n, "params": None, "failed": True}
            rows.append(row)
            said = (f": {row['params'] / 1e6:.1f}M parameters, a replica needs {row['replica_bytes'] / 2**20:,.0f} MiB, "
                    f"simulated step {1e3 * row['step_s']:.1f} ms" if got else "")
            print(f"# {n} layers: {'trained' if got else 'FAILED'}, {time.monotonic() - t:.0f} s real{said}", flush=True)
    ok = [r for r in rows if not r.get("failed")]
    dp = [r for r in ok if r["replica_bytes"] <= gpu_mem]
    mib = 2 ** 20
    print(f"\nGPT Lx{a.n_embd}, B={a.batch}, T={a.seq_len}, AdamW; node: {a.gpus} simulated GPUs of "
          f"{gpu_mem / mib:.0f} MiB (x{a.gpu_speed:g} a calibrated core, 25 GB/s), host memory unbounded "
          f"({time.monotonic() - t_all:.0f} s real in all)\n")
    print("| layers | parameters (M) | training state (MiB) | one replica needs >= (MiB) | replica fits one GPU | "
          f"trains on the {a.gpus}-GPU node | simulated step (ms) | most used on a GPU (MiB) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r.get("failed"):
            print(f"| {r['n_layer']} | | | | | **no** | | |")
            continue
        print(f"| {r['n_layer']} | {r['params'] / 1e6:.1f} | {r['state_bytes'] / mib:.0f} | "
              f"{r['replica_bytes'] / mib:.0f} | {'yes' if r['replica_bytes'] <= gpu_mem else 'no'} | yes | "
              f"{1e3 * r['step_s']:.1f} | {r['gpu_used_bytes'] / mib:.0f} |")
    if dp and ok:
        big_dp, big_tt = max(dp, key=lambda r: r["params"]), max(ok, key=lambda r: r["params"])
        bound = " (a lower bound: the deepest depth tried trained)" if big_tt is ok[-1] and \
            len(ok) == len(rows) else ""
        print(f"\nlargest trained with tiletrain: {big_tt['params'] / 1e6:.1f}M parameters ({big_tt['n_layer']} "
              f"layers); largest whose replica fits one GPU: {big_dp['params'] / 1e6:.1f}M ({big_dp['n_layer']} "
              f"layers); ratio {big_tt['params'] / big_dp['params']:.1f}x{bound} (NNTile's claim: 4x)")
    else:
        print("\nno ratio: " + ("no depth's replica fits one GPU (try smaller --layers)" if ok else
                                "no depth trained"))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "simulate_nntile.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["n_layer", "params", "state_bytes", "replica_bytes", "step_s",
                                          "gpu_used_bytes", "gpus", "failed"])
        w.writeheader()
        w.writerows(rows)

    def draw(axes):
        ax = axes[0]
        ax.plot([r["params"] / 1e6 for r in ok], [1e3 * r["step_s"] for r in ok], "o-", label=f"{a.gpus} GPUs")
        if dp:
            ax.axvline(max(r["params"] for r in dp) / 1e6, ls="--", color="gray",
                       label="largest replica fitting one GPU")
        ax.set_xlabel("GPT parameters (M)")
        ax.set_ylabel("simulated step (ms)")
        ax.set_title(f"Largest GPT on {a.gpus} x {gpu_mem / mib:.0f} MiB GPUs, simulated")
        ax.legend()
    save_png(os.path.join(a.out, "simulate_nntile.png"), draw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
