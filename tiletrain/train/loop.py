"""The training loop: ``train(args)`` = checks up front (``prepare``), the runtime, the model
and optimizer (``setup``), then ``step`` after ``step`` with periodic ``evaluate`` and
checkpoints, and ``finish`` (throughput, a last checkpoint, a sample).  Every rank under
mpirun runs the same flow; only rank 0 reports.  The distribution is called as
``parallel.place`` etc. (looked up when called: a test can wrap it); a pipelined
``--dist`` steps its ``--schedule`` (tiletrain.pipeline.training).  Each step is one line
of the run directory's metrics.jsonl (``record``, tiletrain.utils.runlog: written before that
step's checkpoint), and ``--trace-step N`` records step N's tasks (``traced_step``)."""
from __future__ import annotations

import collections
import dataclasses
import datetime
import math
import os
import resource
import signal
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

import tiletrain as tt

from .. import checkpoint as ck, parallel, trace
from ..data import load_corpus
from ..config import simulated_machine
from ..distribution import rank, world_size
from ..inference import GenerationConfig, sample_text
from ..ops import activations
from ..optim import AdamW, clip_grad_norm_, cosine_with_warmup
from ..pipeline import training as pipelined
from ..runtime import blas_note
from ..tensors.tensor import gather_per_rank
from ..utils.runlog import METRICS_NAME, RunLogger, environment
from .args import TrainArgs
from .state import ModelSource, load_training_state, read_resume_point, save_training_state

__all__ = ["train", "TrainResult", "evaluate"]


@dataclass
class TrainResult:
    step: int
    train_losses: list[float]
    val_losses: dict[int, float]
    tokens_per_s: float
    gflops: float
    stopped_early: bool
    checkpoint: str | None
    sample: str | None
    interrupted: bool = False  # stopped by Ctrl-C (stopped_early without it: --stop-after)


@dataclass
class Prepared:
    """What the up-front checks resolved, before the runtime starts."""
    source: ModelSource
    corpus: Any
    ckpt_path: Path | None
    resume: tuple[dict, dict] | None  # the checkpoint's (tensors, metadata) to resume from
    schedule: Any = None  # a pipelined --dist's --schedule (None: parallel.shard_backward steps)
    log: RunLogger | None = None      # the run directory (rank 0; None on the others)


@dataclass
class Run:
    """A training run in progress (``setup`` makes it; ``step``/``evaluate_and_save`` advance it)."""
    args: TrainArgs
    out: Any
    prep: Prepared
    model: Any
    opt: Any
    data_rng: np.random.Generator
    start: int
    flops_per_token: int
    pipe: Any = None  # the pipeline executor stepping --schedule (None: parallel.shard_backward)
    step: int = 0
    train_losses: list[float] = field(default_factory=list)
    val_losses: dict[int, float] = field(default_factory=dict)
    bar: Any = None
    ends: collections.deque = field(default_factory=lambda: collections.deque(maxlen=11))  # step completions
    t_start: float = 0.0
    tokens_done: int = 0
    last_good: int | None = None  # step of the last checkpoint written
    stopped: bool = False
    interrupted: bool = False
    log: RunLogger | None = None   # metrics.jsonl etc. (rank 0)
    grad_norm: Any = None          # this step's gradient norm (a 0-d tensor) with --grad-clip
    t_last: float = 0.0            # when this step's time began (the previous step's completion)

    @property
    def tokens_per_step(self) -> int:
        return self.args.batch * self.args.micro_batches * self.args.seq_len

    def say(self, msg: str) -> None:
        (self.bar.write(msg) if self.bar is not None else print(msg, file=self.out, flush=True))


def train(args: TrainArgs, out=None) -> TrainResult:
    """Run training; prints progress to `out` (default stderr for the bar, stdout for text)."""
    args.validate()
    out = out or sys.stdout
    if rank() != 0:  # under mpirun only rank 0 reports (every rank runs the same flow)
        out = open(os.devnull, "w")
        args = dataclasses.replace(args, progress=False)
    prep = error = None  # under mpirun: agreed by every rank before any step (_agree_up_front)
    try:
        prep = prepare(args, out)
    except Exception as exc:
        if world_size() == 1:
            raise
        error = exc
    if isinstance(prep, TrainResult):
        return prep
    try:
        rt = tt.init(ncpu=args.ncpu, sched=args.sched, mem_limit=args.mem_limit, ooc_dir=args.ooc_dir,
                     profile=True if args.trace_step is not None or simulated_machine() else None)
    except BaseException:
        if prep is not None and prep.log is not None:
            prep.log.close()
        raise
    if world_size() > 1:
        _agree_up_front(error, args, prep)
    try:
        run = setup(args, prep, rt, out)
        with _StopFlag() as stop:
            while run.step < args.steps and not run.stopped:
                value, lr = traced_step(run) if run.step + 1 == args.trace_step else step(run)
                after_step(run, value, lr, stop.stop)
        return finish(run)
    finally:
        if prep is not None and prep.log is not None:
            prep.log.close()
        tt.shutdown()


def prepare(args: TrainArgs, out) -> Prepared | TrainResult:
    """The checks up front, before any work: model type, config and tokenizer, the
    distribution fits the job (the same message on every rank, before any task), the
    checkpoint directory, the checkpoint to resume and the data; a TrainResult when the
    resumed run is already complete."""
    source = ModelSource.resolve(args)
    parallel.check_fit(args.dist, n_layer=source.n_layer, batch=args.batch, stages=args.stages)
    schedule = pipelined.training_schedule(args.schedule, args.dist, args.micro_batches, source.n_layer,
                                           stages=args.stages)
    ckpt_path = ck.check_writable(args.ckpt_dir) / ck.CHECKPOINT_NAME if args.ckpt_dir else None
    if ckpt_path is not None and ckpt_path.exists() and not (args.resume or args.overwrite):
        raise ValueError(f"--ckpt-dir {args.ckpt_dir} already holds a checkpoint ({ckpt_path}): pass --resume "
                         "to continue it or --overwrite to replace it")
    resume = read_resume_point(ckpt_path, args) if args.resume else None
    if resume is not None:
        done = resume[1]["step"]
        if done == args.steps:
            print(f"training is already complete: {ckpt_path} is at step {done} of --steps {args.steps} "
                  f"(pass a larger --steps to train on)", file=out, flush=True)
            return TrainResult(done, [], {}, 0.0, 0.0, False, str(ckpt_path), None)
        source.check_resume(resume[1], ckpt_path)
    corpus = load_corpus(args.data or None, val_fraction=args.val_fraction, max_bytes=args.max_bytes,
                         tokenizer=source.tokenizer, progress=args.progress and rank() == 0)
    if len(corpus.val) <= args.seq_len + 1:
        raise ValueError(f"the validation split has {len(corpus.val)} tokens, too few for --seq-len "
                         f"{args.seq_len}: use more data or a larger --val-fraction")
    return Prepared(source, corpus, ckpt_path, resume, schedule, open_run_log(args, source, resume, out))


def setup(args: TrainArgs, prep: Prepared, rt, out) -> Run:
    """The model (placed for --dist before the optimizer is made), the optimizer, the data
    generator and, resuming, the checkpoint's state; the run's header printed."""
    activations.manual_seed(args.seed)
    model = prep.source.build(args, fresh=prep.resume is None)
    # owners of parameters and where each module runs (for the schedule, if any)
    def adamw(params, delay=0, compensation=None):   # the loop's optimizer, or a pipeline stage's
        return AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=args.weight_decay,
                     compensation=compensation, delay=delay)
    # pb and local: the pipeline's per-stage optimizers update during the step (one per stage)
    pipe = pipelined.place(model, args.dist, args.stages, prep.schedule, adamw, args.grad_clip,
                           args.compensation)
    opt = pipe.optimizer if pipelined.updates(prep.schedule) else adamw(model.parameters())
    run = Run(args, out, prep, model, opt, np.random.default_rng(args.seed), 0, model.flops_per_token(args.seq_len),
              pipe, log=prep.log)
    if prep.resume is not None:
        meta = load_training_state(prep.ckpt_path, model, opt, run.data_rng, prep.resume)
        prep.resume = None  # the model and optimizer hold the tensors now
        run.start = run.step = run.last_good = int(meta["step"])
        print(f"resumed from {prep.ckpt_path} at step {run.start}", file=out, flush=True)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {prep.source.describe()}, {n_params / 1e6:.2f} M parameters, {args.dtype}; {rt!r}",
          file=out, flush=True)
    print(f"data: {len(prep.corpus.train):,} train / {len(prep.corpus.val):,} val tokens; {run.tokens_per_step} "
          f"tokens per step ({args.micro_batches} micro-batches of {args.batch} x {args.seq_len})", file=out, flush=True)
    note = blas_note()
    if note:
        print(f"note: {note}", file=out, flush=True)
    if args.dist in ("pipeline", "pipeline+data") and world_size() > 1 and args.micro_batches == 1:
        print("note: with one micro-batch the pipeline stages run one after the other; --micro-batches 4 "
              "(with a 4x smaller --batch for the same tokens per step) lets them overlap", file=out, flush=True)
    if args.progress:
        run.bar = tqdm(total=args.steps, initial=run.start, desc="train", unit="step", dynamic_ncols=True,
                       file=sys.stderr)
    if run.log is not None:
        run.log.update(**environment(), n_params=n_params, model=prep.source.describe(), runtime=repr(rt),
                       world_size=world_size(), tokens_per_step=run.tokens_per_step, flops_per_token=run.flops_per_token)
        print(f"run: {run.log.directory} (metrics.jsonl{', TensorBoard events' if args.tensorboard else ''}; "
              f"tiletrain runs show {run.log.directory})", file=out, flush=True)
    if simulated_machine():
        print(f"note: simulated on machine {simulated_machine()!r}: times and tokens/s are on the simulated "
              "clock; kernels do not run (losses are meaningless), so sampling, NaN checks and checkpoints are "
              "skipped", file=out, flush=True)
    run.t_start = run.t_last = clock()
    return run


def clock() -> float:
    """The training loop's clock in seconds: tiletrain.time(), real time or under simulation
    StarPU's simulated clock."""
    return tt.time()


def step(run: Run) -> tuple[float, float]:
    """One optimizer step: every micro-batch submitted before any loss is read (they
    overlap), the update, then the mean loss read; (loss, learning rate)."""
    args, model, opt = run.args, run.model, run.opt
    lr = cosine_with_warmup(run.step, lr=args.lr, warmup=args.warmup, total=args.steps, min_lr=args.min_lr)
    for g in opt.param_groups:
        g["lr"] = lr
    batches = [run.prep.corpus.batch("train", args.batch, args.seq_len, run.data_rng)
               for _ in range(args.micro_batches)]
    # the pipeline schedule's actions, or per micro-batch one shard per data-parallel replica:
    # each replica's forward and backward run on its ranks, the partial gradients are reduced
    # on each parameter's owner
    micro = pipelined.step(model, run.pipe, batches)
    if not pipelined.updates(run.prep.schedule):   # pb, local: the stages updated (and clipped) already
        if args.grad_clip > 0:
            run.grad_norm = clip_grad_norm_(model.parameters(), args.grad_clip)  # read (logged) after it
        opt.step()
        opt.zero_grad()
    value = float(np.mean([float(v) for v in micro]))
    if not math.isfinite(value) and not simulated_machine():
        raise FloatingPointError(f"the training loss became {value} at step {run.step}; lower --lr")
    return value, lr


def after_step(run: Run, value: float, lr: float, interrupted: bool) -> None:
    """The step counted: progress, then validation and a checkpoint every --eval-every steps,
    and whether to stop (Ctrl-C, --stop-after)."""
    args = run.args
    now = clock()
    run.step += 1
    run.train_losses.append(value)
    run.tokens_done += run.tokens_per_step
    # throughput from the spacing of the last step completions: a loss can be read before its
    # step's backward and update have run, so one step's own time under-counts right after a
    # drain (an evaluation) and over-counts otherwise
    run.ends.append(now)
    if run.bar is not None:
        run.bar.update(1)
        rate = {}
        if len(run.ends) >= 2:
            dt = (run.ends[-1] - run.ends[0]) / (len(run.ends) - 1)
            rate = dict(tok_s=f"{run.tokens_per_step / dt:,.0f}",
                        gflops=f"{run.flops_per_token * run.tokens_per_step / dt / 1e9:.1f}")
        run.bar.set_postfix(loss=f"{value:.4f}", **rate, lr=f"{lr:.2e}")
    val = None
    if args.eval_every and (run.step % args.eval_every == 0 or run.step == args.steps):
        run.ends.clear()  # the evaluation's time is not training throughput
        val = run.val_losses[run.step] = evaluate(run.model, run.prep.corpus, args,
                                                  np.random.default_rng(args.seed + 1))
        run.say(f"step {run.step}: train loss {value:.4f}, val loss {val:.4f}")
    record(run, value, lr, val, now)  # before the checkpoint: a resume drops lines after its step
    if val is not None and run.prep.ckpt_path is not None and not simulated_machine():
        save(run, {"train": value, "val": val})
    if interrupted or (args.stop_after is not None and run.step - run.start >= args.stop_after):
        run.stopped, run.interrupted = True, interrupted
    # the next step's time starts at this step's completion (reading the gradient norm and
    # the bookkeeping are training time), or after the evaluation and checkpoint (they are not)
    run.t_last = clock() if val is not None else now


def evaluate(model, corpus, args: TrainArgs, rng: np.random.Generator) -> float:
    """Mean validation loss over --eval-batches batches (the model in eval mode meanwhile)."""
    model.eval()
    with tt.no_grad():
        losses = [model.loss(*corpus.batch("val", args.batch, args.seq_len, rng)) for _ in range(args.eval_batches)]
        value = float(np.mean([float(v) for v in losses]))
    model.train()
    return value


def save(run: Run, losses: dict) -> None:
    """The run's checkpoint; a write error says which checkpoint is the last good one."""
    path = run.prep.ckpt_path
    try:
        save_training_state(path, run.model, run.opt, run.args, run.step, run.data_rng, losses,
                            run.prep.source.tokenizer)
    except ck.CheckpointWriteError as exc:  # one line: what, where, and what is left
        good = (f"the last good checkpoint is {path} at step {run.last_good}" if run.last_good is not None
                else "no checkpoint was written in this run")
        raise ck.CheckpointWriteError(f"{exc} (at step {run.step}); {good}") from None
    run.last_good = run.step


def finish(run: Run) -> TrainResult:
    """The last checkpoint (unless the last evaluation wrote it), throughput, and a sample of
    the trained model (not when stopped early)."""
    args, path = run.args, run.prep.ckpt_path
    if simulated_machine():
        path = None  # a simulated run's values are meaningless: no checkpoint, no sample (setup said so)
    if run.bar is not None:
        run.bar.close()
    elapsed = clock() - run.t_start
    if path is not None and (run.stopped or not args.eval_every or run.step % args.eval_every):
        save(run, {"train": run.train_losses[-1] if run.train_losses else None})
    tps = run.tokens_done / elapsed if elapsed > 0 else 0.0
    gflops = run.flops_per_token * tps / 1e9
    print(f"{'stopped' if run.stopped else 'done'} at step {run.step}: {tps:,.0f} tokens/s, {gflops:.1f} GFLOP/s"
          + (f"; checkpoint {path}" if path else ""), file=run.out, flush=True)
    if run.log is not None:
        run.log.update(last={"step": run.step, "tokens_per_s": tps, "gflops": gflops, "elapsed_s": elapsed,
                             "stopped": run.stopped, "interrupted": run.interrupted})
    sample = None
    if args.sample_tokens > 0 and not run.stopped and not simulated_machine():
        gen = GenerationConfig.from_keywords(args.sample_tokens, temperature=0.8)
        sample = sample_text(run.model, run.prep.source.tokenizer, "def ", gen, seed=args.seed)[0][0]
        print("sample:\n" + sample, file=run.out, flush=True)
        if run.log is not None:
            run.log.text("sample", sample, run.step)
    return TrainResult(run.step, run.train_losses, run.val_losses, tps, gflops, run.stopped,
                       str(path) if path else None, sample, run.interrupted)


class _StopFlag:
    """First Ctrl-C asks the loop to stop at the next step boundary (after a checkpoint);
    a second one interrupts at once."""

    def __init__(self):
        self.stop = False
        self._old = None

    def __enter__(self):
        def handler(signum, frame):
            if self.stop:
                raise KeyboardInterrupt
            self.stop = True
            print("\ntiletrain: stopping after this step (Ctrl-C again to abort)", file=sys.stderr, flush=True)
        try:
            self._old = signal.signal(signal.SIGINT, handler)
        except ValueError:  # not in the main thread
            self._old = None
        return self

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def _agree_up_front(error: Exception | None, args: TrainArgs, prep: Prepared | None = None) -> None:
    """Under mpirun, right after init: every rank's up-front checks (checkpoint directory
    writable, resume checkpoint readable, data readable) and its options (but the checkpoint
    directory, which may be node-local) are compared collectively, so that when one rank's
    check failed, or the ranks got different options, every rank stops together -- after a
    clean collective shutdown, before any step -- instead of one rank failing while the
    others wait for it."""
    options = {k: v for k, v in dataclasses.asdict(args).items() if k not in ("progress", "ckpt_dir", "run_dir")}
    table = gather_per_rank([0.0 if error else 1.0, float(zlib.crc32(repr(sorted(options.items())).encode()))])
    failed = [r for r in range(len(table)) if table[r, 0] == 0]
    differ = [r for r in range(len(table)) if table[r, 1] != table[0, 1]]
    if not failed and not differ:
        return
    tt.shutdown()  # every rank agrees to stop: nothing waits elsewhere
    if prep is not None and prep.log is not None:
        prep.log.close()
    if error is not None:
        raise error
    if failed:
        time.sleep(0.5)  # the failing rank's own message comes first in the job's output
        raise RuntimeError(f"rank {failed[0]} failed its checks before training (its error is printed by "
                           "that rank); every rank stops")
    raise ValueError(f"the ranks were given different training options (rank {differ[0]}'s differ from rank 0's): "
                     "pass the same options to every rank")


# -- the run directory (tiletrain.utils.runlog; docs/runs.md)

def run_dir_of(args: TrainArgs, source: ModelSource) -> Path:
    """--run-dir, else --ckpt-dir, else a new runs/<date>-<time>-<model> (made unique)."""
    if args.run_dir or args.ckpt_dir:
        return Path(args.run_dir or args.ckpt_dir)
    base = Path("runs") / f"{datetime.datetime.now():%Y%m%d-%H%M%S}-{source.model_type}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def open_run_log(args: TrainArgs, source: ModelSource, resume: tuple[dict, dict] | None, out) -> RunLogger | None:
    """Rank 0's RunLogger for the run (others: None): a resumed run continues its
    metrics.jsonl from the checkpoint's step (lines after it dropped)."""
    if rank() != 0:
        return None
    step = resume[1]["step"] if resume is not None else None
    directory = run_dir_of(args, source)
    # a run that was stopped before its first checkpoint (no --resume possible) starts over in
    # its --ckpt-dir (as `make train` does then) instead of being refused
    orphan = (step is None and args.ckpt_dir is not None and directory == Path(args.ckpt_dir)
              and not (directory / ck.CHECKPOINT_NAME).exists() and (directory / METRICS_NAME).exists())
    if orphan and not args.overwrite:
        print(f"note: {directory} holds the metrics of a run stopped before its first checkpoint: starting over",
              file=out, flush=True)
    log = RunLogger(directory, dataclasses.asdict(args), resume_step=step, overwrite=args.overwrite or orphan,
                    tensorboard=args.tensorboard, seed=args.seed, rank=0,
                    extra={"model_type": source.model_type, "model_config": source.config,
                           "init_from": source.init_from})
    if step is not None and not log.had_metrics:
        print(f"note: {log.directory} has no metrics of the steps before {step} (a run of an older tiletrain): "
              f"metrics.jsonl starts at step {step + 1}", file=out, flush=True)
    elif log.dropped:
        print(f"note: dropped {log.dropped} lines of {log.directory / 'metrics.jsonl'} logged after the checkpoint's "
              f"step {step} (they are trained again)", file=out, flush=True)
    return log


def peak_rss_bytes() -> int:
    """This process' peak resident memory so far, as the kernel measured it (getrusage)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # macOS: bytes; Linux: KiB


def record(run: Run, value: float, lr: float, val: float | None, now: float) -> None:
    """The step's line of metrics.jsonl: losses, learning rate, gradient norm (--grad-clip >
    0), its measured time (the spacing of this step's completion after the previous one's:
    evaluations and checkpoints are not counted; the spacing, not the time to this step's loss
    read alone, because a loss can be read before its step's backward and update have run)
    and the throughput it gives, the process' peak memory, the tile buffers' peak over the step (when the buffer
    pool counts it), the training time so far (over resumes)."""
    norm = float(run.grad_norm) if run.grad_norm is not None else None  # every rank reads it (collective)
    run.grad_norm = None
    if run.log is None:
        return
    dt = now - run.t_last
    tps = run.tokens_per_step / dt if dt > 0 else None
    mem = tt.current().memory()
    tt.current().reset_peak_memory()
    values = dict(train_loss=value, val_loss=val, lr=lr, grad_norm=norm, tokens_per_s=tps,
                  gflops=run.flops_per_token * tps / 1e9 if tps else None, step_time_s=dt,
                  peak_memory_bytes=peak_rss_bytes(), peak_tile_bytes=mem["peak_allocated_bytes"],
                  elapsed_s=run.log.base_elapsed + (now - run.t_start),
                  traced=True if run.step == run.args.trace_step else None)
    run.log.log(run.step, **{k: v for k, v in values.items() if v is not None})


def traced_step(run: Run) -> tuple[float, float]:
    """``step`` with its tasks recorded (waiting for the earlier ones first, for its own at the
    end): its Perfetto trace and metrics go into the run directory."""
    with trace.recording() as rec:
        out = step(run)
    if run.log is not None:
        n = run.step + 1
        m = run.log.save_trace(n, rec.trace)
        run.say(f"step {n} traced: {run.log.directory / f'trace-step{n}.json'} (open in ui.perfetto.dev); "
                f"{m['ntasks']} tasks, makespan {m['makespan_us'] / 1e3:.1f} ms, critical path "
                f"{m['critical_path_us'] / 1e3:.1f} ms, mean idle {m['mean_idle_fraction']:.0%}; metrics in "
                f"trace-step{n}-metrics.json")
    return out
