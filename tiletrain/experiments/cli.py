"""`tiletrain trace ...` and `tiletrain bench sched` (registered by tiletrain/cli.py)."""
from __future__ import annotations

import os
import sys

import tiletrain as tt

from ..trace import format_metrics, gantt, load, metrics, recording, save
from ..trace.fxt import TILETRAIN_TRACE, compare, convert, task_counts
from . import pipeline as E
from .sweep import PRIORITY_MODES, format_table, run_sweep
from .workloads import WORKLOADS, make


def _params(items: list[str]) -> dict:
    out = {}
    for it in items or []:
        k, sep, v = it.partition("=")
        if not sep:
            raise ValueError(f"--param expects name=value, got {it!r}")
        try:
            out[k] = int(v)
        except ValueError:
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
    return out


def cmd_trace_run(args) -> int:

    fxt = {"fxt": True, "fxt_dir": args.fxt} if args.fxt else {}
    with tt.init(ncpu=args.ncpu, sched=args.sched, profile=True, **fxt) as rt:
        if args.fxt:
            rt.fxt_record(False)  # StarPU's FxT trace keeps only the recorded step (and start-up)
        wl = make(args.workload, args.tile, **_params(args.param))
        wl.setup()
        for _ in range(args.warmup):
            wl.step()
            tt.wait()
        if args.fxt:
            rt.fxt_record(True)
        with recording() as rec:
            wl.step()
        if args.fxt:
            rt.fxt_record(False)
        tr = rec.trace
        print(f"{wl.describe()}; sched {rt.sched}, {len(rt.workers())} workers")
        print(format_metrics(metrics(tr)))
        save(tr, args.output, flows=args.flows)
        print(f"trace: {args.output} (open in https://ui.perfetto.dev)")
        if args.fxt:
            save(tr, os.path.join(args.fxt, TILETRAIN_TRACE))
        if args.png:
            gantt(tr, args.png, title=f"{wl.describe()}, sched={rt.sched}")
            print(f"plot: {args.png}")
    if args.fxt:  # StarPU writes the FxT file at shutdown
        print(f"FxT: {args.fxt} (`tiletrain trace fxt {args.fxt}` converts it and compares the task counts)")
    return 0


def cmd_trace_fxt(args) -> int:
    written = convert(args.dir)
    print(f"starpu_fxt_tool wrote: {', '.join(os.path.basename(f) for f in written)} (in {args.dir}; "
          "paje.trace opens in ViTE)")
    fxt = task_counts(os.path.join(args.dir, "tasks.rec"))
    ours = args.trace or os.path.join(args.dir, TILETRAIN_TRACE)
    if not os.path.exists(ours):
        print(f"FxT: {sum(fxt.values())} tasks; no tiletrain trace to compare with ({ours}: `tiletrain trace run "
              f"--fxt {args.dir}` writes both)")
        for name, n in sorted(fxt.items()):
            print(f"  {name:<28} {n}")
        return 0
    tr = load(ours)
    rows, equal = compare(fxt, tr)
    print(f"{'kernel':<28} {'FxT (StarPU)':>12}  tiletrain ({os.path.basename(ours)})")
    for name, n_fxt, n_ours in rows:
        print(f"{name:<28} {n_fxt:>12}  {n_ours}")
    total = sum(r[1] for r in rows if not isinstance(r[2], str))
    print(f"task counts {'equal' if equal else 'DIFFER'}: FxT {total}, tiletrain {len(tr)}")
    return 0 if equal else 1


def cmd_trace_show(args) -> int:
    tr = load(args.file)
    print(f"{args.file}: {len(tr)} tasks, {len(tr.deps)} dependencies, sched {tr.meta.get('sched', '?')}")
    print(format_metrics(metrics(tr)))
    if args.png:
        gantt(tr, args.png)
        print(f"plot: {args.png}")
    return 0


def cmd_trace_pipeline(args) -> int:

    ps = args.p or [2, 4]
    rows = []
    for p in ps:
        with tt.init(ncpu=p, sched=args.sched, profile=True):
            if "a" in args.experiments:
                rows += E.gpipe_fill_drain(ps=(p,), ms=args.m, F=args.usec, B=args.usec, sleep=not args.busy)
            if "b" in args.experiments:
                rows += E.one_f_one_b(ps=(p,), ms=args.m, F=args.usec, B=args.usec, sleep=not args.busy)
            if "c" in args.experiments:
                u = args.usec * 2 / 3
                rows += E.zero_bubble(ps=(p,), m=max(args.m), F=u, B=u, W=u, sleep=not args.busy)
    print(E.format_rows(rows))
    return 0


def cmd_bench_sched(args) -> int:
    rows = run_sweep(args.workload, args.scheds, args.tiles, args.ncpu, args.prio, args.reps, args.calib,
                     _params(args.param), None if args.no_files else args.out)
    print()
    print(format_table(rows))
    if not args.no_files:
        print(f"\nCSV and PNG: {os.path.join(args.out, f'sched_{args.workload}.csv')} (.png)")
    return 0


def add_subcommands(sub, runtime_args) -> None:

    p = sub.add_parser("trace", help="record, view and measure task traces")
    tsub = p.add_subparsers(dest="trace_command", required=True)
    r = tsub.add_parser("run", help="record one step of a workload: Chrome/Perfetto JSON, metrics, Gantt PNG")
    runtime_args(r)
    r.add_argument("--workload", default="gemm", choices=list(WORKLOADS), help="what to run")
    r.add_argument("--tile", type=int, default=512, help="tile size")
    r.add_argument("--param", action="append",
                   help="workload parameter name=value (gemm: n; block: B T C heads; pipeline: p m usec)")
    r.add_argument("--warmup", type=int, default=2, help="steps before the recorded one")
    r.add_argument("-o", "--output", default="trace.json", help="Chrome/Perfetto trace file to write")
    r.add_argument("--png", default=None, help="also write a Gantt/utilisation PNG (needs matplotlib)")
    r.add_argument("--flows", action="store_true", help="draw the task DAG as flow arrows (large files)")
    r.add_argument("--fxt", default=None, metavar="DIR",
                   help="also write StarPU's FxT trace of the recorded step into DIR, with tiletrain's trace "
                        "beside it (a StarPU built with FxT; then `tiletrain trace fxt DIR`)")
    r.set_defaults(func=cmd_trace_run)
    f = tsub.add_parser("fxt", help="convert StarPU's FxT trace in DIR (starpu_fxt_tool) and compare its task "
                        "counts with tiletrain's trace of the same step")
    f.add_argument("dir", help="the fxt_dir of a run with fxt=True (TILETRAIN_FXT=1), e.g. `trace run --fxt DIR`")
    f.add_argument("--trace", default=None,
                   help="tiletrain's trace of the same tasks (default: DIR/tiletrain-trace.json when present)")
    f.set_defaults(func=cmd_trace_fxt)
    s = tsub.add_parser("show", help="metrics of a trace file (and optionally its Gantt PNG)")
    s.add_argument("file", help="a trace written by `tiletrain trace run`")
    s.add_argument("--png", default=None, help="also write a Gantt/utilisation PNG here")
    s.set_defaults(func=cmd_trace_show)
    pp = tsub.add_parser("pipeline",
                         help="pipeline experiments in miniature (GPipe, 1F1B, zero bubble) vs formulas")
    pp.add_argument("--sched", default="tt-cp", help="StarPU scheduling policy")
    pp.add_argument("--p", type=int, nargs="+", default=None, help="stages (= workers; default: 2 4)")
    pp.add_argument("--m", type=int, nargs="+", default=[1, 2, 4, 8], help="micro-batches")
    pp.add_argument("--usec", type=float, default=5000.0, help="F = B task time in microseconds")
    pp.add_argument("--busy", action="store_true", help="busy-wait instead of sleeping (p <= cores)")
    pp.add_argument("--experiments", default="abc", help="any of a (GPipe), b (1F1B), c (zero bubble)")
    pp.set_defaults(func=cmd_trace_pipeline)

    b = sub.add_parser("bench", help="benchmarks")
    bsub = b.add_subparsers(dest="bench_command", required=True)
    sc = bsub.add_parser("sched", help="policy x tile x workers x priority grid: table, CSV, PNG")
    sc.add_argument("--workload", default="gemm", choices=list(WORKLOADS), help="what to run")
    sc.add_argument("--scheds", nargs="+", default=["eager", "lws", "dmda", "tt-cp"], help="scheduling policies")
    sc.add_argument("--tiles", type=int, nargs="+", default=[256, 512], help="tile sizes")
    sc.add_argument("--ncpu", type=int, nargs="+", default=[os.cpu_count() or 2], help="CPU worker counts")
    sc.add_argument("--prio", nargs="+", default=["none"], choices=list(PRIORITY_MODES), help="task priority modes")
    sc.add_argument("--reps", type=int, default=5, help="measured repetitions per grid point (the median is kept)")
    sc.add_argument("--calib", type=int, default=3, help="perf-model calibration steps before measuring")
    sc.add_argument("--param", action="append", help="workload parameter name=value")
    sc.add_argument("--out", default=os.path.join("benchmarks", "results"), help="folder for the CSV and PNG")
    sc.add_argument("--no-files", action="store_true", help="print the table only (no CSV, no PNG)")
    sc.set_defaults(func=cmd_bench_sched)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: tiletrain trace ... | tiletrain bench sched ...")
