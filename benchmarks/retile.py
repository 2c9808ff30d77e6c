"""Re-tiling cost: a float32 tensor re-tiled (512 -> 256 aligned, 512 -> 384 misaligned) and
transposed with tiletrain's region-copy expander, against torch on the same cores: a copy
(`.clone()`) for the re-tilings, `.t().contiguous()` for the transpose.

tiletrain: ncpu workers, one region_copy task per overlapping (source, destination) tile
pair; the timed part is submit + wait (the input is tiled before timing).  torch: ncpu
intra-op threads.  Prints medians over --reps repetitions and the ratio tiletrain / torch.

    python benchmarks/retile.py [--n 4096] [--reps 5] [--ncpu N]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import tiletrain as tt  # noqa: E402
from _common import environment, median, table  # noqa: E402
from tiletrain.ops import shape as S  # noqa: E402


def _timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    tt.wait()
    return time.perf_counter() - t0, out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--ncpu", type=int, default=os.cpu_count())
    args = p.parse_args()
    n = args.n
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    print(environment())
    print(f"re-tiling {n}x{n} float32, {args.ncpu} cores, {args.reps} repetitions (medians)", flush=True)

    cases = [("retile 512 -> 256", lambda x: S.retile(x, 256), lambda t: t.clone()),
             ("retile 512 -> 384 (misaligned)", lambda x: S.retile(x, 384), lambda t: t.clone()),
             ("transpose (512 tiles)", S.t, lambda t: t.t().contiguous())]
    tt.init(ncpu=args.ncpu)
    x = tt.from_numpy(a, 512)
    tt.wait()
    tt_times = {name: [] for name, _, _ in cases}
    for name, fn, _ in cases:
        for rep in range(args.reps + 1):  # the first run warms the perf models and allocations
            dt, y = _timed(lambda: fn(x))
            if rep:
                tt_times[name].append(dt)
        ref = a.T if name.startswith("transpose") else a
        if not np.array_equal(y.numpy(), ref):
            print(f"{name}: WRONG RESULT", file=sys.stderr)
            return 1
        del y
    del x
    tt.shutdown()  # idle workers must not steal torch's cores

    torch.set_num_threads(args.ncpu)
    ta = torch.from_numpy(a)
    rows = []
    for name, _, tfn in cases:
        times = []
        for rep in range(args.reps + 1):
            t0 = time.perf_counter()
            tfn(ta)
            if rep:
                times.append(time.perf_counter() - t0)
        t_tt, t_torch = median(tt_times[name]), median(times)
        rows.append([name, f"{t_tt * 1e3:.1f}", f"{t_torch * 1e3:.1f}", f"{t_tt / t_torch:.2f}",
                     f"{a.nbytes / t_tt / 1e9:.2f}"])
    print(table(["case", "tiletrain ms", "torch ms", "ratio", "tiletrain GB/s"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
