"""Tiled float32 gemm on a GPU against cuBLAS through cupy, on the same sizes.

tiletrain: one CUDA worker (plus --ncpu CPU workers that get no gemm task: every gemm
task is placed on the GPU), tiles created on the GPU with tiletrain.from_cupy, one cuBLAS
call per tile task on the worker's stream; timed: submit + wait.  cupy: one `a @ b` (one
cuBLAS call), timed with a device synchronisation.  Prints TFLOP/s medians and the ratio
tiletrain / cuBLAS (the target: >= 0.8 on 8192^2).  Needs cupy, a GPU and a StarPU with
CUDA (scripts/build-starpu.sh).

    python benchmarks/gpu_gemm.py [--n 4096 8192] [--tiles 2048 4096] [--reps 5]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import tiletrain as tt  # noqa: E402
from _common import median, table  # noqa: E402
from tiletrain.runtime.hetero import prefer  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, nargs="+", default=[4096, 8192])
    p.add_argument("--tiles", type=int, nargs="+", default=[2048, 4096])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--ncpu", type=int, default=1)
    args = p.parse_args()
    try:
        import cupy as cp
    except ImportError:
        print("gpu_gemm: cupy is not installed: pip install cupy-cuda13x (or -cuda12x)", file=sys.stderr)
        return 2
    rows = []
    with tt.init(ncpu=args.ncpu, ncuda=1, sched="dmda") as rt:
        gpu = [w.name for w in rt.workers() if w.kind == "cuda"]
        print(f"GPU worker: {gpu[0]}; cupy {cp.__version__}; float32, {args.reps} repetitions (medians)", flush=True)
        for n in args.n:
            flops = 2.0 * n ** 3
            rng = np.random.default_rng(0)
            a = cp.asarray(rng.standard_normal((n, n), dtype=np.float32))
            b = cp.asarray(rng.standard_normal((n, n), dtype=np.float32))
            times = []
            for _ in range(args.reps + 1):
                cp.cuda.Device().synchronize()
                t0 = time.perf_counter()
                c = a @ b
                cp.cuda.Device().synchronize()
                times.append(time.perf_counter() - t0)
            ref = flops / median(times[1:]) / 1e12
            rows.append([f"{n}", "cuBLAS (cupy)", f"{ref:.1f}", "1.00"])
            for tile in args.tiles:
                if tile > n:
                    continue
                A, B = tt.from_cupy(a, tile), tt.from_cupy(b, tile)
                times = []
                with prefer("cuda"):
                    for _ in range(args.reps + 1):
                        t0 = time.perf_counter()
                        C = tt.matmul(A, B)
                        tt.wait()
                        times.append(time.perf_counter() - t0)
                    err = float(cp.abs(C.to_cupy() - c).max() / cp.abs(c).max())
                got = flops / median(times[1:]) / 1e12
                rows.append([f"{n}", f"tiletrain tiles {tile}", f"{got:.1f}", f"{got / ref:.2f}"])
                print(f"  n={n} tile={tile}: {got:.1f} TFLOP/s (max rel. error vs cupy {err:.1e})", flush=True)
                del A, B, C
    print(table(["n", "gemm", "TFLOP/s", "vs cuBLAS"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
