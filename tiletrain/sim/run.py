"""`tiletrain simulate --machine NAME [--json] [--execute] -- PROGRAM [ARGS...]`: run a
program in a fresh process on a simulated machine and summarise what StarPU simulated.

The program runs unchanged: TILETRAIN_SIMULATE=NAME makes tiletrain load its simulation
flavour (tiletrain/_ffi.py), and tiletrain.config points StarPU at the machine's platform
and models (a copy, so that a simulation never changes the machine).  Kernels do not run
(values are meaningless) unless --execute (STARPU_SIMGRID_EXECUTE=1: right values, the
time still simulated).  At its end StarPU writes its worker and bus statistics (simulated
times, since profiling is on) to files this module reads; a task whose kernel or tile
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
    missing: list = field(default_factory=list)  # (kernel, arch, footprint, bytes)

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
        return "\n".join(lines)


_KINDS = (("CUDA", "cuda"), ("OpenCL", "opencl"), ("CPU", "cpu"))


def parse_worker_stats(text: str) -> list[dict]:
    """StarPU's STARPU_WORKER_STATS summary: per worker name, tasks, total/executing/sleeping ms."""
    out = []
    cur = None
    for line in text.splitlines():
        if not line.strip() or line.startswith("#") or line.startswith("Worker stats") or line.startswith("Idle") \
                or line.startswith("Total energy"):
            continue
        if not line.startswith("\t"):
            cur = {"name": line.strip(), "tasks": 0, "total_ms": 0.0, "executing_ms": 0.0, "sleeping_ms": 0.0}
            cur["kind"] = next((k for prefix, k in _KINDS if cur["name"].startswith(prefix)), "other")
            out.append(cur)
            continue
        m = re.match(r"\s*(\d+) task\(s\)", line)
        if m and cur is not None:
            cur["tasks"] = int(m.group(1))
        m = re.match(r"\s*total: ([\d.]+) ms executing: ([\d.]+) ms sleeping: ([\d.]+) ms", line)
        if m and cur is not None:
            cur["total_ms"], cur["executing_ms"], cur["sleeping_ms"] = (float(x) for x in m.groups())
    return out


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
    ws = parse_worker_stats(workers_text)
    if ws:
        s.simulated_s = max(w["total_ms"] for w in ws) / 1e3
        s.tasks = sum(w["tasks"] for w in ws)
        busy = 0.0
        for kind in sorted({w["kind"] for w in ws}):
            mine = [w for w in ws if w["kind"] == kind]
            total = sum(w["total_ms"] for w in mine) or 1.0
            ex = sum(w["executing_ms"] for w in mine)
            busy += ex
            s.workers[kind] = {"count": len(mine), "tasks": sum(w["tasks"] for w in mine),
                               "busy_fraction": round(ex / total, 4)}
        total_all = sum(w["total_ms"] for w in ws) or 1.0
        s.idle_fraction = max(0.0, 1.0 - busy / total_all)
    s.bytes_moved = parse_bus_stats(bus_text)
    seen = set()
    for line in missing_text.splitlines():
        f = line.split("\t")
        if len(f) == 4 and tuple(f[:3]) not in seen:
            seen.add(tuple(f[:3]))
            s.missing.append((f[0], f[1], f[2], int(f[3])))
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
                    "STARPU_WORKER_STATS": "1", "STARPU_WORKER_STATS_FILE": files["workers"],
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
