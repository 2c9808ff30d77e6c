"""How close a simulation comes to the real run (tests/sim, benchmarks/simulate_validate.py).

``train_step``: one real run of `tiletrain train`'s step measures tokens/s *and* calibrates a
fresh machine with the durations of its own tasks (for a dm-family policy, the second of two
runs: the first one's placements explore empty models); the simulation of the same steps on that
machine then gives simulated tokens/s.  Calibrating and measuring in the same run keeps a
shared, noisy computer's drift between the two out of the comparison: what is left is the
simulator (dependencies, scheduling, the submitting thread, data movement).

``monotonic``: derived machines with more or faster CPUs must never simulate slower.

``schedules``: `tiletrain schedule run`'s synthetic pipelines on a simulated machine, whose
idle fractions must sit within 3 points of the schedules' formulas (their tasks take the time
their argument says: csrc/gen_kernels.py's TIMED_BY_ARG, nothing to calibrate).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from ..config import SIMULATE_ENV, machines_in, uses_perf_models
from .calibrate import WORKLOADS, _bench_args, calibrate
from .machine import derive


def _simulated_json(machine: str, cmd: list[str], what: str, timeout: float, **env_extra: str) -> tuple[dict, str]:
    """Run ``cmd`` in a fresh process simulating ``machine`` (no calibration variables of the
    caller's); its last stdout line as JSON and its stderr, or RuntimeError naming ``what``."""
    env = dict(os.environ, **{SIMULATE_ENV: machine}, **env_extra)
    for var in ("STARPU_PERF_MODEL_DIR", "STARPU_HOSTNAME", "STARPU_CALIBRATE"):
        env.pop(var, None)
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{what} failed ({r.returncode}): {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def simulate_bench(machine: str, steps: int, warmup: int, sched: str, timeout: float = 900, variance: bool = True,
                   **sizes) -> dict:
    """tiletrain.sim.bench's result on a simulated machine (a fresh process); ``variance``:
    task times drawn with their measured spread (else their means)."""
    cmd = [sys.executable, "-m", "tiletrain.sim.bench", "--steps", str(steps), "--warmup", str(warmup), "--sched",
           sched, "--json", *_bench_args(sizes)]
    out, err = _simulated_json(machine, cmd, f"the simulation of {machine}", timeout,
                               STARPU_SIMGRID_VARIANCE="1" if variance else "0")
    if "no calibrated time" in err:  # (a shape estimated from another size is not named there)
        raise RuntimeError(f"the simulation of {machine} met uncalibrated kernels: {err[-2000:]}")
    return out


def train_step(sched: str = "lws", steps: int = 10, warmup: int = 2, ncpu: int | None = None, say=None,
               **sizes) -> dict:
    """Measured vs simulated tokens/s of `tiletrain train`'s step (``sizes``: a smaller model)."""
    say = say or (lambda s: None)
    with tempfile.TemporaryDirectory(prefix="tiletrain-validate-") as tmp, machines_in(tmp):
        if uses_perf_models(sched):
            # a dm-family policy places the tasks of a first run by exploring models that are still
            # empty: measure the second run, which adds its samples to the first's
            calibrate("measured", steps=steps, sched=sched, ncpu=ncpu, say=say, warmup=warmup, **sizes)
        m = calibrate("measured", steps=steps, sched=sched, ncpu=ncpu, say=say, warmup=warmup, **sizes)
        real = m.calibration["measured"][WORKLOADS[0][0]]
        sim = simulate_bench("measured", steps, warmup, sched, **sizes)
    return {"sched": sched, "steps": steps, "real_tokens_per_s": real["tokens_per_s"],
            "simulated_tokens_per_s": sim["tokens_per_s"], "error": sim["tokens_per_s"] / real["tokens_per_s"] - 1.0,
            "real_busy_fraction": real["busy_fraction"], "simulated_busy_fraction": sim["busy_fraction"],
            "model": sim["model"], "cpus": m.cpus}


def monotonic(base: str = "here", cpus=(1, 2, 4, 8), speeds=(1.0, 2.0), sched: str = "lws", steps: int = 2,
              warmup: int = 1, say=None, keep: bool = False, jobs: int = 1, **sizes) -> list[dict]:
    """Simulated tokens/s on machines derived from ``base`` with each CPU count at each speed
    (removed afterwards unless ``keep``), with mean task times: a property of the models, not of
    the random draws.  ``jobs`` simulations run at a time (each is a process on the simulated
    clock: running them side by side changes no figure, only the real time taken)."""
    say = say or (lambda s: None)
    machines = [(n, speed, derive(f"{base}-c{n}-x{speed:g}", base, cpus=n, cpu_speed=speed, overwrite=True))
                for speed in speeds for n in cpus]

    def row(entry):
        n, speed, m = entry
        try:
            r = simulate_bench(m.name, steps, warmup, sched, variance=False, **sizes)
        finally:
            if not keep:
                shutil.rmtree(m.folder, ignore_errors=True)
        say(f"{m.name}: {r['tokens_per_s']:.0f} tokens/s simulated")
        return {"machine": m.name, "cpus": n, "cpu_speed": speed, "tokens_per_s": r["tokens_per_s"]}

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        return list(pool.map(row, machines))


def schedules(machine: str, names=("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-v", "dualpipe-v", "seq1f1b",
                                    "pb", "local"), stages: int = 4, microbatches: int = 8, timeout: float = 300) -> list[dict]:
    """`tiletrain schedule run NAME --stages S --microbatches M --json` simulated on ``machine``
    (one CPU per stage): the simulated idle fraction beside the schedule's formula."""
    rows = []
    for name in names:
        cmd = [sys.executable, "-m", "tiletrain", "schedule", "run", name, "--stages", str(stages), "--microbatches",
               str(microbatches), "--json"]
        d, _ = _simulated_json(machine, cmd, f"the simulated schedule {name} on {machine}", timeout)
        rows.append({"schedule": name, "stages": stages, "microbatches": microbatches, "idle": d["idle_fraction"],
                     "formula_idle": d["formula_idle_fraction"], "makespan_s": d["makespan_s"]})
    return rows


def is_monotonic(rows: list[dict], slack: float = 0.01) -> bool:
    """No machine with at least as many and at least as fast CPUs is slower (beyond ``slack``)."""
    return all(b["tokens_per_s"] >= a["tokens_per_s"] * (1 - slack)
               for a in rows for b in rows
               if b["cpus"] >= a["cpus"] and b["cpu_speed"] >= a["cpu_speed"])


__all__ = ["train_step", "monotonic", "is_monotonic", "schedules", "simulate_bench", "machines_in"]
