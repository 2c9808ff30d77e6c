"""`tiletrain simulate --machine NAME [--json] [--execute] -- PROGRAM [ARGS...]`: run a
program in a fresh process on a simulated machine and summarise what StarPU simulated.

The program runs unchanged: TILETRAIN_SIMULATE=NAME makes tiletrain load its simulation
flavour (tiletrain/_ffi.py), and tiletrain.config points StarPU at the machine's platform
and models (a copy, so that a simulation never changes the machine).  Kernels do not run
(values are meaningless) unless --execute (STARPU_SIMGRID_EXECUTE=1: right values, the
time still simulated).  At its end the simulation flavour writes the session's simulated time
and per-worker totals, and StarPU its bus statistics, to files this module reads; a task whose kernel or tile
shape the machine has no calibrated time for is listed by StarPU (scripts/starpu-patches/
simgrid/) and fails the run with the command that calibrates it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

from ..config import SIMULATE_ENV
from .machine import MachineError, load


class UncalibratedKernel(RuntimeError):
    """The simulated program ran a kernel (or a tile shape) the machine has no time for."""


@dataclass
class Summary:
    machine: str
    returncode: int
    simulated_s: float = 0.0
    tasks: int = 0
    workers: dict = field(default_factory=dict)  # kind -> {count, tasks, busy_fraction}
    idle_fraction: float = 0.0
    bytes_moved: dict = field(default_factory=dict)  # "src -> dst" -> bytes
    missing: list = field(default_factory=list)  # (kernel, arch, footprint, bytes): no time at all
    estimated: list = field(default_factory=list)  # shapes timed from the kernel's nearest calibrated size

    def to_json(self) -> dict:
        return {"machine": self.machine, "simulated_s": round(self.simulated_s, 6), "tasks": self.tasks,
                "workers": self.workers, "idle_fraction": round(self.idle_fraction, 4),
                "bytes_moved": self.bytes_moved}

    def format(self) -> str:
        lines = [f"simulated on {self.machine}: {self.simulated_s:.4f} s, {self.tasks} tasks"]
        for kind, w in sorted(self.workers.items()):
            lines.append(f"  {kind}: {w['count']} workers, {w['tasks']} tasks, busy {100 * w['busy_fraction']:.1f} %")
        if self.bytes_moved:
            for link, b in sorted(self.bytes_moved.items()):
                lines.append(f"  {link}: {b / 2**20:.1f} MiB moved")
        else:
            lines.append("  no data moved between memory nodes")
        if self.estimated:
            kernels = sorted({k.removeprefix("tiletrain_") for k, *_ in self.estimated})
            lines.append(f"  note: {len(self.estimated)} tile shape(s) not calibrated on this machine were timed from "
                         f"their kernel's nearest calibrated size (time proportional to bytes): {', '.join(kernels)}")
        return "\n".join(lines)


def parse_worker_stats(text: str) -> tuple[float, list[dict]]:
    """The simulation flavour's session totals (csrc/sim/sim_threads.c, TILETRAIN_SIM_STATS_FILE):
    the simulated seconds since starpu_init and, per worker, its kind, tasks and executing and
    sleeping seconds."""
    simulated, workers = 0.0, []
    for line in text.splitlines():
        f = line.rstrip("\n").split("\t")
        if f[0] == "simulated_us" and len(f) == 2:
            simulated = float(f[1]) / 1e6
        elif f[0] == "worker" and len(f) == 7:
            workers.append({"id": int(f[1]), "kind": f[2], "name": f[3], "tasks": int(f[4]),
                            "executing_s": float(f[5]) / 1e6, "sleeping_s": float(f[6]) / 1e6})
    return simulated, workers


def parse_bus_stats(text: str) -> dict[str, int]:
    """StarPU's STARPU_BUS_STATS summary: bytes per link (StarPU prints GB with 4 decimals)."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"\s*(.+?) -> (.+?)\t([\d.]+) GB", line)
        if m:
            b = int(float(m.group(3)) * 2**30)
            if b:
                out[f"{m.group(1).strip()} -> {m.group(2).strip()}"] = b
    return out


def summarise(machine: str, rc: int, workers_text: str, bus_text: str, missing_text: str) -> Summary:
    s = Summary(machine, rc)
    s.simulated_s, ws = parse_worker_stats(workers_text)
    if ws and s.simulated_s > 0:
        s.tasks = sum(w["tasks"] for w in ws)
        for kind in sorted({w["kind"] for w in ws}):
            mine = [w for w in ws if w["kind"] == kind]
            ex = sum(w["executing_s"] for w in mine)
            s.workers[kind] = {"count": len(mine), "tasks": sum(w["tasks"] for w in mine),
                               "busy_fraction": round(min(1.0, ex / (s.simulated_s * len(mine))), 4)}
        busy = sum(w["executing_s"] for w in ws)
        s.idle_fraction = max(0.0, 1.0 - busy / (s.simulated_s * len(ws)))
    s.bytes_moved = parse_bus_stats(bus_text)
    seen = set()
    for line in missing_text.splitlines():
        f = line.split("\t")
        if len(f) in (4, 5) and tuple(f[:3]) not in seen:
            seen.add(tuple(f[:3]))
            entry = (f[0], f[1], f[2], int(f[3]))
            (s.estimated if len(f) == 5 and f[4] == "estimated" else s.missing).append(entry)
    return s


def command_for(program: list[str]) -> list[str]:
    """The command that runs PROGRAM [ARGS...]: a .py file, `python ...` with this Python,
    `tiletrain ...` as this Python's `-m tiletrain`, anything else as given."""
    if not program:
        raise ValueError("no program to simulate: tiletrain simulate --machine NAME -- PROGRAM [ARGS...]")
    head = program[0]
    if head.endswith(".py"):
        return [sys.executable, *program]
    if head == "tiletrain":
        return [sys.executable, "-m", "tiletrain", *program[1:]]
    if head in ("python", "python3"):
        return [sys.executable, *program[1:]]
    if shutil.which(head) is None and not os.path.exists(head):
        raise ValueError(f"program {head!r} not found")
    return list(program)


def simulate(machine: str, program: list[str], execute: bool = False, timeout: float | None = None) -> Summary:
    """Run ``program`` on the simulated ``machine`` (a fresh process); its Summary.  Raises
    MachineError (unknown or malformed machine), UncalibratedKernel."""
    m = load(machine)
    if not m.kernels():
        raise MachineError(f"machine {machine!r} has no calibrated kernels: `tiletrain machine calibrate"
                           f"{'' if machine == 'here' else ' --name ' + machine}`")
    if execute and m.gpus:
        raise MachineError(f"--execute on {machine!r}: the simulation runs the kernels of CPU workers only, and this "
                           f"machine has {m.gpus} simulated GPU(s) whose tasks would leave wrong values; simulate "
                           f"without --execute, or on a machine without GPUs")
    cmd = command_for(program)
    with tempfile.TemporaryDirectory(prefix="tiletrain-sim-") as tmp:
        # the program simulates against a copy: StarPU may write its models back at the end
        shutil.copytree(m.folder, os.path.join(tmp, "machines", machine))
        files = {k: os.path.join(tmp, f"{k}.txt") for k in ("workers", "bus", "missing")}
        env = dict(os.environ)
        for var in ("STARPU_PERF_MODEL_DIR", "STARPU_HOSTNAME", "STARPU_CALIBRATE", "STARPU_NCUDA", "STARPU_NOPENCL"):
            env.pop(var, None)
        env.update({SIMULATE_ENV: machine, "TILETRAIN_MACHINES": os.path.join(tmp, "machines"),
                    "TILETRAIN_PROFILE": "1",
                    "TILETRAIN_SIM_STATS_FILE": files["workers"],
                    "STARPU_BUS_STATS": "1", "STARPU_BUS_STATS_FILE": files["bus"],
                    "STARPU_SIMGRID_MISSING_FILE": files["missing"],
                    "STARPU_SIMGRID_EXECUTE": "1" if execute else "0"})
        try:
            rc = subprocess.run(cmd, env=env, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the simulated program did not finish within {timeout:g} s") from None

        def read(k):
            return open(files[k]).read() if os.path.exists(files[k]) else ""

        s = summarise(machine, rc, read("workers"), read("bus"), read("missing"))
    if s.missing:
        names = sorted({k for k, *_ in s.missing})
        shown = "; ".join(f"{k} on {arch} ({size} bytes, footprint {fp})" for k, arch, fp, size in s.missing[:8])
        raise UncalibratedKernel(
            f"machine {machine!r} has no calibrated time for {len(s.missing)} kernel shape(s) of "
            f"{', '.join(n.removeprefix('tiletrain_') for n in names)}: {shown}"
            f"{' ...' if len(s.missing) > 8 else ''}. The simulated times are wrong; calibrate them on the "
            f"real machine: `tiletrain machine calibrate{'' if machine == 'here' else ' --name ' + machine}` "
            f"(it measures tiletrain train's step; a program with other shapes needs them measured: "
            f"docs/simulation.md)")
    return s


def main_simulate(machine: str, program: list[str], as_json: bool = False, execute: bool = False,
                  timeout: float | None = None) -> int:
    s = simulate(machine, program, execute=execute, timeout=timeout)
    print(s.format(), flush=True)
    if as_json:
        print(json.dumps(s.to_json()), flush=True)
    if s.returncode != 0:
        print(f"tiletrain simulate: the program exited with status {s.returncode}", file=sys.stderr)
    return s.returncode


__all__ = ["Summary", "UncalibratedKernel", "simulate", "summarise", "parse_worker_stats", "parse_bus_stats",
           "command_for", "main_simulate"]
