"""`tiletrain schedule show|run` (registered by tiletrain/cli.py)."""
from __future__ import annotations

import argparse
import json
import os

from ..runtime import init
from ..trace import save
from . import formulas, schedules
from .enforce import MECHANISMS, formula_idle_fraction, run_synthetic
from .schedule import Schedule
from .schedules import NAMES


def _int_at_least(low: int, what: str, why: str):
    """An argparse type: an integer >= ``low``, refused as "expected {what}, got ..." (or, for
    an integer below ``low``, ``why``)."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"{why}, got {v}")
        return v
    return parse


_positive = _int_at_least(1, "a positive integer", "expected a positive integer")
_depth = _int_at_least(0, "an integer >= 0", "the queue depth must be >= 0 (0: unbounded)")


def load(args):
    """The schedule named by args.schedule: a built-in name or a CSV file."""
    if args.schedule in schedules.NAMES:
        if args.stages is None or args.microbatches is None:
            raise ValueError(f"schedule {args.schedule!r}: --stages and --microbatches are required")
        return schedules.get(args.schedule, stages=args.stages, microbatches=args.microbatches,
                             virtual=args.virtual, chunks=args.chunks, queue=args.queue)
    if not args.schedule.endswith(".csv") and not os.path.exists(args.schedule):
        raise ValueError(f"unknown schedule {args.schedule!r}: a built-in ({', '.join(schedules.NAMES)}) "
                         "or a CSV file (PyTorch's layout: one row per rank)")
    s = Schedule.from_csv(args.schedule).validate()
    for opt, want, got in (("--stages", args.stages, s.ranks),
                           ("--microbatches", args.microbatches, s.microbatches)):
        if want is not None and want != got:
            raise ValueError(f"{opt} {want} does not match {args.schedule} ({got})")
    return s


def cmd_show(args) -> int:
    s = load(args)
    print(s.format())
    sim = s.simulate()
    print(f"unit-time simulation (F = I = W = 1, B = 2): makespan {sim.makespan:g}, idle fraction "
          f"{sim.idle_fraction:.4f} (formula {formula_idle_fraction(s):.4f}), peak activations "
          f"{sim.peak_activations:g} (micro-batches of a rank's layers)")
    if not s.flush:
        fill = f" (formula (p-1)F = {formulas.pb_fill(s.ranks):g})" if s.name == "pb" else ""
        print(f"no flush: fill {sim.fill:g} at the start{fill}, "
              f"steady-state idle fraction {sim.steady_idle_fraction:.4f}; weight delay per stage "
              f"{' '.join(map(str, s.delays()))}, stored weight versions per stage "
              f"{' '.join(map(str, s.kept_versions()))}")
    if s.local:
        print(f"local losses: a backward needs its own forward only; activation queue depth "
              f"{s.queue or 'unbounded'}")
    if args.csv:
        s.to_csv(args.csv)
        print(f"csv: {args.csv}")
    if args.trace:
        sim.save_chrome(args.trace)
        print(f"trace: {args.trace} (simulated; open in https://ui.perfetto.dev)")
    return 0


def _gpt_size(text: str) -> tuple[int, int]:
    try:
        layers, width = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--gpt: expected LAYERSxWIDTH such as 4x256, got {text!r}") from None
    if layers < 1 or width < 4 or width % 4:
        raise argparse.ArgumentTypeError(f"--gpt {text}: at least 1 layer and a width that is a multiple of 4")
    return layers, width


def cmd_run(args) -> int:
    s = load(args)
    with init(ncpu=s.ranks, sched=args.sched, profile=True):
        if args.gpt:   # a model is above this package: the runner comes from tiletrain/cli.py
            if args.gpt_runner is None:
                raise NotImplementedError("schedule run --gpt: no model runner was registered")
            r = args.gpt_runner(s, *args.gpt, batch=args.batch, seq_len=args.seq_len, mechanism=args.mechanism)
        else:
            r = run_synthetic(s, args.usec, args.mechanism, sleep=not args.busy)
        d = r.to_dict()
        if args.trace:
            save(r.trace, args.trace)
    if args.gpt:
        d.pop("task_us")
        d["model"] = f"gpt {args.gpt[0]}x{args.gpt[1]}, batch {args.batch} x {args.seq_len} per micro-batch"
    if not s.flush or s.local:
        sim = s.simulate()
        d["simulated_fill"] = sim.fill if not s.flush else None
        d["delays"] = s.delays()
        d["kept_versions"] = s.kept_versions()
        d["queue"] = s.queue if s.local else None
        d.update(_measured_fill(r) if not s.flush else {})
    if args.json:
        print(json.dumps(d))
        return 0
    order = "-" if d["order_fraction"] is None else f"{d['order_fraction']:.3f}"
    what = (f"the real {d['model']}, one worker group per rank" if args.gpt
            else f"tasks F = I = W = {args.usec:g} us (sleeping)")
    print(f"schedule {d['schedule']}: {d['stages']} stages, {d['microbatches']} micro-batches, mechanism "
          f"{d['mechanism']}, {what}")
    print(f"  makespan              {d['makespan_s']:.4f} s")
    print(f"  idle fraction         {d['idle_fraction']:.4f} (formula {d['formula_idle_fraction']:.4f}, "
          f"per stage {' '.join(f'{x:.3f}' for x in d['stage_idle'])})")
    print(f"  peak activations      {d['peak_activations']:g} (simulated {d['simulated_peak_activations']:g})")
    print(f"  schedule order kept   {order} of adjacent action pairs")
    if not s.flush:
        print(f"  fill at the start     {d['fill_s']:.4f} s measured, {d['steady_idle_fraction']:.4f} idle in "
              f"steady state (unit-time simulation: fill {d['simulated_fill']:g} F, steady 0)")
        print(f"  weight delay/versions {' '.join(map(str, d['delays']))} / "
              f"{' '.join(map(str, d['kept_versions']))} per stage")
    if args.trace:
        print(f"  trace: {args.trace}")
    return 0


def _measured_fill(run) -> dict:
    """A run's fill (mean wait of a rank before its first backward, less its forwards
    meanwhile, seconds) and steady-state idle fraction (Simulation's definitions on the
    measured times)."""
    from .schedule import Simulation
    sim = Simulation(run.schedule, run.start, run.end, run.schedule.rank_of())
    return {"fill_s": sim.fill / 1e6, "steady_idle_fraction": sim.steady_idle_fraction}


def add_subcommands(sub, gpt_runner=None) -> None:
    """``gpt_runner(schedule, layers, width, batch=, seq_len=, mechanism=)`` -> ScheduleRun runs
    ``schedule run --gpt`` (tiletrain.experiments.pipeline.gpt_schedule_run, above nn)."""
    p = sub.add_parser("schedule",
                       help="pipeline schedules as data: show the action table, run on synthetic tasks")
    ssub = p.add_subparsers(dest="schedule_command", required=True)

    def common(q):
        q.add_argument("schedule", help=f"built-in ({', '.join(NAMES)}) or a CSV file (one row per rank)")
        q.add_argument("--stages", type=_positive, default=None, help="pipeline stages (ranks)")
        q.add_argument("--microbatches", type=_positive, default=None)
        q.add_argument("--virtual", type=_positive, default=None, help="interleaved-1f1b: stages per rank (2)")
        q.add_argument("--chunks", type=_positive, default=None, help="seq1f1b: sequence chunks (2)")
        q.add_argument("--queue", type=_depth, default=None,
                       help="local: activation queue depth (2; 0 unbounded)")
        q.add_argument("--trace", default=None, help="write a Chrome trace (show: of the simulation)")

    sh = ssub.add_parser("show", help="print the action table and its unit-time simulation")
    common(sh)
    sh.add_argument("--csv", default=None, help="also write the schedule as CSV")
    sh.set_defaults(func=cmd_show)
    r = ssub.add_parser("run", help="run on sleeping synthetic tasks; measured idle fraction vs formula")
    common(r)
    r.add_argument("--usec", type=float, default=10000.0, help="F = I = W task time in microseconds (B = 2x)")
    r.add_argument("--mechanism", default="deps", choices=list(MECHANISMS),
                   help="how the order is enforced: submission order, + priorities, + ordering dependencies")
    r.add_argument("--sched", default="tt-cp",
                   help="StarPU policy (a priority policy for --mechanism priority)")
    r.add_argument("--busy", action="store_true", help="busy-wait instead of sleeping (stages <= cores)")
    r.add_argument("--json", action="store_true", help="print one JSON object")
    r.add_argument("--gpt", type=_gpt_size, default=None, metavar="LAYERSxWIDTH",
                   help="run on a real GPT (e.g. 4x256) in one process, each rank a worker group, instead of "
                        "synthetic tasks (action times: first start to last end of its tasks)")
    r.add_argument("--batch", type=_positive, default=2, help="--gpt: sequences per micro-batch")
    r.add_argument("--seq-len", type=_positive, default=128, help="--gpt: tokens per sequence")
    r.set_defaults(func=cmd_run, gpt_runner=gpt_runner)
