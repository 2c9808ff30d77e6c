"""Pipelines without a flush at 8 and 16 stages, simulated: pipelined backpropagation (``pb``)
and local learning (``local``, queue depth 2) against 1F1B on the same GPT, one stage per
simulated GPU (machines derived from a machine calibrated here at the study's shapes: GPU
kernels --gpu-speed (default 1) x a calibrated core, 16 GiB, 25 GB/s links).  Each schedule steps m
micro-batches with per-stage AdamW optimizers (tiletrain.pipeline.ModelPipeline's
``optimizer=``: 1F1B updates every stage once after the step, pb and local after every
micro-batch); what the issue's 4-stage targets ask, at more stages:

  idle fraction    of the stage GPUs over the step (simulated clock, from the trace)
  steady state     pb: between the moment every stage has started its first backward and the
                   moment the first stage has run out of forwards (target <= 0.05)
  samples/s        sequences per simulated second, and the ratio to 1F1B (local target >= 1.2x)

    python benchmarks/simulate_noflush.py [--gpus 8 16] [--m-per-stage 2] [--n-layer 16]
        [--m-extra 2] [--n-embd 64] [--batch 2] [--seq-len 32] [--gpu-speed 1] [--out benchmarks/results]

One fresh simulated process per machine (SimGrid starts once per process); the step after
--warmup steps is timed on the simulated clock.  The submitting thread is free (as in
benchmarks/simulate_gpipe.py: with these small kernels one Python thread submitting ~30 us per
task would be the bottleneck of every schedule).  pb runs without SC/LWP (they change the
numbers, not the schedule; LWP adds a copy and an axpy per parameter tile and update).  The
calibration (tiletrain's training step of the same GPT, then one real step of each schedule
on 2 stages for the kernels only they run: the stored weight versions' copies, the local
heads) and the machines live in a temporary folder.  Prints a table, writes
simulate_noflush.csv under --out (gitignored).
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time

SCHEDULES = ("1f1b", "pb", "local")


def _steady_idle(tasks, stage_workers) -> float:
    """pb's steady state: idle fraction of the stage workers between the last first-backward
    start and the first last-forward end (NaN when there is no such window)."""
    import numpy as np
    t0, t1 = -np.inf, np.inf
    for w in stage_workers:
        mine = tasks[tasks["worker"] == w]
        bwd = mine[mine["phase"] == "bwd"]
        fwd = mine[mine["phase"] == "fwd"]
        if not len(bwd) or not len(fwd):
            return float("nan")
        t0 = max(t0, float(bwd["start"].min()))
        t1 = min(t1, float(fwd["end"].max()))
    if t1 <= t0:
        return float("nan")
    busy = 0.0
    for w in stage_workers:
        mine = tasks[tasks["worker"] == w]
        busy += float(np.clip(np.minimum(mine["end"], t1) - np.maximum(mine["start"], t0), 0, None).sum())
    return 1.0 - busy / (len(stage_workers) * (t1 - t0))


def _steady_rate(tasks, stage_workers) -> float:
    """pb's steady state: micro-batches per second finished in the window of _steady_idle (a
    micro-batch finishes with its last backward task on stage 0)."""
    import numpy as np
    t0 = max(float(tasks[(tasks["worker"] == w) & (tasks["phase"] == "bwd")]["start"].min()) for w in stage_workers)
    t1 = min(float(tasks[(tasks["worker"] == w) & (tasks["phase"] == "fwd")]["end"].max()) for w in stage_workers)
    first = tasks[(tasks["worker"] == stage_workers[0]) & (tasks["phase"] == "bwd")]
    done = [float(first["end"][first["microbatch"] == j].max()) for j in np.unique(first["microbatch"])]
    n = sum(t0 < e <= t1 for e in done)
    return n / ((t1 - t0) / 1e6) if t1 > t0 and n else float("nan")


def worker(a) -> None:
    """In a process (simulated, or real with --calibrate-only): every schedule, one JSON line each."""
    import numpy as np

    import tiletrain as tt
    from tiletrain.nn import GPT, GPTConfig
    from tiletrain.optim import AdamW
    from tiletrain.parallel import place, using
    from tiletrain.pipeline import schedules
    from tiletrain.pipeline.model import ModelPipeline, pipeline_plan
    from tiletrain.trace.records import recording

    if a.calibrate_only:
        rt = tt.init(ncpu=2, sched="dmdas", profile=True, calibrate=1)
        stage_workers = [[w.id] for w in rt.workers()][:2]
    else:
        rt = tt.init(sched=a.sched, profile=True)
        stage_workers = [[w.id] for w in rt.workers() if w.kind == "cuda"]
    p = len(stage_workers)
    m = a.m_per_stage * p + a.m_extra
    cfg = GPTConfig(vocab_size=256, block_size=a.seq_len, n_layer=a.n_layer, n_head=4, n_embd=a.n_embd)
    rng = np.random.default_rng(0)

    for name in a.schedules:
        s = schedules.get(name, p, m)
        model = GPT(cfg, seed=0)
        pl = place(model, pipeline_plan(model, s, world=1))
        pp = ModelPipeline(model, s, "deps", workers=stage_workers,
                           optimizer=lambda ps, d: AdamW(ps, lr=1e-3, delay=d))
        for i in range(a.warmup + 1):
            tt.wait()
            ids = [rng.integers(0, 256, size=(a.batch, a.seq_len + 1)) for _ in range(m)]
            with recording() as rec, using(pl):
                losses = pp.step([x[:, :-1] for x in ids], [x[:, 1:] for x in ids]).losses
                for v in losses:
                    float(v)
                tt.wait()
        tasks = rec.trace.tasks
        ws = [w[0] for w in stage_workers]
        mine = tasks[np.isin(tasks["worker"], ws)]
        t0, t1 = float(mine["start"].min()), float(mine["end"].max())
        busy = [float((mine["end"] - mine["start"])[mine["worker"] == w].sum()) for w in ws]
        step_s = (t1 - t0) / 1e6
        out = {"gpus": p, "m": m, "schedule": name, "step_s": step_s, "samples_per_s": m * a.batch / step_s,
               "idle": float(np.mean([1 - b / (t1 - t0) for b in busy])), "tasks": int(len(tasks)),
               "steady_idle": _steady_idle(mine, ws) if name == "pb" else float("nan"),
               "steady_samples_per_s": _steady_rate(mine, ws) * a.batch if name == "pb" else float("nan"),
               "microbatch_ids": int(len(np.unique(mine["microbatch"]))),
               "phases": sorted(set(tasks["phase"].tolist()))}
        print("RESULT " + json.dumps(out), flush=True)
        del pp, model
    tt.shutdown()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, nargs="+", default=[8, 16])
    p.add_argument("--m-per-stage", type=int, default=2, help="micro-batches per step: this many per stage ...")
    p.add_argument("--m-extra", type=int, default=2, help="... plus this many (2p+2: pb reaches its steady state "
                   "once m > 2(p-1))")
    p.add_argument("--n-layer", type=int, default=16)
    p.add_argument("--n-embd", type=int, default=64)
    p.add_argument("--batch", type=int, default=2, help="sequences per micro-batch")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--gpu-speed", type=float, default=1.0,
                   help="a GPU kernel's speed relative to a calibrated core (1: compute-bound stages, as the "
                        "schedules' formulas assume; 20 makes these small kernels latency-bound)")
    p.add_argument("--sched", default="dmdas", help="a policy with priorities (the schedule's order)")
    p.add_argument("--warmup", type=int, default=0, help="untimed steps before the timed one")
    p.add_argument("--schedules", nargs="+", default=list(SCHEDULES), choices=SCHEDULES)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--calibrate-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    a = p.parse_args()
    if a.worker:
        worker(a)
        return 0
    if max(a.gpus) > a.n_layer or min(a.gpus) < 2 or a.m_per_stage < 1 or a.m_extra < 0:
        p.error(f"every --gpus value needs 2 <= p <= --n-layer ({a.n_layer}); --m-per-stage >= 1, --m-extra >= 0")
    from tiletrain.config import SIMULATE_ENV, machines_in
    from tiletrain.sim.calibrate import calibrate
    from tiletrain.sim.machine import derive, machine_dir, save

    def args_for(extra):
        return [sys.executable, os.path.abspath(__file__), "--worker", "--m-per-stage", str(a.m_per_stage),
                "--m-extra", str(a.m_extra), "--n-layer", str(a.n_layer), "--n-embd", str(a.n_embd),
                "--batch", str(a.batch), "--seq-len", str(a.seq_len), "--sched", a.sched, "--warmup", str(a.warmup),
                "--schedules", *a.schedules, *extra]

    rows = []
    t_all = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tiletrain-noflush-") as tmp, machines_in(tmp):
        sizes = dict(n_layer=a.n_layer, n_embd=a.n_embd, batch=a.batch, seq_len=a.seq_len)
        print(f"# calibrating the GPT {a.n_layer}x{a.n_embd}, T={a.seq_len}, micro-batch {a.batch} here ...",
              flush=True)
        calibrate("noflush-base", steps=10, sched="dmda", say=lambda s: None, **sizes)
        # the kernels only the per-stage updates and the local heads run, into the same models
        env = {k: v for k, v in os.environ.items() if k != SIMULATE_ENV}
        env.update(STARPU_PERF_MODEL_DIR=os.path.join(machine_dir("noflush-base"), "sampling"),
                   STARPU_HOSTNAME="noflush-base", STARPU_HISTORY_MAX_ERROR="1000000")
        for _ in range(2):
            r = subprocess.run(args_for(["--calibrate-only"]), env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                print(f"calibrating the schedules failed ({r.returncode}):\n{r.stderr[-3000:]}", file=sys.stderr)
                return 1
        print(f"# calibrated ({time.monotonic() - t_all:.0f} s)", flush=True)
        for g in a.gpus:
            name = f"noflush-g{g}"
            dm = derive(name, "noflush-base", gpus=g, gpu_speed=a.gpu_speed, gpu_memory=16 * 2**30,
                        link_bandwidth_gbs=25.0, overwrite=True)
            save(dataclasses.replace(dm, submit_us_per_task=0.0))
            env = dict(os.environ, TILETRAIN_SIMULATE=name, TILETRAIN_MACHINES=tmp, STARPU_SIMGRID_VARIANCE="0",
                       STARPU_SIMGRID_CUDA_MALLOC_COST="0")
            t = time.monotonic()
            r = subprocess.run(args_for([]), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                print(f"{g} GPUs: the simulated process failed ({r.returncode}):\n{r.stderr[-3000:]}",
                      file=sys.stderr)
                return 1
            got = [json.loads(line[7:]) for line in r.stdout.splitlines() if line.startswith("RESULT ")]
            rows += got
            print(f"# {g} GPUs, m={got[0]['m']}: {time.monotonic() - t:.0f} s real, "
                  f"{sum(x['tasks'] for x in got)} tasks timed", flush=True)
    from tiletrain.pipeline.formulas import schedule_idle_fraction
    print(f"\nGPT {a.n_layer}x{a.n_embd}, T={a.seq_len}, micro-batch {a.batch}, m = {a.m_per_stage} x stages + "
          f"{a.m_extra}, "
          f"{a.sched}, GPUs x{a.gpu_speed:g}, per-stage AdamW, submitter free "
          f"({time.monotonic() - t_all:.0f} s real in all)\n")
    print("| GPUs p | m | schedule | simulated step (ms) | samples/s | vs 1F1B | idle | formula idle | "
          "pb steady-state idle | pb steady-state samples/s (vs 1F1B) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ref = {(r["gpus"], r["m"]): r["samples_per_s"] for r in rows if r["schedule"] == "1f1b"}
    for r in rows:
        r["vs_1f1b"] = r["samples_per_s"] / ref[(r["gpus"], r["m"])] if (r["gpus"], r["m"]) in ref \
            else float("nan")
        r["formula_idle"] = schedule_idle_fraction(r["schedule"], r["gpus"], r["m"], 1.0, 2.0, 0.0)
        print(f"| {r['gpus']} | {r['m']} | {r['schedule']} | {1e3 * r['step_s']:.2f} | {r['samples_per_s']:.0f} | "
              f"{r['vs_1f1b']:.2f}x | {r['idle']:.3f} | {r['formula_idle']:.3f} | "
              + (f"{r['steady_idle']:.3f} | {r['steady_samples_per_s']:.0f} "
                 f"({r['steady_samples_per_s'] / ref[(r['gpus'], r['m'])]:.2f}x) |" if r["schedule"] == "pb"
                 else "| |"))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "simulate_noflush.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["gpus", "m", "schedule", "step_s", "samples_per_s", "vs_1f1b", "idle",
                                          "formula_idle", "steady_idle", "steady_samples_per_s"],
                           extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
