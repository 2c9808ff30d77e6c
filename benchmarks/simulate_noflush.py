"""Pipelines without a flush at 8 and 16 stages, simulated: pipelined backpropagation (``pb``)
and local learning (``local``, queue depth 2) against 1F1B on the same model, one stage per
simulated GPU (machines derived from a machine calibrated here: GPU kernels --gpu-speed
(default 1) x a calibrated core, 16 GiB, 25 GB/s links).  The model is the MLP of
benchmarks/async_pipelines.py's throughput rows, with balanced stages: every stage one width x
width Linear (width 512, micro-batch 64; the last stage's logits over width classes, the
local heads' over 10), as stage modules (--unbalanced: that benchmark's MLP itself, 64 inputs
and 10 classes, whose first and last stages cost a fraction of the others: idle that no
schedule removes);
each schedule steps m micro-batches with per-stage SGD optimizers (momentum 0.9;
ModelPipeline's ``optimizer=``: 1F1B updates every stage once after the step, pb and local
after every micro-batch).  What the issue's 4-stage targets ask, at more stages:

  idle fraction    of the stage GPUs over the step (simulated clock, from the trace)
  steady state     pb: between the moment every stage has started its first backward and the
                   moment the first stage has run out of forwards (target <= 0.05), and the
                   micro-batches finished per second in that window; per stage, the idle and
                   the task time per kernel in that window.  Stage 0 computes no input
                   gradient (its backward is one gemm where the others' is two), so it idles
                   by that much whatever the schedule: the table gives the idle of the other
                   stages and of the busiest stage (the one that sets the rate: its idle is
                   the throughput lost to waiting) beside the mean of all
  samples/s        samples per simulated second, and the ratio to 1F1B (local target >= 1.2x)

    python benchmarks/simulate_noflush.py [--gpus 8 16] [--m-per-stage 2] [--m-extra 2]
        [--width 512] [--batch 64] [--even-work] [--gpu-speed 1] [--out benchmarks/results]

One fresh simulated process per machine (SimGrid starts once per process); the step after
--warmup steps is timed on the simulated clock.  The submitting thread is free (as in
benchmarks/simulate_gpipe.py).  pb runs without SC/LWP (they change the numbers, not the
schedule; LWP adds a copy and an axpy per parameter tile and update).  --gpu-speed 1 makes a
GPU as fast as a calibrated core: stages compute-bound, as the schedules' formulas assume.
The calibration (a small GPT step, which makes the machine, then two real steps of each
schedule on 2 stages at the MLP's shapes) and the machines live in a temporary folder.
Prints a table, writes simulate_noflush.csv under --out (gitignored).
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import run_worker  # noqa: E402

SCHEDULES = ("1f1b", "pb", "local")


def _steady_window(tasks, stage_workers):
    """pb's steady state: (t0, t1) from the last first-backward start to the first last-forward
    end over the stage workers, or None when a stage has no forward or no backward or the
    window is empty."""
    t0, t1 = float("-inf"), float("inf")
    for w in stage_workers:
        mine = tasks[tasks["worker"] == w]
        bwd, fwd = mine[mine["phase"] == "bwd"], mine[mine["phase"] == "fwd"]
        if not len(bwd) or not len(fwd):
            return None
        t0, t1 = max(t0, float(bwd["start"].min())), min(t1, float(fwd["end"].max()))
    return (t0, t1) if t1 > t0 else None


def _steady_idle(tasks, stage_workers, per_stage: bool = False):
    """Idle fraction of the stage workers in the steady-state window (NaN without one);
    per_stage: the list of each stage worker's own."""
    import numpy as np
    window = _steady_window(tasks, stage_workers)
    if window is None:
        return [float("nan")] * len(stage_workers) if per_stage else float("nan")
    t0, t1 = window
    busy = []
    for w in stage_workers:
        mine = tasks[tasks["worker"] == w]
        busy.append(float(np.clip(np.minimum(mine["end"], t1) - np.maximum(mine["start"], t0), 0, None).sum()))
    if per_stage:
        return [1.0 - b / (t1 - t0) for b in busy]
    return 1.0 - sum(busy) / (len(stage_workers) * (t1 - t0))


def _steady_work(tasks, stage_workers) -> dict:
    """Per stage worker, the task time (us) per kernel and phase in the steady-state window
    (what makes one stage busier than another); empty without one."""
    window = _steady_window(tasks, stage_workers)
    if window is None:
        return {}
    t0, t1 = window
    out = {}
    for i, w in enumerate(stage_workers):
        mine = tasks[(tasks["worker"] == w) & (tasks["start"] >= t0) & (tasks["end"] <= t1)]
        d = {}
        for k, ph, dur in zip(mine["kernel"], mine["phase"], mine["end"] - mine["start"]):
            d[f"{k}/{ph}"] = d.get(f"{k}/{ph}", 0.0) + float(dur)
        out[str(i)] = {k: round(v) for k, v in sorted(d.items(), key=lambda kv: -kv[1])}
    return out


def _steady_rate(tasks, stage_workers) -> float:
    """Micro-batches per second finished in the steady-state window (a micro-batch finishes
    with its last backward task on stage 0); NaN without one."""
    import numpy as np
    window = _steady_window(tasks, stage_workers)
    if window is None:
        return float("nan")
    t0, t1 = window
    first = tasks[(tasks["worker"] == stage_workers[0]) & (tasks["phase"] == "bwd")]
    done = [float(first["end"][first["microbatch"] == j].max()) for j in np.unique(first["microbatch"])]
    n = sum(t0 < e <= t1 for e in done)
    return n / ((t1 - t0) / 1e6) if n else float("nan")


def _first_in(a) -> int:
    """The first stage's input width: width, or 1.5 x width with --even-work."""
    return a.width * 3 // 2 if a.even_work else a.width


def worker(a) -> None:
    """In a process (simulated, or real with --calibrate-only): every schedule, one JSON line each."""
    import numpy as np

    import tiletrain as tt
    from tiletrain import functional as F
    from tiletrain.experiments.async_pipelines import mlp_stages
    from tiletrain.nn import Linear, LocalHeads, ReLU, Sequential
    from tiletrain.optim import SGD
    from tiletrain.pipeline import schedules
    from tiletrain.pipeline.model import ModelPipeline
    from tiletrain.trace.records import recording

    if a.calibrate_only:
        rt = tt.init(ncpu=2, sched="dmdas", profile=True, calibrate=1)
        stage_workers = [[w.id] for w in rt.workers()][:2]
    else:
        rt = tt.init(sched=a.sched, profile=True)
        stage_workers = [[w.id] for w in rt.workers() if w.kind == "cuda"]
    p = len(stage_workers)
    m = a.m_per_stage * p + a.m_extra
    rng = np.random.default_rng(0)

    def loss_fn(logits, y):
        return F.cross_entropy(logits, tt.from_numpy(np.asarray(y, np.int64)))

    for name in a.schedules:
        s = schedules.get(name, p, m)
        if a.balanced:   # every stage one width x width Linear (the last one's logits: width classes)
            r = np.random.default_rng(0)
            stages = [Sequential(Linear(a.width, a.width, rng=r), ReLU()) for _ in range(p - 1)] \
                + [Linear(a.width, a.width, rng=r)]
            if a.even_work:  # stage 0's inputs 1.5x wider: its forward + weight gradient = 3 products
                stages[0] = Sequential(Linear(_first_in(a), a.width, rng=r), ReLU())
        else:
            stages = mlp_stages(p, a.width, seed=0)
        heads = LocalHeads([a.width] * (p - 1), 10, rng=np.random.default_rng(1)) if name == "local" else None
        pp = ModelPipeline(stages, s, "deps", workers=stage_workers, loss_fn=loss_fn, heads=heads,
                           optimizer=lambda ps, d: SGD(ps, lr=0.01, momentum=0.9, delay=d))
        for i in range(a.warmup + 1):
            tt.wait()
            xs = rng.normal(size=(m, a.batch, _first_in(a) if a.balanced else 64)).astype(np.float32)
            ys = rng.integers(0, 10, size=(m, a.batch))
            with recording() as rec:
                losses = pp.step(xs, ys).losses
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
               "on_stage_workers": int(len(mine)),
               "off_stage": {str(k): int(n) for k, n in zip(*np.unique(tasks[~np.isin(tasks["worker"], ws)]["kernel"],
                                                                     return_counts=True))},
               "steady_idle": _steady_idle(mine, ws) if name == "pb" else float("nan"),
               "steady_idle_per_stage": _steady_idle(mine, ws, per_stage=True) if name == "pb" else [],
               "steady_work_per_stage": _steady_work(mine, ws) if name == "pb" else {},
               "steady_samples_per_s": _steady_rate(mine, ws) * a.batch if name == "pb" else float("nan")}
        print("RESULT " + json.dumps(out), flush=True)
        del pp, stages
    tt.shutdown()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, nargs="+", default=[8, 16])
    p.add_argument("--m-per-stage", type=int, default=2, help="micro-batches per step: this many per stage ...")
    p.add_argument("--m-extra", type=int, default=2, help="... plus this many (2p+2: pb reaches its steady state "
                   "once m > 2(p-1))")
    p.add_argument("--width", type=int, default=512, help="the MLP's hidden width")
    p.add_argument("--batch", type=int, default=64, help="samples per micro-batch")
    p.add_argument("--unbalanced", dest="balanced", action="store_false",
                   help="the MLP as benchmarks/async_pipelines.py has it (64 inputs, 10 classes: the first and last "
                        "stages much cheaper than the others); default: every stage one width x width Linear")
    p.add_argument("--even-work", action="store_true",
                   help="balanced stages with equal work: stage 0 computes no input gradient (2 products per "
                        "micro-batch against the others' 3), so its inputs are made 1.5 x width wide (its forward "
                        "and weight gradient then cost the others' 3): the idle left is the schedule's, not the "
                        "partition's")
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
    if min(a.gpus) < 2 or a.m_per_stage < 1 or a.m_extra < 0 or min(a.width, a.batch) < 1:
        p.error("every --gpus value needs p >= 2; --m-per-stage, --width, --batch >= 1, --m-extra >= 0")
    if a.even_work and not a.balanced:
        p.error("--even-work evens the balanced stages' work; it does not go with --unbalanced")
    from tiletrain.config import machines_in
    from tiletrain.sim.calibrate import calibrate, calibration_env
    from tiletrain.sim.machine import derive, save

    def args_for(extra):
        return [sys.executable, os.path.abspath(__file__), "--worker", "--m-per-stage", str(a.m_per_stage),
                "--m-extra", str(a.m_extra), "--width", str(a.width), "--batch", str(a.batch),
                *([] if a.balanced else ["--unbalanced"]), *(["--even-work"] if a.even_work else []),
                "--sched", a.sched, "--warmup", str(a.warmup),
                "--schedules", *a.schedules, *extra]

    rows = []
    t_all = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tiletrain-noflush-") as tmp, machines_in(tmp):
        print(f"# calibrating here: the machine (a small GPT step), then the MLP (width {a.width}, micro-batch "
              f"{a.batch}) with each schedule ...", flush=True)
        calibrate("noflush-base", steps=10, sched="dmda", say=lambda s: None, n_layer=1, n_embd=64, batch=2,
                  seq_len=16)
        # the MLP's kernels at its shapes (and the per-stage updates', the local heads'), into its models
        env = calibration_env("noflush-base")
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
            got = run_worker(args_for([]), env, f"{g} GPUs")
            if got is None:
                return 1
            rows += got
            print(f"# {g} GPUs, m={got[0]['m']}: {time.monotonic() - t:.0f} s real, "
                  f"{sum(x['tasks'] for x in got)} tasks timed, "
                  + ", ".join(f"{x['schedule']} {x['tasks'] - x['on_stage_workers']} off the stage GPUs"
                              + (f" ({', '.join(f'{k} {n}' for k, n in sorted(x['off_stage'].items()))})"
                                 if x["off_stage"] else "") for x in got), flush=True)
    from tiletrain.pipeline.formulas import schedule_idle_fraction
    shape = f"{a.width}x{a.width} Linear per stage" if a.balanced else f"64-{a.width}x(p-1)-10, one Linear per stage"
    if a.even_work:
        shape += f", stage 0's {_first_in(a)}x{a.width} (equal work per stage)"
    print(f"\nMLP ({shape}), micro-batch {a.batch}, m = {a.m_per_stage} x stages "
          f"+ {a.m_extra}, {a.sched}, GPUs x{a.gpu_speed:g}, per-stage SGD (momentum 0.9), submitter free "
          f"({time.monotonic() - t_all:.0f} s real in all)\n")
    print("| GPUs p | m | schedule | simulated step (ms) | samples/s | vs 1F1B | idle | formula idle | "
          "pb steady-state idle | stages 1..p-1 | busiest stage | pb steady-state samples/s (vs 1F1B) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    ref = {(r["gpus"], r["m"]): r["samples_per_s"] for r in rows if r["schedule"] == "1f1b"}
    for r in rows:
        r["vs_1f1b"] = r["samples_per_s"] / ref[(r["gpus"], r["m"])] if (r["gpus"], r["m"]) in ref \
            else float("nan")
        r["formula_idle"] = schedule_idle_fraction(r["schedule"], r["gpus"], r["m"], 1.0, 2.0, 0.0)
        print(f"| {r['gpus']} | {r['m']} | {r['schedule']} | {1e3 * r['step_s']:.2f} | {r['samples_per_s']:.0f} | "
              f"{r['vs_1f1b']:.2f}x | {r['idle']:.3f} | {r['formula_idle']:.3f} | "
              + (f"{r['steady_idle']:.3f} | {sum(r['steady_idle_per_stage'][1:]) / (r['gpus'] - 1):.3f} | "
                 f"{min(r['steady_idle_per_stage']):.3f} | "
                 f"{r['steady_samples_per_s']:.0f} "
                 f"({r['steady_samples_per_s'] / ref[(r['gpus'], r['m'])]:.2f}x) |" if r["schedule"] == "pb"
                 else "| | | |"))
    for r in rows:
        if r["schedule"] == "pb" and r["steady_idle_per_stage"]:
            print(f"\npb steady state, {r['gpus']} GPUs, per stage: idle, then task time (ms) per kernel/phase")
            for i, idle in enumerate(r["steady_idle_per_stage"]):
                work = r["steady_work_per_stage"].get(str(i), {})
                print(f"  stage {i}: idle {idle:.3f}; " + ", ".join(f"{k} {v / 1e3:.1f}" for k, v in
                                                                   list(work.items())[:6]))
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
