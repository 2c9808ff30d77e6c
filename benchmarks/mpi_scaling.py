"""The same GPT training step in one process with 2 workers and on 2 MPI ranks with 1 worker
each, in pipeline and in data mode (tiletrain.parallel): step time, tokens/s, bytes moved
between ranks (StarPU-MPI's STARPU_COMM_STATS: every
byte each rank sent, per step, warm-up steps included), ratio to the single process.

    .venv/bin/python benchmarks/mpi_scaling.py [--steps 6] [--warmup 2] [--n-layer 4] [--n-embd 256]
        [--batch 8] [--seq-len 128] [--dtype float32]

It launches mpirun itself (flags of README "Running under mpirun").  Every configuration
runs the same model, batch and data; the timed steps follow untimed warm-up steps (perf
models, first allocations)."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from tiletrain.utils import mpirun

sys.path.insert(0, os.path.dirname(__file__))
from _common import placed_step  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def worker(a) -> None:
    import numpy as np

    import tiletrain as tt
    from tiletrain.nn import GPT, GPTConfig
    from tiletrain.optim import AdamW
    from tiletrain.parallel import place

    tt.init()
    cfg = GPTConfig(vocab_size=256, block_size=a.seq_len, n_layer=a.n_layer, n_head=4, n_embd=a.n_embd)
    model = GPT(cfg, dtype=np.dtype(a.dtype), seed=0)
    place(model, a.mode)
    opt = AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    times = []
    m = a.micro_batches
    for step in range(a.warmup + a.steps):
        ids = rng.integers(0, 256, size=(a.batch, a.seq_len + 1))
        t0 = time.perf_counter()
        losses = placed_step(model, opt, ids, m)
        value = float(np.mean([float(v) for v in losses]))  # waits for the step (collective)
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    if tt.rank() == 0:
        print("RESULT " + json.dumps({"step_s": float(np.median(times)), "loss": value}), flush=True)
    tt.shutdown()


def launch(a, mode: str, nprocs: int, ncpu: int, stats: bool = False) -> dict:
    """One run; stats: with STARPU_COMM_STATS (counting bytes; a separate run, so that the
    counting does not weigh on the timed one)."""
    # ranks sharing the cores: no binding (README "Running under mpirun"); the one-process
    # baseline keeps StarPU's defaults (workers bound to cores)
    env = mpirun.environment(ranks=nprocs > 1, OPENBLAS_NUM_THREADS="1", STARPU_NCPU=str(ncpu))
    if nprocs == 1:
        for k in ("STARPU_WORKERS_NOBIND", "STARPU_MPI_NOBIND"):
            env.pop(k, None)
    if stats:
        env["STARPU_COMM_STATS"] = "1"
        env.pop("STARPU_SILENT", None)
    else:
        env["STARPU_SILENT"] = "1"
    env.setdefault("STARPU_HOME", str(ROOT / "build" / "starpu-home-bench"))
    args = [sys.executable, __file__, "--worker", mode, "--steps", str(a.steps), "--warmup", str(a.warmup),
            "--n-layer", str(a.n_layer), "--n-embd", str(a.n_embd), "--batch", str(a.batch),
            "--seq-len", str(a.seq_len), "--dtype", a.dtype,
            "--micro-batches", str(a.micro_batches if mode == "pipeline" else 1)]
    cmd = args if nprocs == 1 else mpirun.command(nprocs, args)
    if nprocs == 1:
        env["TILETRAIN_MPI"] = "0"
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
    out = p.stdout + p.stderr
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{out}")
    res = json.loads(re.search(r"^RESULT (.*)$", out, re.M).group(1))
    # StarPU-MPI's STARPU_COMM_STATS at shutdown: "[starpu_comm_stats][r] TOTAL:\t725252.000000 B ..."
    # (bytes each rank sent, all steps, warm-up included)
    total = 0
    for m in re.finditer(r"\[starpu_comm_stats\]\[\d+\] TOTAL:\s*([0-9.]+) B", out):
        total += int(float(m.group(1)))
    res["bytes"] = total
    res["bytes_per_step"] = total / (a.steps + a.warmup) if total else 0
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--micro-batches", type=int, default=4,
                    help="micro-batches per step in pipeline mode (the batch is split; they overlap)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args()
    if a.micro_batches < 1 or a.batch % a.micro_batches:
        ap.error(f"--batch {a.batch} must split into --micro-batches {a.micro_batches} equal parts")
    if a.worker:
        a.mode = a.worker
        worker(a)
        return
    tokens = a.batch * a.seq_len
    print(f"GPT {a.n_layer} layers x {a.n_embd}, batch {a.batch} x {a.seq_len} ({tokens} tokens/step), {a.dtype}, "
          f"{a.steps} timed steps after {a.warmup} warm-up; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '-')}")
    rows = [("1 process x 2 workers", "single", 1, 2), (f"2 ranks x 1 worker, pipeline x{a.micro_batches}", "pipeline", 2, 1),
            ("2 ranks x 1 worker, data", "data", 2, 1)]
    base = None
    print(f"{'configuration':32} {'step (s)':>9} {'tokens/s':>9} {'MB moved/step':>14} {'vs 1 process':>13}")
    for name, mode, n, ncpu in rows:
        r = launch(a, mode, n, ncpu)
        if n > 1:
            r["bytes_per_step"] = launch(a, mode, n, ncpu, stats=True)["bytes_per_step"]
        tps = tokens / r["step_s"]
        base = base or tps
        moved = f"{r['bytes_per_step'] / 1e6:.2f}" if n > 1 else "-"
        print(f"{name:32} {r['step_s']:9.3f} {tps:9.0f} {moved:>14} {tps / base:12.2f}x", flush=True)


if __name__ == "__main__":
    main()
