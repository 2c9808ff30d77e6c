"""Tiled float32 matmul against numpy.matmul on the same cores.

tiletrain: ncpu workers, single-threaded BLAS per tile task.  NumPy: one BLAS call with
ncpu threads, measured while the StarPU runtime is shut down (so idle workers cannot
steal its cores).  Inputs are tiled before timing; the timed part is submit + wait.  Each
repetition starts a fresh runtime and times the product twice per tile size: "cold", the
first product of that runtime (StarPU allocates every output tile, page faults included),
then the product again (the freed tiles' memory reused, as from a training loop's second
step on).  Prints GFLOP/s medians over --reps repetitions and the ratios tiletrain / NumPy.

    python benchmarks/matmul.py [--n 4096] [--tiles 256 512 1024] [--reps 5]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, os.path.dirname(__file__))
import tiletrain as tt  # noqa: E402
from _common import environment, median, table  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--tiles", type=int, nargs="+", default=[256, 512, 1024])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--ncpu", type=int, default=os.cpu_count())
    p.add_argument("--sched", default=None)
    args = p.parse_args()
    n = args.n
    flops = 2.0 * n ** 3
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    print(environment())
    print(f"matmul {n}x{n} float32, {args.ncpu} cores, {args.reps} repetitions (medians)", flush=True)

    np_times: list[float] = []
    tt_times: dict[int, list[float]] = {t: [] for t in args.tiles}
    cold_times: dict[int, list[float]] = {t: [] for t in args.tiles}
    ref = None
    for rep in range(args.reps):
        with threadpool_limits(limits=args.ncpu, user_api="blas"):
            t0 = time.perf_counter()
            c = np.matmul(a, b)
            np_times.append(time.perf_counter() - t0)
        if ref is None:
            ref = c
        with tt.init(ncpu=args.ncpu, sched=args.sched) as rt:
            for tile in args.tiles:
                A = tt.from_numpy(a, tile)
                B = tt.from_numpy(b, tile)
                tt.wait()
                for times in (cold_times[tile], tt_times[tile]):
                    C = None  # the cold product's tiles are freed before the second one
                    t0 = time.perf_counter()
                    C = A @ B
                    tt.wait()
                    times.append(time.perf_counter() - t0)
                if rep == 0:
                    err = np.abs(C.numpy() - ref).max() / np.abs(ref).max()
                    if err > 1e-5:
                        print(f"tile {tile}: result differs from NumPy (relative error {err:.2e})")
                        return 1
                del A, B, C
            sched = rt.sched
        print(f"  repetition {rep + 1}/{args.reps}: numpy {flops / np_times[-1] / 1e9:.0f} GFLOP/s, "
              + ", ".join(f"tile {t}: {flops / tt_times[t][-1] / 1e9:.0f}" for t in args.tiles), flush=True)

    np_gf = flops / median(np_times) / 1e9
    rows = [["numpy.matmul", "-", "-", f"{median(np_times) * 1e3:.0f}", f"{np_gf:.1f}", "1.00", "-", "-"]]
    for tile in args.tiles:
        gf = flops / median(tt_times[tile]) / 1e9
        cold = flops / median(cold_times[tile]) / 1e9
        ntasks = (-(-n // tile)) ** 3
        rows.append([f"tiletrain ({sched})", tile, ntasks, f"{median(tt_times[tile]) * 1e3:.0f}", f"{gf:.1f}",
                     f"{gf / np_gf:.2f}", f"{median(cold_times[tile]) * 1e3:.0f}", f"{cold / np_gf:.2f}"])
    print()
    print(table(["program", "tile", "tasks", "ms", "GFLOP/s", "ratio", "cold ms", "cold ratio"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
