"""GPipe's scaling, simulated: a GPT whose blocks are split into p pipeline stages, one per
simulated GPU (machines derived from a machine calibrated here at the study's shapes: GPU
kernels --gpu-speed x a calibrated core, 16 GiB, 25 GB/s links), stepping m micro-batches with
the GPipe schedule (all forwards, then all backwards; tiletrain.pipeline.ModelPipeline, each
stage's tasks on its GPU).  The speedup over 1 GPU stepping the same m micro-batches is printed
beside GPipe's bound p * m / (m + p - 1) (the bubble: a stage idles p - 1 of every m + p - 1
micro-batch slots); GPipe's paper reports near-linear speedup when m >> p.

    python benchmarks/simulate_gpipe.py [--gpus 1 2 4 8] [--micro-batches 1 4 8 32] [--n-layer 24]
        [--n-embd 64] [--batch 2] [--seq-len 32] [--gpu-speed 20] [--out benchmarks/results]

One fresh simulated process per configuration (SimGrid starts once per process); the step after --warmup steps is timed on the
simulated clock (the optimizer step included).
The submitting thread is free by default (--charge-submission charges its calibrated CPU time
per task: with this study's small kernels, 20x faster on a GPU, one Python thread submitting
~30 us per task is the bottleneck and no pipeline speeds the step up).  Simulated cudaMalloc
costs are off (STARPU_SIMGRID_CUDA_MALLOC_COST=0): allocation is not what
GPipe measures.  The calibration (a few training steps of the same GPT at --batch) and the
machines live in a temporary folder.  Prints a table, writes simulate_gpipe.csv and .png under
--out (gitignored).
"""
from __future__ import annotations

import argparse
import dataclasses
import csv
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import run_worker, save_png  # noqa: E402


def worker(a) -> None:
    """In the simulated process: every m on this machine's GPUs, one JSON line each."""
    import numpy as np

    import tiletrain as tt
    from tiletrain.nn import GPT, GPTConfig
    from tiletrain.optim import AdamW
    from tiletrain.parallel import place, using
    from tiletrain.pipeline import schedules
    from tiletrain.pipeline.model import ModelPipeline, pipeline_plan

    rt = tt.init(sched=a.sched, profile=True)
    cuda = [w.id for w in rt.workers() if w.kind == "cuda"]
    p = len(cuda)
    cfg = GPTConfig(vocab_size=256, block_size=a.seq_len, n_layer=a.n_layer, n_head=4, n_embd=a.n_embd)
    rng = np.random.default_rng(0)

    for m in a.micro_batches:
        s = schedules.get("gpipe", p, m)
        model = GPT(cfg, seed=0)
        pl = place(model, pipeline_plan(model, s, world=1))
        opt = AdamW(model.parameters(), lr=1e-3)
        pp = ModelPipeline(model, s, "deps", workers=[[cuda[r]] for r in range(p)])
        t0 = None
        for i in range(a.warmup + 1):
            if i == a.warmup:
                tt.wait()
                t0 = tt.time()
            ids = [rng.integers(0, 256, size=(a.batch, a.seq_len + 1)) for _ in range(m)]
            with using(pl):
                losses = pp.step([x[:, :-1] for x in ids], [x[:, 1:] for x in ids]).losses
                opt.step()
                opt.zero_grad()
            for v in losses:
                float(v)
        tt.wait()
        step_s = tt.time() - t0
        print("RESULT " + json.dumps({"gpus": p, "m": m, "step_s": step_s}), flush=True)
        del pp, opt, model
    tt.shutdown()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--micro-batches", type=int, nargs="+", default=[1, 4, 8, 32])
    p.add_argument("--n-layer", type=int, default=24)
    p.add_argument("--n-embd", type=int, default=64)
    p.add_argument("--batch", type=int, default=2, help="sequences per micro-batch")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--gpu-speed", type=float, default=20.0)
    p.add_argument("--sched", default="dmdas", help="a policy with priorities (the schedule's order)")
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--charge-submission", action="store_true",
                   help="charge the submitting thread's calibrated CPU time per task (default: a free submitter)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    a = p.parse_args()
    if a.worker:
        worker(a)
        return 0
    if max(a.gpus) > a.n_layer:
        p.error(f"{max(a.gpus)} stages need at least as many blocks (--n-layer {a.n_layer})")
    from tiletrain.config import machines_in
    from tiletrain.pipeline.formulas import gpipe_idle_fraction
    from tiletrain.sim.calibrate import calibrate
    from tiletrain.sim.machine import derive, save

    rows = []
    t_all = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tiletrain-gpipe-") as tmp, machines_in(tmp):
        sizes = dict(n_layer=a.n_layer, n_embd=a.n_embd, batch=a.batch, seq_len=a.seq_len)
        print(f"# calibrating the GPT {a.n_layer}x{a.n_embd}, T={a.seq_len}, micro-batch {a.batch} here ...",
              flush=True)
        calibrate("gpipe-base", steps=10, sched="dmda", say=lambda s: None, **sizes)
        for g in a.gpus:
            name = f"gpipe-g{g}"
            dm = derive(name, "gpipe-base", gpus=g, gpu_speed=a.gpu_speed, gpu_memory=16 * 2**30,
                        link_bandwidth_gbs=25.0, overwrite=True)
            if not a.charge_submission:
                save(dataclasses.replace(dm, submit_us_per_task=0.0))
            env = dict(os.environ, TILETRAIN_SIMULATE=name, TILETRAIN_MACHINES=tmp, STARPU_SIMGRID_VARIANCE="0",
                       STARPU_SIMGRID_CUDA_MALLOC_COST="0")
            for m in a.micro_batches:
                cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--micro-batches", str(m),
                       "--n-layer", str(a.n_layer), "--n-embd", str(a.n_embd), "--batch", str(a.batch),
                       "--seq-len", str(a.seq_len), "--sched", a.sched, "--warmup", str(a.warmup)]
                t = time.monotonic()
                got = run_worker(cmd, env, f"{g} GPU(s), m={m}")
                if got is None:
                    return 1
                rows += got
                print(f"# {g} GPU(s), m={m}: {1e3 * got[0]['step_s']:.2f} ms simulated, "
                      f"{time.monotonic() - t:.0f} s real", flush=True)
    base = {r["m"]: r["step_s"] for r in rows if r["gpus"] == 1}
    print(f"\nGPT {a.n_layer}x{a.n_embd}, T={a.seq_len}, micro-batch {a.batch}, GPipe schedule, {a.sched}, GPUs "
          f"x{a.gpu_speed:g}, submitter {'charged' if a.charge_submission else 'free'} "
          f"({time.monotonic() - t_all:.0f} s real in all)\n")
    print("| GPUs p | m | simulated step (ms) | speedup over 1 GPU | GPipe bound p·m/(m+p-1) | ratio |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        g, m = r["gpus"], r["m"]
        r["speedup"] = base[m] / r["step_s"] if m in base else float("nan")
        r["bound"] = g * (1 - gpipe_idle_fraction(g, m)) if g > 1 else 1.0
        print(f"| {g} | {m} | {1e3 * r['step_s']:.2f} | {r['speedup']:.2f} | {r['bound']:.2f} | "
              f"{r['speedup'] / r['bound']:.2f} |")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "simulate_gpipe.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["gpus", "m", "step_s", "speedup", "bound"])
        w.writeheader()
        w.writerows(rows)

    def draw(axes):
        ax = axes[0]
        for m in a.micro_batches:
            pts = [r for r in rows if r["m"] == m]
            line, = ax.plot([r["gpus"] for r in pts], [r["speedup"] for r in pts], "o-", label=f"m={m}")
            ax.plot([r["gpus"] for r in pts], [r["bound"] for r in pts], "--", color=line.get_color(), alpha=0.5)
        ax.set_xlabel("simulated GPUs (pipeline stages)")
        ax.set_ylabel("speedup over 1 GPU")
        ax.set_title("GPipe, simulated (dashed: p·m/(m+p-1))")
        ax.legend()
    save_png(os.path.join(a.out, "simulate_gpipe.png"), draw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
