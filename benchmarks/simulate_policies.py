"""Scheduling policies at scale, simulated: `tiletrain train`'s step (GPT 4x256, T=128, B=8:
the shapes `tiletrain machine calibrate` measured) on a node derived from `here` with 32 CPUs
and 4 GPUs (GPU kernels 20x a calibrated core, 16 GiB, 25 GB/s links), under dmda, lws and
tiletrain's tt-cp: simulated step time (makespan) and the idle fraction of each worker type
over the timed steps, with mean task times (a property of the models, not of random draws).
Needs the simulation flavour (make setup) and `tiletrain machine calibrate`.

    python benchmarks/simulate_policies.py [--scheds dmda lws tt-cp] [--cpus 32] [--gpus 4]
        [--gpu-speed 20] [--steps 2] [--warmup 1] [--out benchmarks/results]

Prints a table and writes simulate_policies.csv and .png under --out (gitignored).
"""
from __future__ import annotations

import argparse
import csv
import os
import shutil
import sys
import time

from tiletrain.sim import validate
from tiletrain.sim.machine import derive, list_machines

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import save_png  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scheds", nargs="+", default=["dmda", "lws", "tt-cp"])
    p.add_argument("--base", default="here")
    p.add_argument("--cpus", type=int, default=32)
    p.add_argument("--gpus", type=int, default=4)
    p.add_argument("--gpu-speed", type=float, default=20.0)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    a = p.parse_args()
    if a.base not in list_machines():
        print(f"no machine {a.base!r}: `tiletrain machine calibrate` first", file=sys.stderr)
        return 2
    name = f"{a.base}-policies-c{a.cpus}-g{a.gpus}"
    m = derive(name, a.base, cpus=a.cpus, gpus=a.gpus, gpu_speed=a.gpu_speed, gpu_memory=16 * 2**30,
               link_bandwidth_gbs=25.0, overwrite=True)
    print(f"# {name}: {m.cpus} CPUs + {m.gpus} GPUs (x{a.gpu_speed:g} of a calibrated core, 16 GiB, 25 GB/s), "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    rows = []
    print("| policy | simulated step (ms) | tokens/s | CPU idle | GPU idle | tasks on CPUs | tasks on GPUs |")
    print("|---|---|---|---|---|---|---|")
    try:
        for sched in a.scheds:
            t = time.monotonic()
            r = validate.simulate_bench(name, a.steps, a.warmup, sched, variance=False)
            busy, tasks = r["busy_by_kind"], r["tasks_by_kind"]
            row = {"sched": sched, "step_ms": 1e3 * r["seconds"] / r["steps"], "tokens_per_s": r["tokens_per_s"],
                   "cpu_idle": 1 - busy.get("cpu", 0.0), "gpu_idle": 1 - busy.get("cuda", 0.0),
                   "cpu_tasks": tasks.get("cpu", 0), "gpu_tasks": tasks.get("cuda", 0)}
            rows.append(row)
            print(f"| {sched} | {row['step_ms']:.1f} | {row['tokens_per_s']:.0f} | {100 * row['cpu_idle']:.0f} % | "
                  f"{100 * row['gpu_idle']:.0f} % | {row['cpu_tasks']} | {row['gpu_tasks']} |"
                  f"  <!-- {time.monotonic() - t:.0f} s real -->", flush=True)
    finally:
        shutil.rmtree(m.folder, ignore_errors=True)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "simulate_policies.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)

    def draw(axes):
        ax1, ax2 = axes
        xs = range(len(rows))
        ax1.bar(xs, [r["step_ms"] for r in rows])
        ax1.set_xticks(list(xs), [r["sched"] for r in rows])
        ax1.set_ylabel("simulated step (ms)")
        ax2.bar([x - 0.2 for x in xs], [100 * r["cpu_idle"] for r in rows], 0.4, label="CPU idle")
        ax2.bar([x + 0.2 for x in xs], [100 * r["gpu_idle"] for r in rows], 0.4, label="GPU idle")
        ax2.set_xticks(list(xs), [r["sched"] for r in rows])
        ax2.set_ylabel("idle %")
        ax2.legend()
    save_png(os.path.join(a.out, "simulate_policies.png"), draw, panels=2, size=(4.5, 3.5),
             title=f"GPT 4x256 step on {a.cpus} CPUs + {a.gpus} GPUs (simulated)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
