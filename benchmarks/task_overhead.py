"""Per-task overhead of a tensor op over many small tiles, from Python, per scheduler.

One Python call (tiletrain.add on tensors of T tiles of --tile elements) submits T tile
tasks through the C map expander.  Reported per task, medians over --reps:
  submit     the Python call: output tensor registration + T task submissions
  end-to-end the call plus running every task and waiting (tiny kernels: this is overhead)
  free       dropping the output tensor (asynchronous unregister of T handles: the Python call)
  free+wait  dropping it and the wait that follows (until StarPU has taken every unregistration)
TILETRAIN_ASYNC_FREE=0 unregisters on the caller's thread instead of the reaper thread.

    python benchmarks/task_overhead.py [--tiles-count 16384] [--scheds eager lws dmda]
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiles-count", type=int, default=16384, help="tiles per tensor")
    p.add_argument("--tile", type=int, default=16, help="elements per tile")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--ncpu", type=int, default=os.cpu_count())
    p.add_argument("--scheds", nargs="+", default=["eager", "lws", "dmda"])
    args = p.parse_args()
    ntiles, tile = args.tiles_count, args.tile
    print(environment())
    print(f"add of two tensors with {ntiles} tiles of {tile} float32 each, {args.ncpu} CPU workers, "
          f"{args.reps} repetitions (medians)", flush=True)
    x = np.arange(ntiles * tile, dtype=np.float32)
    rows = []
    for sched in args.scheds:
        sub, e2e, free, freew = [], [], [], []
        with tt.init(ncpu=args.ncpu, sched=sched, calibrate=None):
            a = tt.from_numpy(x, tile)
            b = tt.from_numpy(x, tile)
            c = tt.add(a, b)  # warm-up (and perf-model samples for dm* policies)
            tt.wait()
            del c
            gc.collect()
            tt.wait()
            for _ in range(args.reps):
                t0 = time.perf_counter()
                c = tt.add(a, b)
                t1 = time.perf_counter()
                tt.wait()
                t2 = time.perf_counter()
                del c
                t3 = time.perf_counter()
                tt.wait()
                t4 = time.perf_counter()
                sub.append((t1 - t0) / ntiles)
                e2e.append((t2 - t0) / ntiles)
                free.append((t3 - t2) / ntiles)
                freew.append((t4 - t2) / ntiles)
            check = tt.add(a, b).numpy()
            if not np.array_equal(check, 2 * x):
                print(f"{sched}: wrong result")
                return 1
            del a, b
        rows.append([sched, f"{median(sub) * 1e6:.2f}", f"{median(e2e) * 1e6:.2f}", f"{median(free) * 1e6:.2f}",
                     f"{median(freew) * 1e6:.2f}"])
        print(f"  {sched}: done", flush=True)
    print()
    print(table(["sched", "submit us/task", "end-to-end us/task", "free us/tile", "free+wait us/tile"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
