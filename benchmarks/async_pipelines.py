"""Pipelines without a flush (issue 37): accuracy after a fixed budget of samples at 4 stages
for synchronous SGD, pipelined backpropagation (plain, SC, LWP, SC+LWP; stored and EMA
weights) and local learning; the weight memory of stored against reconstructed (EMA)
versions; and throughput -- measured idle fraction and samples/s -- of pb and local against
1F1B on the same (wider) model.  Medians over --reps seeds; each row's gap is against sync
measured with the same seed.

    python benchmarks/async_pipelines.py                      # 4 stages, 3 epochs, 3 seeds
    python benchmarks/async_pipelines.py --reps 5 --epochs 5 --out benchmarks/results

Prints two tables and writes async_pipelines.csv and .png under --out (gitignored).  Data:
scikit-learn's digits if installed, else the synthetic digits-like task
(tiletrain.experiments.async_pipelines.synthetic_digits).  Each run is a child process
(a fresh runtime with one worker per stage, profile=True for the idle fraction)."""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from _common import environment, median, table  # noqa: E402

ACCURACY = [("sync", "stored"), ("pb", "stored"), ("pb-sc", "stored"), ("pb-lwp", "stored"),
            ("pb-sc-lwp", "stored"), ("pb", "ema"), ("pb-sc", "ema"), ("local", "stored")]
THROUGHPUT = ["1f1b", "pb", "local"]


def synthetic_child(args) -> int:
    """pb, local and 1f1b on sleeping tasks (F = usec, B = 2 usec): what 2 cores can say
    about the bubble (shared/PIPELINE-NOTES.md) -- idle fraction, pb's steady-state idle,
    micro-batches per second."""
    import tiletrain as tt
    from tiletrain.pipeline import schedules
    from tiletrain.pipeline.enforce import compacted, run_synthetic
    from tiletrain.pipeline.schedule import Simulation
    out = {}
    with tt.init(ncpu=args.stages, profile=True):
        for name in THROUGHPUT:
            s = schedules.get(name, args.stages, args.syn_microbatches)
            rows = []
            for _ in range(args.reps):
                r = run_synthetic(s, args.usec)
                sim = Simulation(s, r.start, r.end, s.rank_of())
                c = compacted(r)
                rows.append({"idle": r.idle_fraction, "compacted": c.idle_fraction,
                             "steady": Simulation(s, c.start, c.end, s.rank_of()).steady_idle_fraction,
                             "per_s": s.microbatches / r.makespan_s})
            out[name] = {k: median([x[k] for x in rows]) for k in rows[0]}
            out[name]["formula"] = r.formula_idle_fraction
    print(json.dumps(out))
    return 0


def child(args) -> int:
    import numpy as np

    import tiletrain as tt
    from tiletrain.experiments.async_pipelines import run
    with tt.init(ncpu=args.stages, profile=True):
        r = run(args.method, stages=args.stages, epochs=args.epochs, seed=args.seed, microbatch=args.microbatch,
                weights=args.weights, width=args.width, samples=args.samples, flush_every=args.flush_every, lr=args.lr,
                warmup=args.warmup, dtype=np.float32)
    print(json.dumps({"accuracy": r.accuracy[-1], "idle": r.idle, "samples_per_s": r.samples_per_s,
                      "weight_memory": sum(r.weight_memory), "data": r.data}))
    return 0


def measure(args, method, weights, seed, width, microbatch, samples=None, epochs=None) -> dict:
    cmd = [sys.executable, __file__, "--child", method, "--weights", weights, "--seed", str(seed),
           "--stages", str(args.stages), "--epochs", str(epochs or args.epochs), "--width", str(width),
           "--microbatch", str(microbatch), "--flush-every", str(args.flush_every), "--lr", str(args.lr),
           "--warmup", str(args.warmup)]
    if samples:
        cmd += ["--samples", str(samples)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def plot(acc_rows, thr_rows, path) -> None:
    from matplotlib.figure import Figure
    fig = Figure(figsize=(10, 3.6))
    a, b = fig.subplots(1, 2)
    if not thr_rows:
        b.set_axis_off()
    if not acc_rows:
        a.set_axis_off()
    names = [r["method"] for r in acc_rows]
    a.barh(names, [r["accuracy"] for r in acc_rows], color="tab:blue")
    a.set_xlabel("held-out accuracy after the budget (median)")
    a.invert_yaxis()
    names = [r["method"] for r in thr_rows]
    b.bar(names, [r["samples_per_s"] for r in thr_rows], color="tab:green")
    b.set_ylabel("samples/s (median)")
    for i, r in enumerate(thr_rows):
        b.text(i, r["samples_per_s"], f"idle {r['idle']:.2f}", ha="center", va="bottom", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=3, help="the sample budget: this many epochs of the training split")
    ap.add_argument("--reps", type=int, default=3, help="seeds per row (medians)")
    ap.add_argument("--microbatch", type=int, default=16)
    ap.add_argument("--width", type=int, default=64, help="hidden width for the accuracy runs")
    ap.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (momentum 0.9), every method")
    ap.add_argument("--warmup", type=int, default=0, help="linear learning-rate warm-up over each stage's first "
                    "updates, every method (0: none)")
    ap.add_argument("--skip-throughput", action="store_true", help="the accuracy table only")
    ap.add_argument("--skip-accuracy", action="store_true", help="the throughput tables only")
    ap.add_argument("--thr-width", type=int, default=2048,
                    help="hidden width for the throughput runs (wide enough that a stage's products outlast their "
                         "submission: at 512 every schedule waits for the submitting thread)")
    ap.add_argument("--thr-microbatch", type=int, default=256)
    ap.add_argument("--thr-samples", type=int, default=256 * 24, help="training samples per throughput run")
    ap.add_argument("--flush-every", type=int, default=8, help="1f1b: micro-batches per step (one update)")
    ap.add_argument("--usec", type=float, default=5000.0, help="sleeping tasks: F time in microseconds (B = 2F)")
    ap.add_argument("--syn-microbatches", type=int, default=32)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--weights", default="stored", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--samples", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child == "synthetic":
        return synthetic_child(args)
    if args.child:
        args.method = args.child
        return child(args)
    if min(args.stages, args.epochs, args.reps, args.microbatch, args.width, args.thr_width) < 1 or args.warmup < 0:
        ap.error("every count must be >= 1 (--warmup >= 0)")
    print(environment(), flush=True)
    acc_rows = []
    sync = {}
    for method, weights in ([] if args.skip_accuracy else ACCURACY):
        runs = [measure(args, method, weights, seed, args.width, args.microbatch) for seed in range(args.reps)]
        if method == "sync":
            sync = {seed: r["accuracy"] for seed, r in enumerate(runs)}
        gaps = [100 * (r["accuracy"] - sync[seed]) for seed, r in enumerate(runs)]
        row = {"method": method + (" (ema)" if weights == "ema" else ""),
               "accuracy": median([r["accuracy"] for r in runs]),
               "gap_points": median(gaps), "weight_kib": median([r["weight_memory"] for r in runs]) / 1024,
               "data": runs[0]["data"]}
        acc_rows.append(row)
        seeds = " ".join(f"{r['accuracy']:.4f}" for r in runs)
        print(f"  {row['method']}: accuracy {row['accuracy']:.4f} (seeds {seeds}), gap {row['gap_points']:+.2f} "
              "points", flush=True)
    thr_rows = []
    for method in ([] if args.skip_throughput else THROUGHPUT):
        runs = [measure(args, method, "stored", seed, args.thr_width, args.thr_microbatch, samples=args.thr_samples,
                        epochs=1) for seed in range(args.reps)]
        thr_rows.append({"method": method, "idle": median([r["idle"] for r in runs]),
                         "samples_per_s": median([r["samples_per_s"] for r in runs])})
    syn = {}
    if not args.skip_throughput:
        cmd = [sys.executable, __file__, "--child", "synthetic", "--stages", str(args.stages), "--reps",
               str(args.reps), "--usec", str(args.usec), "--syn-microbatches", str(args.syn_microbatches)]
        done = subprocess.run(cmd, check=True, capture_output=True, text=True)
        syn = json.loads(done.stdout.strip().splitlines()[-1])
    for r in thr_rows:
        r["vs_1f1b"] = r["samples_per_s"] / thr_rows[0]["samples_per_s"]
    if acc_rows:
        print(f"\naccuracy after {args.epochs} epochs of {acc_rows[0]['data']}, {args.stages} stages, micro-batch "
              f"{args.microbatch}, width {args.width}, SGD lr {args.lr} momentum 0.9"
              + (f" (warm-up {args.warmup} updates)" if args.warmup else "") + f", medians of {args.reps} seeds "
              "(gap: points against sync, same seed)")
        print(table(["method", "accuracy", "gap (points)", "weight memory KiB"],
                    [[r["method"], f"{r['accuracy']:.4f}", f"{r['gap_points']:+.2f}", f"{r['weight_kib']:.1f}"]
                     for r in acc_rows]))
    if thr_rows:
        print(f"\nthroughput: width {args.thr_width}, micro-batch {args.thr_microbatch}, {args.thr_samples} samples, "
              f"{args.stages} stages on {args.stages} workers (1f1b: {args.flush_every} micro-batches per update); "
              f"idle measured from the trace")
        print(table(["method", "idle fraction", "samples/s", "vs 1f1b"],
                    [[r["method"], f"{r['idle']:.3f}", f"{r['samples_per_s']:.0f}", f"{r['vs_1f1b']:.2f}x"]
                     for r in thr_rows]))
    if syn:
        print(f"\nsleeping tasks (F = {args.usec:g} us, B = 2F), {args.stages} stages, {args.syn_microbatches} "
              f"micro-batches, one worker per stage: idle measured from the trace")
        print("(compacted: the same order and recorded task times without the gaps a loaded host adds; "
              "steady state: after the fill, before the drain, compacted)")
        print(table(["schedule", "idle fraction", "compacted", "formula", "steady-state idle", "micro-batches/s",
                     "vs 1f1b"],
                    [[k, f"{v['idle']:.3f}", f"{v['compacted']:.3f}", f"{v['formula']:.3f}", f"{v['steady']:.3f}",
                      f"{v['per_s']:.1f}", f"{v['per_s'] / syn['1f1b']['per_s']:.2f}x"] for k, v in syn.items()]))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "async_pipelines")
    with open(path + ".csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["table", "method", "accuracy", "gap_points", "weight_kib", "idle", "samples_per_s"])
        for r in acc_rows:
            w.writerow(["accuracy", r["method"], r["accuracy"], r["gap_points"], r["weight_kib"], "", ""])
        for r in thr_rows:
            w.writerow(["throughput", r["method"], "", "", "", r["idle"], r["samples_per_s"]])
        for k, v in syn.items():
            w.writerow(["sleeping tasks", k, "", "", "", v["idle"], v["per_s"]])
    plot(acc_rows, thr_rows, path + ".png")
    print(f"\nCSV and PNG: {path}.csv (.png)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
