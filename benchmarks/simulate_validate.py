"""Simulated vs measured: `tiletrain train`'s step (GPT 4x256, T=128, B=8) measured on this
computer while its kernels are calibrated into a fresh machine, then simulated on that
machine (tiletrain/sim/validate.py); and machines derived from `here` with more and faster
CPUs, which must never simulate slower; and the pipeline schedules' idle fractions on a
derived machine with a CPU per stage against their formulas.  Needs the simulation flavour
(make setup) and, for the second and third tables, `tiletrain machine calibrate`.

    python benchmarks/simulate_validate.py [--scheds lws dmda] [--steps 8] [--cpus 1 2 4 8 16]
        [--stages 4] [--microbatches 8]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

from tiletrain.sim import validate
from tiletrain.sim.machine import list_machines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scheds", nargs="+", default=["lws", "dmda"])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--cpus", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--speeds", type=float, nargs="+", default=[1.0, 2.0])
    p.add_argument("--stages", type=int, default=4, help="the schedules' table: stages (simulated CPUs)")
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--json", help="also write the rows here")
    a = p.parse_args()
    load = os.getloadavg()[0]
    print(f"# load average {load:.1f} on {os.cpu_count()} cores at start")
    rows = []
    print("| policy | measured tokens/s | simulated tokens/s | error | measured busy | simulated busy |")
    print("|---|---|---|---|---|---|")
    for sched in a.scheds:
        t = time.monotonic()
        r = validate.train_step(sched, steps=a.steps, warmup=a.warmup)
        rows.append(r)
        print(f"| {sched} | {r['real_tokens_per_s']:.0f} | {r['simulated_tokens_per_s']:.0f} | {100 * r['error']:+.1f} % "
              f"| {100 * r['real_busy_fraction']:.0f} % | {100 * r['simulated_busy_fraction']:.0f} % |"
              f"  <!-- {time.monotonic() - t:.0f} s -->", flush=True)
    if "here" in list_machines():
        print()
        print("| CPUs | " + " | ".join(f"x{s:g} speed" for s in a.speeds) + " |")
        print("|---|" + "---|" * len(a.speeds))
        mono = validate.monotonic("here", cpus=tuple(a.cpus), speeds=tuple(a.speeds), steps=2, warmup=1)
        by = {(r["cpus"], r["cpu_speed"]): r["tokens_per_s"] for r in mono}
        for n in a.cpus:
            print(f"| {n} | " + " | ".join(f"{by[(n, s)]:.0f}" for s in a.speeds) + " |")
        print(f"monotonic: {validate.is_monotonic(mono)}")
        rows += mono
        # the pipeline schedules on sleeping tasks, one simulated CPU per stage
        from tiletrain.sim.machine import derive
        m = derive(f"here-c{a.stages}", "here", cpus=a.stages, overwrite=True)
        try:
            sched_rows = validate.schedules(m.name, stages=a.stages, microbatches=a.microbatches)
        finally:  # (as validate.monotonic removes its derived machines)
            shutil.rmtree(m.folder, ignore_errors=True)
        print(f"\n| schedule (p = {a.stages}, m = {a.microbatches}) | simulated idle | formula idle | difference |")
        print("|---|---|---|---|")
        for r in sched_rows:
            print(f"| {r['schedule']} | {r['idle']:.4f} | {r['formula_idle']:.4f} | "
                  f"{100 * (r['idle'] - r['formula_idle']):+.2f} points |")
        worst = max(abs(r["idle"] - r["formula_idle"]) for r in sched_rows)
        print(f"largest difference {100 * worst:.2f} points (target: within 3)")
        rows += sched_rows
    else:
        print("no machine 'here': `tiletrain machine calibrate` first for the derived-machine table", file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
