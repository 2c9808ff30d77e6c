"""Shared helpers for benchmark scripts: environment description and medians."""
from __future__ import annotations

import os
import platform
import statistics


def environment() -> str:
    lines = [f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
             f"python {platform.python_version()}"]
    lines.append(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')} "
                 f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}")
    try:
        from tiletrain._ffi import cstr, lib
        from tiletrain.runtime import blas_note
        lines.append(f"tiletrain blas: {cstr(lib.tt_blas_info())}")
        note = blas_note()
        if note:
            lines.append(f"  note: {note}")
    except ImportError:
        pass
    try:
        from threadpoolctl import threadpool_info
        for lib in threadpool_info():
            if lib.get("user_api") == "blas":
                lines.append(f"blas loaded: {lib.get('internal_api')} {lib.get('version')} "
                             f"({os.path.basename(lib.get('filepath', ''))}), arch {lib.get('architecture')}, "
                             f"threads {lib.get('num_threads')}")
    except ImportError:
        pass
    return "\n".join(lines)


def placed_step(model, opt, ids, micro_batches: int = 1) -> list:
    """One training step of a model placed with tiletrain.parallel.place, on ids (B, T + 1):
    ``micro_batches`` micro-batches, each split into one shard per data-parallel replica of
    the current plan (``parallel.shard_backward``), every loss submitted before any is read,
    then the optimizer step.  Returns the losses (Tensors; reading one waits for its part of
    the step)."""
    from tiletrain.parallel import shard_backward
    B, m, losses = ids.shape[0], micro_batches, []
    for mb in range(m):
        part = ids[mb * B // m:(mb + 1) * B // m]
        losses += shard_backward(model, part[:, :-1], part[:, 1:], mb, m)
    opt.step()
    opt.zero_grad()
    return losses


def median(xs) -> float:
    return statistics.median(xs)


def table(headers: list[str], rows: list[list]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    fmt = "  ".join("{:>%d}" % w for w in widths)
    out = [fmt.format(*cells[0]), fmt.format(*["-" * w for w in widths])]
    out += [fmt.format(*r) for r in cells[1:]]
    return "\n".join(out)


# ---- training-step comparisons (gpt_step.py, llama_step.py) ---------------------------------

STEP_HEADERS = ["size", "program", "step ms", "tokens/s", "GFLOP/s", "peak MiB", "speed vs torch",
                "memory vs torch"]


def alternate_steps(label: str, reps: int, torch_step, tiletrain_step):
    """One warm-up and ``reps`` steps of each framework, alternating step by step (tiletrain's
    workers sleep during PyTorch's step); prints each step.  Returns (median torch seconds,
    median tiletrain seconds, first losses (torch, tiletrain))."""
    import time

    import tiletrain as tt
    t_times, o_times, t_losses, o_losses = [], [], [], []
    for rep in range(reps + 1):
        tt.wait()
        t0 = time.perf_counter()
        t_losses.append(torch_step())
        t_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        o_losses.append(tiletrain_step())
        tt.wait()
        o_times.append(time.perf_counter() - t0)
        print(f"  {label} step {rep}: pytorch {t_times[-1] * 1e3:.0f} ms loss {t_losses[-1]:.5f}, "
              f"tiletrain {o_times[-1] * 1e3:.0f} ms loss {o_losses[-1]:.5f}", flush=True)
    return median(t_times[1:]), median(o_times[1:]), (t_losses[0], o_losses[0])


def peak_memory(script: str, size: str, args) -> dict:
    """Peak MiB per framework, each measured by ``script --memory-probe FRAMEWORK SIZE`` in a
    separate process (its last stdout line: {"peak_mb": ...}); nan where a probe failed."""
    import json
    import subprocess
    import sys
    mem = {}
    for fw in ("torch", "tiletrain"):
        cmd = [sys.executable, script, "--memory-probe", fw, size, "--ncpu", str(args.ncpu)]
        if args.tiles:
            cmd += ["--tiles", args.tiles]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
        mem[fw] = json.loads(r.stdout.strip().splitlines()[-1])["peak_mb"] if r.returncode == 0 else float("nan")
    return mem


def step_rows(size: str, torch_name: str, sched: str, tmed: float, omed: float, tokens: int, fpt: float,
              mem: dict) -> list[list]:
    """The two STEP_HEADERS rows (PyTorch, tiletrain) of one size."""
    rows = []
    for fw, key, med in ((torch_name, "torch", tmed), (f"tiletrain ({sched})", "tiletrain", omed)):
        rows.append([size, fw, f"{med * 1e3:.0f}", f"{tokens / med:,.0f}", f"{fpt * tokens / med / 1e9:.1f}",
                     f"{mem.get(key, float('nan')):.0f}", f"{tmed / med:.2f}",
                     f"{mem.get(key, float('nan')) / mem.get('torch', float('nan')):.2f}" if mem else "-"])
    return rows


def tiletrain_step(m, opt, x, y) -> float:
    """One tiletrain training step, submitted whole before the loss is read."""
    loss = m.loss(x, y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return float(loss)


def random_batch(s: dict, seed: int = 0):
    """(inputs, targets) of shape (s["B"], s["T"]) in [0, s["vocab"])."""
    import numpy as np
    rng = np.random.default_rng(seed)
    return rng.integers(0, s["vocab"], (s["B"], s["T"])), rng.integers(0, s["vocab"], (s["B"], s["T"]))


def rss_mb(field: str) -> float:
    """A /proc/self/status memory field (VmRSS, VmHWM) in MiB."""
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak_rss() -> None:
    """Reset the kernel's high-water mark of this process' RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
