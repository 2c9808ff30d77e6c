"""The training step `tiletrain train` runs (its model, tilings, optimizer and data path:
tiletrain.train.loop's prepare/setup/step), timed on StarPU's clock: real time on the real
flavour, simulated time on a simulated machine.  `tiletrain machine calibrate` runs it to
measure the kernels (and then `tiletrain train`'s validation forward and `tiletrain
generate`'s decode steps on the same model); the validation (tests/sim, benchmarks/simulate_validate.py) runs it
on both flavours and compares tokens/s.

    python -m tiletrain.sim.bench [--steps 6] [--warmup 2] [--sched dmda] [--calibrate] [--json]

The clock is StarPU's per-worker profiling clock (``tiletrain.trace.worker_stats()``'s
``total_us``: time since the session started), which SimGrid drives in a simulation."""
from __future__ import annotations

import argparse
import dataclasses
import io
import json
import sys
import tempfile
import time

import numpy as np

import tiletrain as tt

from ..config import simulated_machine
from ..train import TrainArgs, parse_tiles
from ..train.loop import evaluate, prepare, setup, step


def _clock_s() -> tuple[float, float]:
    """StarPU's clock (seconds since the session started; simulated under simulation) and the
    workers' executing time so far (seconds, summed)."""
    stats = tt.trace.worker_stats()
    return (max(w["total_us"] for w in stats) / 1e6, sum(w["executing_us"] for w in stats) / 1e6,
            sum(w["ntasks"] for w in stats))


def train_steps(steps: int = 6, warmup: int = 2, sched: str | None = None, ncpu: int | None = None,
                calibrate: bool = False, progress=None, **train) -> dict:
    """Run ``warmup`` + ``steps`` training steps of `tiletrain train`'s default model (or the
    sizes in ``train``: TrainArgs fields) and time the last ``steps`` on StarPU's clock."""
    if steps < 1 or warmup < 0:
        raise ValueError(f"steps must be >= 1 and warmup >= 0, got {steps} and {warmup}")
    simulated = simulated_machine()
    # the run's metrics go to a directory dropped at the end (a timing is not a run to keep)
    scratch = tempfile.TemporaryDirectory(prefix="tiletrain-bench-")
    args = TrainArgs(steps=steps + warmup, eval_every=0, sample_tokens=0, progress=False, sched=sched, ncpu=ncpu,
                     max_bytes=train.pop("max_bytes", 400_000), run_dir=scratch.name, tensorboard=False, **train)
    args.validate()
    out = io.StringIO()
    prep = prepare(args, out)
    rt = tt.init(ncpu=ncpu, sched=sched, profile=True, calibrate=1 if calibrate else None)
    try:
        run = setup(args, prep, rt, out)
        t_real = time.perf_counter()
        t0 = None
        for i in range(steps + warmup):
            if i == warmup:
                tt.wait()
                t0 = _clock_s()
                w0 = tt.trace.worker_stats()
                cpu0 = time.thread_time()
            try:
                step(run)
            except FloatingPointError:
                if not simulated:  # simulated kernels do not run: the loss is meaningless there
                    raise
            run.step += 1
            if progress is not None:
                progress(f"step {i + 1}/{steps + warmup} ({time.perf_counter() - t_real:.1f} s)")
        submit_cpu = time.thread_time() - cpu0
        tt.wait()
        t1 = _clock_s()
        elapsed, executing, ntasks = t1[0] - t0[0], t1[1] - t0[1], t1[2] - t0[2]
        workers = tt.trace.worker_stats()
        sched_name = rt.sched
        # per worker type over the timed steps: the fraction of the workers' time spent executing
        busy_by_kind = {}
        for kind in sorted({w["kind"] for w in workers}):
            ids = [i for i, w in enumerate(workers) if w["kind"] == kind]
            ex = sum(workers[i]["executing_us"] - w0[i]["executing_us"] for i in ids) / 1e6
            busy_by_kind[kind] = ex / (elapsed * len(ids)) if elapsed > 0 else 0.0
        if calibrate:  # after the timing: `tiletrain train --eval-every`'s validation forward (no_grad runs
            # other kernels, e.g. the residual add fused into the layer norm), as many batches as steps
            evaluate(run.model, prep.corpus, dataclasses.replace(args, eval_batches=steps + warmup),
                     np.random.default_rng(args.seed + 1))
            decode(run.model, args.seq_len, steps + warmup, progress)
    finally:
        tt.shutdown()
        scratch.cleanup()
    tokens = steps * run.tokens_per_step
    return {"machine": simulated or "real", "sched": sched_name, "steps": steps, "warmup": warmup,
            "tokens_per_step": run.tokens_per_step, "seconds": elapsed, "tokens_per_s": tokens / elapsed,
            "cpu_workers": sum(1 for w in workers if w["kind"] == "cpu"),
            "cuda_workers": sum(1 for w in workers if w["kind"] == "cuda"),
            # tasks per worker type over the whole session (warm-up included)
            "tasks_by_kind": {k: sum(w["ntasks"] for w in workers if w["kind"] == k)
                              for k in sorted({w["kind"] for w in workers})},
            "busy_by_kind": busy_by_kind,
            "real_seconds": time.perf_counter() - t_real,
            "busy_fraction": executing / (elapsed * len(workers)),
            # the submitting (Python) thread's CPU time per step, real in both flavours
            "submit_cpu_s_per_step": submit_cpu / steps, "tasks_per_step": ntasks / steps,
            "submit_us_per_task": 1e6 * submit_cpu / max(ntasks, 1),
            "model": f"{args.arch} {args.n_layer}x{args.n_embd} T={args.seq_len} B={args.batch}"}


def decode(model, context: int, rounds: int, progress=None) -> None:
    """`tiletrain generate`'s decode steps on ``model`` (greedy, with the key/value cache), for
    the calibration of a machine (the values do not matter): ``rounds`` prompts extended to the
    whole context, every other one a single token (so every cache length runs in every other
    round), the others of lengths spread over half the context (their prefill shapes)."""
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    half = max(2, context // 2)
    for i in range(rounds):
        prompt = 1 if i % 2 == 0 else 2 + (i // 2) * (half - 2) // max(1, (rounds - 1) // 2)
        model.generate(rng.integers(0, vocab, (1, prompt)), max_new_tokens=context - prompt, temperature=0.0)
        if progress is not None:
            progress(f"decode {i + 1}/{rounds}: a prompt of {prompt} extended to {context} tokens")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tiletrain.sim.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--sched", default=None)
    p.add_argument("--ncpu", type=int, default=None)
    p.add_argument("--calibrate", action="store_true", help="record every kernel's time in the perf models")
    p.add_argument("--n-layer", type=int, default=None)
    p.add_argument("--n-embd", type=int, default=None)
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--seq-len", type=int, default=None)
    p.add_argument("--tiles", type=parse_tiles, default=None, help="tile sizes B,T,C (`tiletrain train --tiles`)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON line")
    p.add_argument("--progress", action="store_true", help="a line per step on stderr")
    a = p.parse_args(argv)
    sizes = {k: v for k, v in (("n_layer", a.n_layer), ("n_embd", a.n_embd), ("batch", a.batch),
                               ("seq_len", a.seq_len), ("tiles", a.tiles)) if v is not None}
    say = (lambda s: print(s, file=sys.stderr, flush=True)) if a.progress else None
    r = train_steps(a.steps, a.warmup, a.sched, a.ncpu, a.calibrate, progress=say, **sizes)
    if a.json:
        print(json.dumps(r), flush=True)
    else:
        gpus = f", {r['cuda_workers']} CUDA" if r["cuda_workers"] else ""
        print(f"{r['model']} on {r['machine']} ({r['cpu_workers']} CPU{gpus} workers, {r['sched']}): "
              f"{r['tokens_per_s']:.0f} tokens/s ({r['seconds'] / r['steps'] * 1e3:.1f} ms per step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
