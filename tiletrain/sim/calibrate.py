"""`tiletrain machine calibrate [--name here]`: measure, on this computer, the kernels a
training step runs at the tilings it runs them at, into the machine's perf models.

Each workload runs in a fresh process of the real flavour with StarPU calibrating
(STARPU_CALIBRATE=1, a dm-family policy) and its models and bus files going to the
machine's folder (STARPU_PERF_MODEL_DIR, STARPU_HOSTNAME = the machine's name).  StarPU
adds the new samples to those already there, so re-running refines the models.

Workloads now: `tiletrain train`'s step (GPT 4x256, T=128, B=8: forward, cross-entropy,
backward, gradient clipping, AdamW) and its validation forward (``--eval-every``), via
tiletrain/sim/bench.py.  A task of a kernel or tile
shape not measured here is named when a simulation meets it (tiletrain simulate's error).
"""
from __future__ import annotations

import datetime
import json
import os
import platform as _platform
import re
import subprocess
import sys
import time

from ..config import SIMULATE_ENV, check_machine_name
from . import machine as machines
from .machine import Machine, MachineError

# (label, tiletrain.sim.bench arguments)
WORKLOADS = [
    ("train-step gpt2 4x256 T=128 B=8", []),
]
MIN_SAMPLES = 10  # steps at least: samples of the shapes a step runs once


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _platform.processor() or "unknown CPU"


def _bench_args(sizes: dict) -> list[str]:
    out = []
    for key, value in sorted(sizes.items()):
        if key == "tiles":  # (B, T, C): `tiletrain train --tiles`
            out += ["--tiles", ",".join(str(int(v)) for v in value)]
            continue
        if key not in ("n_layer", "n_embd", "batch", "seq_len"):
            raise ValueError(f"calibrate: unknown size {key!r} (n_layer, n_embd, batch, seq_len, tiles)")
        out += [f"--{key.replace('_', '-')}", str(int(value))]
    return out


def calibration_env(name: str) -> dict[str, str]:
    """The environment of a process of the real flavour whose StarPU calibrates its kernels
    into machine ``name``'s models (``sampling/`` of its folder, host name ``name``): calibrate()
    runs its workloads in it, and a study adds its own kernels' shapes the same way."""
    env = dict(os.environ)
    env.pop(SIMULATE_ENV, None)  # the real flavour measures
    # every measurement counts: StarPU drops those more than 50 % from a shape's mean by default,
    # which on a busy computer (a worker preempted mid-task) kept the fast half only: measured
    # here, its models summed 4.2 s of task time where the trace of the same run had 10.5 s
    env.update(STARPU_PERF_MODEL_DIR=os.path.join(machines.machine_dir(name), "sampling"), STARPU_HOSTNAME=name,
               STARPU_HISTORY_MAX_ERROR="1000000")
    return env


def calibrate(name: str = "here", steps: int = 12, sched: str = "dmda", ncpu: int | None = None,
              say=lambda s: print(s, file=sys.stderr, flush=True), warmup: int = 0, **sizes) -> Machine:
    """Calibrate machine ``name`` (created if missing) on this computer; its Machine, whose
    ``calibration["measured"]`` holds each workload's tokens/s in this run.  ``sizes``
    (n_layer, n_embd, batch, seq_len, tiles) change the model from `tiletrain train`'s default (tests)."""
    check_machine_name(name)
    if steps + warmup < MIN_SAMPLES:
        raise ValueError(f"--steps must be at least {MIN_SAMPLES}: a step runs some kernels once, and the models of "
                         f"the shapes a step runs once need samples, got {steps}")
    folder = machines.machine_dir(name)
    old = None
    if os.path.isfile(os.path.join(folder, "machine.json")):
        old = machines.load(name)
        if old.kind != "calibrated":
            raise MachineError(f"machine {name!r} is derived from {old.derived_from!r}: it is not calibrated, it is "
                               f"generated (`tiletrain machine derive {name} --from {old.derived_from} --overwrite`)")
    sampling = os.path.join(folder, "sampling")
    os.makedirs(sampling, exist_ok=True)
    env = calibration_env(name)
    done = []
    measured = {}
    t0 = time.monotonic()
    for i, (label, extra) in enumerate(WORKLOADS, 1):
        say(f"calibrate {name} [{i}/{len(WORKLOADS)}] {label}: {steps} steps, sched {sched} "
            f"(models in {sampling})")
        cmd = [sys.executable, "-m", "tiletrain.sim.bench", "--steps", str(steps), "--warmup", str(warmup),
               "--sched", sched, "--calibrate", "--progress", "--json", *extra, *_bench_args(sizes)]
        if ncpu is not None:
            cmd += ["--ncpu", str(ncpu)]
        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"calibrating {label} failed (exit status {r.returncode}; its error is above)")
        res = json.loads(r.stdout.strip().splitlines()[-1])
        say(f"calibrate {name} [{i}/{len(WORKLOADS)}] {label}: {res['tokens_per_s']:.0f} tokens/s measured "
            f"({time.monotonic() - t0:.0f} s so far)")
        done.append(label)
        measured[label] = res
    xml = os.path.join(sampling, "bus", f"{name}.platform.v4.xml")
    if not os.path.isfile(xml):
        raise MachineError(f"StarPU wrote no platform file ({xml}) while calibrating")
    with open(xml) as f:
        cpus = len(re.findall(r'<host id="CPU\d+"', f.read()))
    prev = old.calibration if old else {}
    # the submitting thread's CPU time per task, averaged with the earlier runs
    submit = sum(v["submit_us_per_task"] for v in measured.values()) / len(measured)
    if old is not None and old.submit_us_per_task > 0:
        runs = int(prev.get("runs", 1))
        submit = (old.submit_us_per_task * runs + submit) / (runs + 1)
    m = Machine(name=name, kind="calibrated", cpus=cpus, submit_us_per_task=round(submit, 3),
                calibration={"runs": int(prev.get("runs", 0)) + 1,
                             "last": datetime.datetime.now().isoformat(timespec="seconds"),
                             "cpu": _cpu_model(), "sched": sched, "steps": steps,
                             "workloads": sorted(set(prev.get("workloads", [])) | set(done)),
                             "measured": {k: {"tokens_per_s": round(v["tokens_per_s"], 1),
                                              "busy_fraction": round(v["busy_fraction"], 3),
                                              "tasks_per_step": v["tasks_per_step"]} for k, v in measured.items()},
                             **({"sizes": sizes} if sizes else {})})
    machines.save(m)
    n = len(m.kernels())
    say(f"calibrate {name}: {n} kernels calibrated, {cpus} CPUs, in {time.monotonic() - t0:.0f} s "
        f"(`tiletrain machine show {name}`)")
    return m


__all__ = ["calibrate", "WORKLOADS", "MIN_SAMPLES"]
