"""The GELU epilogue's two ways to give the backward what it needs, per output tile, from the
CPU kernel bodies called directly (one thread, no runtime):

  pre-activation   forward gemm_gelu deriv=0 (c keeps h), backward gelu_backward(h, g)
  derivative       forward gemm_gelu deriv=1 (c becomes gelu'(h)), backward mul(g, c)

Both keep one tile (h or gelu'(h)) from the forward to the backward.  Prints medians over
--reps of the forward task, the backward's GELU task; the epilogue alone is measured with k = 1
(gemm_gelu minus gemm_bias, where the product costs next to nothing), as a tile gemm's own
run-to-run variation is larger than the epilogue.

    python benchmarks/gelu_epilogue.py [--m 256 --k 512 --n 1024] [--reps 21] [--dtype float32]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import environment, median, table  # noqa: E402
from tiletrain.tensors import DTYPES  # noqa: E402
from tiletrain.testing.references import run_cpu_kernel  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--approximate", default="tanh", choices=["tanh", "none"])
    args = ap.parse_args()
    dt, code = np.dtype(args.dtype), DTYPES[np.dtype(args.dtype)]
    m, k, n, approx = args.m, args.k, args.n, int(args.approximate == "tanh")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k)).astype(dt), (rng.standard_normal((k, n)) * 0.05).astype(dt)
    a1, b1 = a[:, :1].copy(), b[:1].copy()
    bias, g = rng.standard_normal(n).astype(dt), rng.standard_normal((m, n)).astype(dt)
    c, y, dh = np.empty((m, n), dt), np.empty((m, n), dt), np.empty((m, n), dt)
    gemm = dict(batch=1, m=m, n=n, k=k, ta=0, tb=0, alpha=1.0)
    gemm1 = dict(gemm, k=1)

    def timed(name, fields, bufs):
        t0 = time.perf_counter()
        run_cpu_kernel(name, fields, bufs, code)
        return time.perf_counter() - t0

    t = {key: [] for key in ("gemm_bias", "fwd0", "bwd0", "fwd1", "bwd1", "k1", "k1e0", "k1e1")}
    for _ in range(args.reps):
        t["k1"].append(timed("gemm_bias", gemm1, [a1, b1, bias, c]))
        t["k1e0"].append(timed("gemm_gelu", dict(gemm1, first=1, approx=approx, deriv=0), [a1, b1, bias, c, y]))
        t["k1e1"].append(timed("gemm_gelu", dict(gemm1, first=1, approx=approx, deriv=1), [a1, b1, bias, c, y]))
        t["gemm_bias"].append(timed("gemm_bias", gemm, [a, b, bias, c]))
        t["fwd0"].append(timed("gemm_gelu", dict(gemm, first=1, approx=approx, deriv=0), [a, b, bias, c, y]))
        t["bwd0"].append(timed("gelu_backward", dict(n=m * n, approx=approx), [c, g, dh]))
        t["fwd1"].append(timed("gemm_gelu", dict(gemm, first=1, approx=approx, deriv=1), [a, b, bias, c, y]))
        t["bwd1"].append(timed("mul", dict(n=m * n, alpha=1.0), [g, c, dh]))
    us = {key: median(v) * 1e6 for key, v in t.items()}
    print(environment())
    print(f"tile gemm {m}x{k} @ {k}x{n}, {args.dtype}, gelu approximate={args.approximate!r}, "
          f"{args.reps} repetitions (medians), one thread")
    rows = [["nothing (gemm_bias, no epilogue)", f"{us['gemm_bias']:.0f}", "-", "-", "-"]]
    for label, f, e, bk in (("pre-activation (gelu_backward)", "fwd0", "k1e0", "bwd0"),
                            ("derivative (mul)", "fwd1", "k1e1", "bwd1")):
        rows.append([label, f"{us[f]:.0f}", f"{us[e] - us['k1']:.0f}", f"{us[bk]:.0f}",
                     f"{us[e] - us['k1'] + us[bk]:.0f}"])
    print(table(["saved for the backward", "forward task us", "epilogue us (k=1)", "backward gelu task us",
                 "epilogue + backward us"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
