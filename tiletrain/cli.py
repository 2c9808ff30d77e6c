"""Command line: `tiletrain info | demo | trace | bench`."""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def _runtime_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ncpu", type=int, default=None, help="CPU workers (default: STARPU_NCPU or all cores)")
    p.add_argument("--sched", default=None, help="StarPU scheduling policy (default: STARPU_SCHED or lws)")


def cmd_info(args) -> int:
    import tiletrain as tt

    with tt.init(ncpu=args.ncpu, sched=args.sched) as rt:
        info = rt.info()
        print(f"tiletrain      {info['tiletrain']}")
        print(f"StarPU         {info['starpu']}")
        print(f"build          {info['build']}")
        print(f"scheduler      {info['sched']}")
        print(f"memory nodes   {info['memory_nodes']}")
        print(f"workers        {len(info['workers'])}")
        for w in info["workers"]:
            print(f"  {w.id:3d}  {w.kind:6s}  node {w.memory_node}  {w.name}")
        from ._ffi import cstr, lib
        names = [cstr(lib.tt_kernel_name(k)) for k in range(lib.tt_kernel_count())]
        print(f"kernels        {len(names)}: {' '.join(names)}")
    return 0


def cmd_demo(args) -> int:
    """A short run that proves the runtime works: tiled ops checked against NumPy."""
    import tiletrain as tt

    n, tile = args.size, args.tile
    rng = np.random.default_rng(0)
    print(f"[1/4] starting StarPU (ncpu={args.ncpu or 'default'}, sched={args.sched or 'default'})", flush=True)
    with tt.init(ncpu=args.ncpu, sched=args.sched) as rt:
        print(f"      {rt!r}, workers: {', '.join(w.name for w in rt.workers())}", flush=True)
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        A = tt.from_numpy(a, tiles=tile)
        B = tt.from_numpy(b, tiles=tile)
        print(f"[2/4] tiled matmul {n}x{n} float32, {A.grid[0]}x{A.grid[1]} tiles of {tile}", flush=True)
        t0 = time.perf_counter()
        C = A @ B
        c = C.numpy()
        dt = time.perf_counter() - t0
        ref = a.astype(np.float64) @ b.astype(np.float64)
        err = float(np.abs(c - ref).max() / np.abs(ref).max())
        print(f"      {2 * n**3 / dt / 1e9:.1f} GFLOP/s, relative error vs float64 NumPy {err:.2e}", flush=True)
        print("[3/4] element-wise chain and reductions", flush=True)
        D = (A * 2.0 - B) / (A * A + 1.0)
        s = tt.sum(D, axis=0)
        m = tt.max(D, axis=1)
        d_ref = (a * 2.0 - b) / (a * a + 1.0)
        err2 = max(float(np.abs(s.numpy() - d_ref.sum(0)).max()), float(np.abs(m.numpy() - d_ref.max(1)).max()))
        total = float(tt.sum(D))
        print(f"      sum(D) = {total:.4f} (NumPy {float(d_ref.sum(dtype=np.float64)):.4f}), "
              f"max abs error of sum/max along axes {err2:.2e}", flush=True)
        ok = err < 1e-4 and err2 < 1e-2
        print(f"[4/4] shutting down; {'all results match NumPy' if ok else 'MISMATCH against NumPy'}", flush=True)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tiletrain", description="task-based training runtime on StarPU")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="print workers, memory nodes, scheduler, StarPU version and build options")
    _runtime_args(p)
    p.set_defaults(func=cmd_info)
    p = sub.add_parser("demo", help="a short run of tiled ops checked against NumPy")
    _runtime_args(p)
    p.add_argument("--size", type=int, default=2048, help="matrix size (default 2048)")
    p.add_argument("--tile", type=int, default=512, help="tile size (default 512)")
    p.set_defaults(func=cmd_demo)
    from .trace.cli import add_subcommands  # `trace ...` and `bench sched` (tiletrain/trace/cli.py)
    add_subcommands(sub, _runtime_args)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, TypeError, RuntimeError, NotImplementedError) as exc:
        print(f"tiletrain: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
