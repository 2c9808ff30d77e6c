"""`tiletrain machine calibrate|derive|list|show` and `tiletrain simulate` (wired by tiletrain/cli.py)."""
from __future__ import annotations

import argparse

from ..config import parse_bytes
from .calibrate import calibrate
from .machine import describe, derive, list_machines, load
from .run import main_simulate


def cmd_machine(args) -> int:
    if args.machine_command == "calibrate":
        calibrate(args.name, steps=args.steps, sched=args.sched, ncpu=args.ncpu)
    elif args.machine_command == "derive":
        mem = None if args.gpu_memory is None else parse_bytes(args.gpu_memory, "--gpu-memory")
        m = derive(args.name, args.base, cpus=args.cpus, cpu_speed=args.cpu_speed, gpus=args.gpus,
                   gpu_speed=args.gpu_speed, gpu_memory=mem, link_bandwidth_gbs=args.link_bandwidth,
                   link_latency_us=args.link_latency, chiplets=args.chiplets, chiplet_link_gbs=args.chiplet_link,
                   overwrite=args.overwrite)
        kind = "chiplets" if m.chiplets else "GPUs"
        gpus = f", {m.gpus} {kind} at x{m.gpu_speed:g}" if m.gpus else ""
        print(describe(m).splitlines()[0] + f": {m.cpus} CPUs at x{m.cpu_speed:g}{gpus}, {len(m.kernels())} kernels")
    elif args.machine_command == "list":
        for name in list_machines():
            m = load(name)
            print(f"{name}\t{m.kind}\t{m.cpus} CPUs\tx{m.cpu_speed:g}\t{m.gpus} GPUs\t{len(m.kernels())} kernels")
    else:
        print(describe(load(args.name)))
    return 0


def cmd_simulate(args) -> int:
    program = list(args.program)
    if program and program[0] == "--":
        program = program[1:]
    return main_simulate(args.machine, program, as_json=args.json, execute=args.execute, timeout=args.timeout)


def add_subcommands(sub) -> None:
    p = sub.add_parser("machine", help="simulated machines: calibrate this one, derive what-if ones, list, show "
                                       "(docs/simulation.md)")
    msub = p.add_subparsers(dest="machine_command", required=True)
    c = msub.add_parser("calibrate", help="measure the kernels of tiletrain train's step on this computer into a "
                                          "machine's perf models (re-running adds samples)")
    c.add_argument("--name", default="here", help="the machine's name")
    c.add_argument("--steps", type=int, default=12, help="training steps to measure (>= 10)")
    c.add_argument("--sched", default="dmda", help="a dm-family policy (it records every kernel's time)")
    c.add_argument("--ncpu", type=int, default=None, help="CPU workers (default: all cores)")
    d = msub.add_parser("derive", help="a what-if machine from a calibrated one: generated platform, scaled models")
    d.add_argument("name", help="the new machine's name")
    d.add_argument("--from", dest="base", default="here", help="the machine it derives from")
    d.add_argument("--cpus", type=int, default=None, help="CPU workers (default: the base's)")
    d.add_argument("--cpu-speed", type=float, default=None,
                   help="CPU kernel speed relative to the base: every CPU kernel time / X (default 1)")
    d.add_argument("--gpus", type=int, default=None, help="simulated CUDA devices (default: the base's; up to 16)")
    d.add_argument("--gpu-speed", type=float, default=None,
                   help="a GPU kernel's time = the calibrated CPU core's / X (default 20)")
    d.add_argument("--gpu-memory", default=None, help="memory per GPU, e.g. 16G (default 16G)")
    d.add_argument("--link-bandwidth", type=float, default=None, help="GB/s each way per GPU link (default 25)")
    d.add_argument("--link-latency", type=float, default=None, help="us per transfer (default 10)")
    d.add_argument("--chiplets", type=int, default=None,
                   help="accelerator chiplets (up to 16), each a simulated device of its own (--gpu-speed, "
                        "--gpu-memory, --link-latency are each chiplet's); instead of --gpus")
    d.add_argument("--chiplet-link", type=float, default=None,
                   help="GB/s each way of each chiplet's link to the package's memory (with --chiplets)")
    d.add_argument("--overwrite", action="store_true", help="replace a machine of that name")
    msub.add_parser("list", help="the machines and their devices")
    s = msub.add_parser("show", help="a machine's devices, links and calibrated kernels")
    s.add_argument("name")
    p.set_defaults(func=cmd_machine)

    p = sub.add_parser("simulate", help="run a program on a simulated machine (fresh process) and summarise "
                                        "the simulated time",
                       usage="tiletrain simulate --machine NAME [--json] [--execute] -- PROGRAM [ARGS...]")
    p.add_argument("--machine", required=True, help="a machine (tiletrain machine list)")
    p.add_argument("--json", action="store_true", help="end with one JSON line: machine, simulated_s, tasks, "
                                                       "workers, idle_fraction, bytes_moved")
    p.add_argument("--execute", action="store_true", help="run the kernels too (right values; small programs)")
    p.add_argument("--timeout", type=float, default=None, help="stop the program after this many seconds (real time)")
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- PROGRAM [ARGS...]: a .py file, `tiletrain ...` or "
                                                             "a command")
    p.set_defaults(func=cmd_simulate)


__all__ = ["add_subcommands"]
