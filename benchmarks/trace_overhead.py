"""Cost of task recording: µs per task for a tensor op over many small tiles, with profiling
off, with StarPU profiling on but tiletrain's recording stopped, and with recording on
(records + DAG in C, completion callback per task).

  submit      the Python call (one C expander call submitting T tile tasks), wall time
  submit cpu  the same in CPU time of the submitting thread (less sensitive to other load)
  end-to-end  the call plus running every task and waiting (tiny kernels: overhead only)

The recording target is <= 1 µs per task beyond StarPU's own profiling cost: compare the
"profiling" and "recording" rows.  Medians over --reps, interleaving the three modes.

    python benchmarks/trace_overhead.py [--tiles-count 16384] [--sched lws] [--reps 9]
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import tiletrain as tt  # noqa: E402
from _common import environment, median, table  # noqa: E402


def measure(ntiles: int, tile: int, reps: int, sched: str, ncpu: int,
            mode: str) -> tuple[float, float, float]:
    x = np.arange(ntiles * tile, dtype=np.float32)
    sub, e2e, cpu = [], [], []
    with tt.init(ncpu=ncpu, sched=sched, profile=(mode != "off")):
        a = tt.from_numpy(x, tile)
        b = tt.from_numpy(x, tile)
        if mode == "profiling":
            tt.trace.stop()
        for rep in range(reps + 1):
            if mode == "recording":
                tt.trace.reset()  # keep the record buffer from growing across repetitions
            tt.wait()
            gc.collect()
            c0 = time.thread_time()
            t0 = time.perf_counter()
            c = tt.add(a, b)
            t1 = time.perf_counter()
            c1 = time.thread_time()
            tt.wait()
            t2 = time.perf_counter()
            if rep:
                sub.append((t1 - t0) / ntiles)
                e2e.append((t2 - t0) / ntiles)
                cpu.append((c1 - c0) / ntiles)
            del c
        if mode == "recording":
            tr = tt.trace.read()
            assert len(tr) == ntiles, (len(tr), ntiles)
        del a, b
    return median(sub), median(e2e), median(cpu)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiles-count", type=int, default=16384)
    p.add_argument("--tile", type=int, default=16)
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--rounds", type=int, default=3, help="rounds of the three modes (medians over rounds)")
    p.add_argument("--ncpu", type=int, default=os.cpu_count())
    p.add_argument("--sched", default="lws")
    args = p.parse_args()
    print(environment())
    print(f"add of two tensors with {args.tiles_count} tiles of {args.tile} float32, "
          f"{args.ncpu} CPU workers, "
          f"sched {args.sched}, {args.reps} repetitions x {args.rounds} rounds (medians)", flush=True)
    modes = ["off", "profiling", "recording"]
    res: dict[str, list[tuple[float, float, float]]] = {m: [] for m in modes}
    for _ in range(args.rounds):
        for m in modes:
            res[m].append(measure(args.tiles_count, args.tile, args.reps, args.sched, args.ncpu, m))
    rows = []
    base = {m: tuple(median([r[k] for r in res[m]]) for k in range(3)) for m in modes}
    p0 = base["profiling"]
    for m in modes:
        s, e, c = base[m]
        rows.append([m, f"{s * 1e6:.2f}", f"{c * 1e6:.2f}", f"{e * 1e6:.2f}", f"{(s - p0[0]) * 1e6:+.2f}",
                     f"{(c - p0[2]) * 1e6:+.2f}", f"{(e - p0[1]) * 1e6:+.2f}"])
    print()
    print(table(["mode", "submit us/task", "submit cpu us/task", "end-to-end us/task", "submit vs prof",
                 "cpu vs prof", "e2e vs prof"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
