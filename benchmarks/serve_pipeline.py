"""Pipeline-parallel serving (tiletrain.inference.serving.generate_pipeline): tokens/s and the
idle fraction of each pipeline stage with 1, 2 and 4 request streams, from task traces.

    mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \\
        -x STARPU_NCPU=1 -x STARPU_WORKERS_NOBIND=1 -x STARPU_MPI_NOBIND=1 -x OPENBLAS_NUM_THREADS=1 \\
        -x STARPU_SILENT=1 -x TILETRAIN_IDLE_NAP_US=200 .venv/bin/python benchmarks/serve_pipeline.py \\
        [--streams 1 2 4] [--reps 3]
        [--n-layer 4] [--n-embd 1024] [--batch 32] [--prompt 4] [--tokens 24]
        [--draft-layers 1 [--num-draft-tokens 4]]

One stage per rank (run without mpirun: one stage).  Every configuration serves the same
random GPT (float32) and prompts; each is run once untimed, then ``--reps`` times with the
tasks recorded (tiletrain.trace), the configurations alternating; medians printed.
``--draft-layers N``: speculative decoding with an N-layer draft of the same width that
shares the model's embeddings, final norm and head (not placed: it runs on rank 0); the
table then has the drafted tokens accepted per round.  With random weights the acceptance
says little about a trained pair: read it as how the pipeline carries the draft's
one-step-at-a-time rounds.

A stage's idle fraction is 1 - (time its rank's workers spent running tasks) / (workers x
the wall time of the generate call on that rank): the time the stage waited for the previous
stage, the next token or a message.  "task s" is the time all ranks spent running tasks (the
work, summed over the stages).  ">= 2 busy" is the fraction of the run (first start to last
end over all ranks) during which at least two workers -- with one worker per rank, two
stages -- run tasks at the same time: about 0 when the stages take turns, the pipelining
when they overlap (counted at 4000 points; ranks on one machine share the monotonic clock,
so this column needs all ranks on one host).  Each rank measures its own; the values reach
rank 0 as one tensor with a tile per rank (read collectively), and rank 0 prints the table.

The default model is large enough that a decode step's tile work (about 0.2 s for the batch
on one core) outweighs submitting it (every rank's Python submits every task of the step,
~20 ms here); with small models the submission dominates and more streams (more, smaller
steps) only add overhead."""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, median, table  # noqa: E402


def gather(value) -> np.ndarray:
    """Every rank's ``value`` (a number or an array of the same shape on every rank), on every
    rank, stacked along a new first axis: a tensor whose tile r lives on rank r, read
    collectively."""
    import tiletrain as tt
    from tiletrain.distribution import Explicit
    value = np.asarray(value, dtype=np.float64)
    world = tt.world_size()
    mine = np.zeros((world, *value.shape))
    mine[tt.rank()] = value  # from_numpy stores only the tiles this rank owns
    return tt.from_numpy(mine, (1, *value.shape), dist=Explicit(np.arange(world))).numpy()


SAMPLES = 4000  # points of the common window at which the busy workers are counted


def busy_workers(trace, zero: float, window: tuple[float, float]) -> np.ndarray:
    """How many of this rank's workers run a task at each of SAMPLES points spread over
    ``window`` (seconds on the shared monotonic clock; ``zero``: that clock at this rank's
    trace reset)."""
    t = np.linspace(window[0], window[1], SAMPLES, endpoint=False)
    t = (t - zero) * 1e6  # on this rank's trace clock (µs)
    count = np.zeros(SAMPLES)
    tasks = trace.tasks
    for w in np.unique(tasks["worker"]):  # a worker runs one task at a time
        mine = tasks[tasks["worker"] == w]
        order = np.argsort(mine["start"])
        start, end = mine["start"][order], mine["end"][order]
        i = np.searchsorted(start, t, side="right") - 1
        count += (i >= 0) & (t < end[np.maximum(i, 0)])
    return count


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=1024)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--prompt", type=int, default=4)
    p.add_argument("--tokens", type=int, default=24)
    p.add_argument("--draft-layers", type=int, default=0, help="speculative decoding with a draft of this depth")
    p.add_argument("--num-draft-tokens", type=int, default=4)
    a = p.parse_args(argv)

    import tiletrain as tt
    from tiletrain.inference.serving import generate_pipeline
    from tiletrain.nn import GPT, GPTConfig

    tt.init(profile=True)
    rank, world = tt.rank(), tt.world_size()
    cfg = GPTConfig(vocab_size=a.vocab, block_size=a.prompt + a.tokens, n_layer=a.n_layer, n_head=a.n_head,
                    n_embd=a.n_embd)
    model = GPT(cfg, dtype=np.float32, seed=0)
    spec = {}
    if a.draft_layers:
        draft = GPT(dataclasses.replace(cfg, n_layer=a.draft_layers), dtype=np.float32, seed=1)
        draft.load_state_dict({k: v for k, v in model.state_dict().items() if ".h." not in k}, strict=False)
        spec = dict(draft=draft, num_draft_tokens=a.num_draft_tokens)
    prompts = np.random.default_rng(0).integers(0, a.vocab, (a.batch, a.prompt))
    for streams in a.streams:  # warm-up: allocations, perf models
        generate_pipeline(model, prompts, a.tokens, streams=streams, **spec)
    runs = {s: {"tps": [], "idle": [], "work": [], "overlap": [], "acc": []} for s in a.streams}
    first = None
    for _ in range(a.reps):  # the configurations alternate, so that load changes hit them alike
        for streams in a.streams:
            tt.trace.reset()  # the trace clock restarts here: at `zero` on the monotonic clock
            zero = time.perf_counter()
            with tt.trace.recording() as rec:
                t0 = time.perf_counter()
                tokens, stats = generate_pipeline(model, prompts, a.tokens, streams=streams, return_stats=True,
                                                  **spec)
                t1 = time.perf_counter()
            tr = rec.trace
            busy = float(tr.duration.sum()) / 1e6
            r = runs[streams]
            r["idle"].append(gather(1.0 - busy / (max(1, len(tr.workers)) * (t1 - t0))))
            r["work"].append(gather(busy).sum())
            r["tps"].append(stats.tokens_per_s)
            r["acc"].append(stats.mean_accepted)
            ends = gather([t0, t1])  # perf_counter is the machine's monotonic clock: one time line
            count = gather(busy_workers(tr, zero, (ends[:, 0].min(), ends[:, 1].max()))).sum(axis=0)
            r["overlap"].append(float((count >= 2).mean()))
            if first is None:
                first = tokens
            elif not np.array_equal(tokens, first):  # greedy: the streams must not change the tokens
                raise SystemExit(f"streams={streams}: tokens differ from the first configuration's")
    rows = []
    for streams, r in runs.items():
        per_stage = np.median(np.array(r["idle"]), axis=0)
        rows.append([streams, a.batch // streams if a.batch % streams == 0 else f"~{a.batch / streams:.1f}",
                     f"{median(r['tps']):.1f}", f"{median(r['work']):.2f}", *(f"{f:.2f}" for f in per_stage),
                     f"{per_stage.mean():.2f}", f"{median(r['overlap']):.2f}",
                     *([f"{median(r['acc']):.2f}"] if spec else [])])
    if rank == 0:
        print(environment())
        print(f"GPT {a.n_layer} x {a.n_embd} (vocab {a.vocab}), float32, batch {a.batch}, prompt {a.prompt}, "
              f"{a.tokens} new tokens (greedy), {world} stage(s) = rank(s), "
              + (f"a {a.draft_layers}-layer draft proposing {a.num_draft_tokens} tokens per round, " if spec else "")
              + f"STARPU_NCPU={os.environ.get('STARPU_NCPU', '(unset)')} per rank, {os.cpu_count()} cores; "
              f"medians of {a.reps} traced runs")
        stages = [f"idle s{s}" for s in range(world)]
        print(table(["streams", "rows/stream", "tokens/s", "task s", *stages, "idle mean", ">= 2 busy",
                     *(["accepted/round"] if spec else [])], rows))
    tt.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
