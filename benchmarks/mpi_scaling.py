"""The same GPT training step in one process with 2 workers and on 2 MPI ranks with 1 worker
each, in data and in pipeline mode (tiletrain.parallel), with rank 0 doing everything alone as
a same-job reference: step time, tokens/s, bytes moved between ranks (StarPU-MPI's
STARPU_COMM_STATS: every byte each rank sent, per step, warm-up steps included, from one
extra job per mode so that the counting does not weigh on the timed ones), ratio to the
one-process step.

    .venv/bin/python benchmarks/mpi_scaling.py [--repeats 3] [--steps 6] [--warmup 2] [--n-layer 4]
        [--n-embd 256] [--batch 8] [--seq-len 128] [--micro-batches 4] [--dtype float32] [--sched tt-cp]

It launches mpirun itself (flags of docs/howto/mpirun.md).  The protocol is
pipeline_schedules.py --real's (benchmarks/_common.py): in every job the configurations step
round-robin (--steps rounds after --warmup, the second of two steps per round timed); the
driver alternates one-process jobs and mpirun jobs (--repeats mpirun jobs, each between two
one-process jobs) and reports medians over the jobs and the median (range) of the per-job
ratios."""
from __future__ import annotations

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))
from _common import (BASELINE, alternate_jobs, compare, emit_result, environment, launch_job,  # noqa: E402
                     median, protocol_init, ratio_text, reference_configs, step_data, table, timed_rounds)

SCHED = "tt-cp"   # pipeline_schedules.py --real's default too: the same protocol, the same policy


def worker(a) -> None:
    import tiletrain as tt
    from tiletrain.nn import GPTConfig

    protocol_init(a.sched)
    cfg = GPTConfig(vocab_size=256, block_size=a.seq_len, n_layer=a.n_layer, n_head=4, n_embd=a.n_embd)
    configs = [c for c in reference_configs(cfg, a.micro_batches, a.dtype) if not a.only or c[0] == a.only]
    times = timed_rounds([c[2] for c in configs], step_data(a.batch, a.seq_len), a.steps, a.warmup)
    for (name, mech, _), t in zip(configs, times):
        emit_result(rank=tt.rank(), config=name, mechanism=mech, step_s=median(t))
    tt.shutdown()


def worker_args(a, only: str | None = None) -> list[str]:
    return [sys.executable, __file__, "--worker", "--steps", str(a.steps), "--warmup", str(a.warmup),
            "--n-layer", str(a.n_layer), "--n-embd", str(a.n_embd), "--batch", str(a.batch),
            "--seq-len", str(a.seq_len), "--dtype", a.dtype, "--micro-batches", str(a.micro_batches),
            "--sched", a.sched] + (["--only", only] if only else [])


def bytes_per_step(a, config: str) -> float:
    """Bytes every rank sent per step (warm-up included) in a job stepping ``config`` alone, as
    the timed jobs do (warm-up, then two steps per round), with STARPU_COMM_STATS."""
    _, out = launch_job(worker_args(a, config), 2, a.timeout, STARPU_COMM_STATS="1", STARPU_SILENT="0")
    # at shutdown: "[starpu_comm_stats][r] TOTAL:\t725252.000000 B ..."
    total = sum(int(float(m.group(1)))
                for m in re.finditer(r"\[starpu_comm_stats\]\[\d+\] TOTAL:\s*([0-9.]+) B", out))
    return total / (a.warmup + 2 * a.steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--only", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--repeats", type=int, default=3, help="mpirun jobs, each between two one-process jobs")
    ap.add_argument("--steps", type=int, default=6, help="timed rounds per job")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--micro-batches", type=int, default=4,
                    help="micro-batches per step in pipeline mode (the batch is split; they overlap)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--sched", default=SCHED)
    ap.add_argument("--no-bytes", action="store_true", help="skip the STARPU_COMM_STATS jobs")
    ap.add_argument("--timeout", type=float, default=900)
    a = ap.parse_args()
    if a.micro_batches < 1 or a.batch % a.micro_batches:
        ap.error(f"--batch {a.batch} must split into --micro-batches {a.micro_batches} equal parts")
    if a.repeats < 1 or a.steps < 1:
        ap.error("--repeats and --steps must be >= 1")
    if a.worker:
        worker(a)
        return
    tokens = a.batch * a.seq_len
    print(environment())
    print(f"GPT {a.n_layer} layers x {a.n_embd}, batch {a.batch} x {a.seq_len} ({tokens} tokens/step), {a.dtype}, "
          f"sched {a.sched}; per job: median of {a.steps} round-robin rounds after {a.warmup}; "
          f"{a.repeats} mpirun jobs alternating with {a.repeats + 1} one-process jobs", flush=True)

    def launch(nprocs: int) -> list[dict]:
        res, _ = launch_job(worker_args(a), nprocs, a.timeout)
        print(f"  {'mpirun -np 2' if nprocs > 1 else 'one process '}: " + ", ".join(
            f"{r['config']} {r['step_s']:.3f} s" for r in res if r.get("rank", 0) == 0), flush=True)
        return res

    rows = compare(*alternate_jobs(launch, a.repeats))
    lines = []
    for r in rows:
        moved = "-"
        if r["config"] in ("data", f"pipeline x{a.micro_batches}") and not a.no_bytes:
            moved = f"{bytes_per_step(a, r['config']) / 1e6:.2f}"
        lines.append([r["config"], f"{r['step_s']:.3f}", f"{tokens / r['step_s']:,.0f}", moved,
                      ratio_text(r["ratios"])])
    print()
    print(table(["configuration", "step (s)", "tokens/s", "MB moved/step", f"vs {BASELINE}"], lines))


if __name__ == "__main__":
    main()
