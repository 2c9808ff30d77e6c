"""Per-task overhead of a tensor op over many small tiles, from Python, per scheduler, next to
StarPU's own floor for the same work written in C (benchmarks/starpu_floor.c).

c = a + b over tensors of T tiles of --tile float32 elements, one tile task each.  Reported
per tile or task, medians over --reps:
  register    creating the output tensor (registering T tile handles)
  submit      one Python call submitting the T tasks into that tensor: Python -> C map
              expander -> StarPU (the per-task submission cost), wall time
  submit CPU  the same, CPU time of the submitting thread (what other processes sharing
              the cores do not inflate: under load, wall time counts waiting for a core)
  end-to-end  submit plus running every task and waiting (tiny kernels: this is overhead)
  free        dropping the output tensor (its T handles go to the recycling lists: the Python call)
  free+wait   dropping it and the wait that follows (the wait unregisters the recycled handles:
              until StarPU has freed every tile)
  free+new    dropping it and creating the next tensor of its shape before any wait (the new
              tensor takes the dropped one's handles: register and unregister both saved)
  add         tiletrain.add(a, b) as one call: register + submit
The "starpu C" rows do the same with StarPU calls only (starpu_vector_data_register,
starpu_task_create + starpu_task_submit, starpu_data_unregister_submit: their free+new is
unregister_submit + register); they need a C compiler and pkg-config's starpu-1.3, and are left
out without them.  TILETRAIN_REUSE_MB=0 turns reuse off (every free goes to the reaper
thread's starpu_data_unregister_submit); TILETRAIN_ASYNC_FREE=0 then unregisters on the caller's
thread instead.

    python benchmarks/task_overhead.py [--tiles-count 16384] [--scheds eager lws dmda]
"""
from __future__ import annotations

import argparse
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import tiletrain as tt  # noqa: E402
from _common import environment, median, table  # noqa: E402
from tiletrain.runtime.hetero import build_info  # noqa: E402
from tiletrain.runtime.kernels import run_map  # noqa: E402
from tiletrain.tensors import Tensor  # noqa: E402


def build_floor(workdir: str) -> str | None:
    """benchmarks/starpu_floor.c compiled, or None (with the reason printed)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc or not shutil.which("pkg-config"):
        print("starpu C rows left out: no C compiler or no pkg-config")
        return None
    # the StarPU tiletrain was built against (its own build in the cache, found through a run path)
    prefix = build_info()["starpu_prefix"]
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig")) if prefix else None
    try:
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "starpu-1.3"], capture_output=True, text=True,
                               check=True, env=env).stdout.split()
        if prefix:
            flags.append(f"-Wl,-rpath,{os.path.join(prefix, 'lib')}")
        exe = os.path.join(workdir, "starpu_floor")
        subprocess.run([cc, "-O2", os.path.join(os.path.dirname(__file__), "starpu_floor.c"), *flags, "-o", exe],
                       check=True, capture_output=True, text=True)
        return exe
    except subprocess.CalledProcessError as e:
        print(f"starpu C rows left out: {' '.join(e.cmd)} failed: {e.stderr.strip()[:300]}")
        return None


def run_floor(exe: str, sched: str, ncpu: int, ntiles: int, tile: int, reps: int) -> list[float]:
    # FxT off, as tiletrain starts StarPU (a StarPU built --with-fxt traces by default: every task
    # then writes its events, ~2x the submit cost of tiny tasks)
    env = dict(os.environ, STARPU_SILENT="1", STARPU_FXT_TRACE="0")
    out = subprocess.run([exe, sched, str(ncpu), str(ntiles), str(tile), str(reps)], capture_output=True, text=True,
                         check=True, env=env).stdout
    return [float(v) for v in out.split()]


def measure(sched: str, x: np.ndarray, tile: int, ncpu: int, reps: int) -> list[float] | None:
    ntiles = x.size // tile
    reg, sub, subc, e2e, free, freew, freen, add = [], [], [], [], [], [], [], []
    with tt.init(ncpu=ncpu, sched=sched, calibrate=None):
        a = tt.from_numpy(x, tile)
        b = tt.from_numpy(x, tile)
        for rep in range(reps + 1):  # the first: warm-up (and perf-model samples for dm* policies)
            t0 = time.perf_counter()
            c = Tensor(a.traits, a.dtype)
            t1, c1 = time.perf_counter(), time.thread_time()
            run_map("add", a, b, c, alpha=1.0, beta=1.0)
            t2, c2 = time.perf_counter(), time.thread_time()
            tt.wait()
            t3 = time.perf_counter()
            del c
            t4 = time.perf_counter()
            tt.wait()
            t4w = time.perf_counter()
            gc.collect()
            t5 = time.perf_counter()
            c = tt.add(a, b)
            t6 = time.perf_counter()
            tt.wait()
            t7 = time.perf_counter()
            del c
            c = Tensor(a.traits, a.dtype)
            t8 = time.perf_counter()
            del c
            tt.wait()
            if rep:
                for lst, dt in ((reg, t1 - t0), (sub, t2 - t1), (subc, c2 - c1), (e2e, t3 - t1), (free, t4 - t3),
                                (freew, t4w - t3), (freen, t8 - t7), (add, t6 - t5)):
                    lst.append(dt / ntiles * 1e6)
        if not np.array_equal(tt.add(a, b).numpy(), 2 * x):
            return None
        del a, b
    return [median(v) for v in (reg, sub, subc, e2e, free, freew, freen, add)]


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
          f"{args.reps} repetitions (medians); tiletrain and StarPU-alone runs alternate", flush=True)
    x = np.arange(ntiles * tile, dtype=np.float32)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        exe = build_floor(work)
        for sched in args.scheds:
            got = measure(sched, x, tile, args.ncpu, args.reps)
            if got is None:
                print(f"{sched}: wrong result")
                return 1
            rows.append([sched, "tiletrain", *(f"{v:.2f}" for v in got)])
            if exe:
                fl = run_floor(exe, sched, args.ncpu, ntiles, tile, args.reps)
                rows.append([sched, "starpu C", *(f"{v:.2f}" for v in fl), "-", f"{fl[4] + fl[0]:.2f}",
                             f"{fl[0] + fl[1]:.2f}"])
            print(f"  {sched}: done", flush=True)
    print()
    print(table(["sched", "program", "register us/tile", "submit us/task", "submit CPU us/task", "end-to-end us/task",
                 "free us/tile", "free+wait us/tile", "free+new us/tile", "add us/task"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
