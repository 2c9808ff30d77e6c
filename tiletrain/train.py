"""The training command: a GPT on a text corpus, with micro-batches, AdamW, a cosine
schedule, periodic validation, atomic checkpoints, exact resume and a sample at the end.

Used by `tiletrain train` / `make train`; `train(TrainArgs(...))` from Python."""
from __future__ import annotations

import collections
import dataclasses
import math
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import checkpoint as ck

OPTIM_PREFIX = "optimizer."
# metadata a training checkpoint must hold to resume ("a.b": key b under a) / to generate
RESUME_KEYS = ("config", "train_args", "step", "optimizer.steps", "optimizer.param_groups", "data_rng",
               "dropout_rng")
MODEL_KEYS = ("config", "config.vocab_size", "train_args")


@dataclass
class TrainArgs:
    # model
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 256
    block_size: int | None = None   # default: seq_len
    dropout: float = 0.0
    # data
    data: list[str] = field(default_factory=list)  # text files; empty: the Python stdlib sources
    max_bytes: int | None = 8_000_000
    val_fraction: float = 0.05
    # optimisation
    batch: int = 8
    micro_batches: int = 1
    seq_len: int = 128
    steps: int = 300
    stop_after: int | None = None  # stop (with a checkpoint) after this many steps in this run
    lr: float = 2e-3
    min_lr: float = 2e-4
    warmup: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    # runtime
    tiles: tuple[int, int, int] | None = None  # (batch, time, width) tile sizes; None: defaults
    sched: str | None = None
    ncpu: int | None = None
    dtype: str = "float32"
    seed: int = 0
    dist: str = "single"  # under mpirun: single | pipeline | data | pipeline+data (tiletrain/parallel.py)
    stages: int | None = None  # pipeline+data: pipeline stages (default 2); the rest are replicas
    # checkpoints, evaluation, output
    ckpt_dir: str | None = None
    resume: bool = False
    eval_every: int = 50
    eval_batches: int = 4
    sample_tokens: int = 200
    progress: bool = True

    def model_config(self, vocab_size: int) -> dict:
        return dict(vocab_size=vocab_size, block_size=self.block_size or self.seq_len, n_layer=self.n_layer,
                    n_head=self.n_head, n_embd=self.n_embd, dropout=self.dropout, bias=True)

    def validate(self) -> None:
        """Every option checked (ranges, finiteness, combinations) before any work: the one
        place for `tiletrain train` and train(); ValueError naming the option."""
        for name, limits in TRAIN_LIMITS.items():
            check_option(f"--{name.replace('_', '-')}", getattr(self, name), *limits)
        if self.n_embd % self.n_head:
            raise ValueError(f"--n-embd {self.n_embd} must be divisible by --n-head {self.n_head}")
        if self.block_size is not None and self.seq_len > self.block_size:
            raise ValueError(f"--seq-len {self.seq_len} exceeds --block-size {self.block_size}")
        from .parallel import MODES
        if self.dist not in MODES:
            raise ValueError(f"--dist must be one of {', '.join(MODES)}, got {self.dist!r}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"--dtype must be float32 or float64, got {self.dtype!r}")
        if self.min_lr > self.lr:
            raise ValueError(f"--min-lr {self.min_lr} must not exceed --lr {self.lr}")
        if self.resume and not self.ckpt_dir:
            raise ValueError("--resume needs --ckpt-dir")
        if self.tiles is not None:
            if len(self.tiles) != 3 or any(t < 1 for t in self.tiles):
                raise ValueError(f"--tiles must be three positive sizes B,T,C, got {self.tiles}")


# Allowed values of TrainArgs' numeric fields: (low, high, low excluded, high excluded),
# None: unbounded; a field set to None is skipped (optional).  --lr is at most 1: AdamW moves
# every weight by about lr per step, so larger rates only destroy the model.
TRAIN_LIMITS = {
    **{name: (1, None) for name in ("n_layer", "n_head", "n_embd", "block_size", "max_bytes", "batch",
                                    "micro_batches", "seq_len", "steps", "stop_after", "ncpu", "stages",
                                    "eval_batches")},
    **{name: (0, None) for name in ("warmup", "eval_every", "sample_tokens", "seed", "weight_decay",
                                    "grad_clip", "min_lr")},  # eval_every 0: never; grad_clip 0: off
    "dropout": (0, 1, False, True),
    "val_fraction": (0, 1, True, True),
    "lr": (0, 1, True, False),
}


def check_option(option: str, value, low=None, high=None, low_open: bool = False, high_open: bool = False) -> None:
    """ValueError unless `value` (None: not given, fine) is a finite number in the range."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{option} must be a number, got {value!r}")
    ok = math.isfinite(value)
    ok = ok and (low is None or (value > low if low_open else value >= low))
    ok = ok and (high is None or (value < high if high_open else value <= high))
    if not ok:
        if high is None:
            want = f"{'>' if low_open else '>='} {low}"
        else:
            want = f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        raise ValueError(f"{option} must be {want}, got {value}")


def _rng_state(rng: np.random.Generator) -> dict:
    return rng.bit_generator.state


def _set_rng_state(rng: np.random.Generator, state: dict) -> None:
    rng.bit_generator.state = state


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


def build_model(args: TrainArgs, vocab_size: int, cfg: dict | None = None):
    from .nn import GPT, GPTConfig
    config = GPTConfig(**(cfg or args.model_config(vocab_size)))
    return GPT(config, tiling=make_tiling(args, config), dtype=np.dtype(args.dtype), seed=args.seed)


def make_tiling(args: TrainArgs, config):
    from .nn import Tiling
    if args.tiles is None:
        return Tiling()  # defaults chosen from the model and each batch's shape
    b, t, c = args.tiles
    return Tiling(batch=b, time=t, width=c)


def save_training_state(path: Path, model, opt, args: TrainArgs, step: int, rng: np.random.Generator,
                        losses: dict) -> None:
    from .ops import activations
    tensors = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}  # tied to wte
    osd = opt.state_dict()
    opt_meta = {"param_groups": osd["param_groups"], "steps": {}}
    for idx, st in osd["state"].items():
        for name, value in st.items():
            if name == "step":
                opt_meta["steps"][str(idx)] = int(value)
            else:
                tensors[f"{OPTIM_PREFIX}{idx}.{name}"] = value
    meta = {
        "config": dataclasses.asdict(model.config),
        "train_args": {k: v for k, v in dataclasses.asdict(args).items()},
        "step": step,
        "optimizer": opt_meta,
        "data_rng": _rng_state(rng),
        "dropout_rng": activations.default_generator.get_state(),
        "losses": losses,
    }
    # under MPI, state_dict() above was collective (every rank holds the full values); the
    # file is written once, by rank 0, atomically (checkpoint.write_atomic)
    from .distribution import rank
    if rank() == 0:
        ck.save(path, tensors, meta)


def load_training_state(path: Path, model, opt, rng: np.random.Generator) -> dict:
    from .ops import activations
    arrays, meta = ck.load(path, RESUME_KEYS)
    arrays = {k: arrays[k] for k in sorted(arrays)}  # safetensors' order varies by process; MPI needs one
    weights = {k: v for k, v in arrays.items() if not k.startswith(OPTIM_PREFIX)}
    weights["lm_head.weight"] = weights.get("transformer.wte.weight")
    try:
        model.load_state_dict(weights)
    except (ValueError, KeyError, TypeError) as exc:
        raise ck.CheckpointError(f"{path}: the weights do not fit this model ({exc})") from None
    state: dict[int, dict[str, Any]] = {}
    for k, v in arrays.items():
        if k.startswith(OPTIM_PREFIX):
            idx, name = k[len(OPTIM_PREFIX):].split(".", 1)
            state.setdefault(int(idx), {})[name] = v
    for idx, step in meta["optimizer"]["steps"].items():
        state.setdefault(int(idx), {})["step"] = step
    try:
        opt.load_state_dict({"state": state, "param_groups": meta["optimizer"]["param_groups"]})
    except (ValueError, KeyError, TypeError) as exc:
        raise ck.CheckpointError(f"{path}: the optimizer state does not fit ({exc})") from None
    _set_rng_state(rng, meta["data_rng"])
    activations.default_generator.set_state(meta["dropout_rng"])
    return meta


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


def evaluate(model, corpus, args: TrainArgs, rng: np.random.Generator) -> float:
    import tiletrain as tt
    model.eval()
    with tt.no_grad():
        losses = [model.loss(*corpus.batch("val", args.batch, args.seq_len, rng)) for _ in range(args.eval_batches)]
        value = float(np.mean([float(v) for v in losses]))
    model.train()
    return value


def _agree_up_front(error: Exception | None, args: TrainArgs) -> None:
    """Under mpirun, right after init: every rank's up-front checks (checkpoint directory
    writable, resume checkpoint readable, data readable) and its options (but the checkpoint
    directory, which may be node-local) are compared
    collectively, so that when one rank's check failed, or the ranks got different options,
    every rank stops together -- after a clean collective shutdown, before any step --
    instead of one rank failing while the others wait for it."""
    import zlib

    import tiletrain as tt
    from .runtime import gather_per_rank
    options = {k: v for k, v in dataclasses.asdict(args).items() if k not in ("progress", "ckpt_dir")}
    table = gather_per_rank([0.0 if error else 1.0, float(zlib.crc32(repr(sorted(options.items())).encode()))])
    failed = [r for r in range(len(table)) if table[r, 0] == 0]
    differ = [r for r in range(len(table)) if table[r, 1] != table[0, 1]]
    if not failed and not differ:
        return
    tt.shutdown()  # every rank agrees to stop: nothing waits elsewhere
    if error is not None:
        raise error
    if failed:
        time.sleep(0.5)  # the failing rank's own message comes first in the job's output
        raise RuntimeError(f"rank {failed[0]} failed its checks before training (its error is printed by "
                           "that rank); every rank stops")
    raise ValueError(f"the ranks were given different training options (rank {differ[0]}'s differ from rank 0's): "
                     "pass the same options to every rank")


def train(args: TrainArgs, out=None) -> TrainResult:
    """Run training; prints progress to `out` (default stderr for the bar, stdout for text)."""
    import tiletrain as tt
    from .data import ByteTokenizer, load_corpus
    from .optim import AdamW, clip_grad_norm_, cosine_with_warmup
    from .ops import activations

    from .distribution import rank, world_size
    from .parallel import check_fit, microbatch, n_replicas, place, replica, shards

    args.validate()
    # a distribution that does not fit the job: the same message on every rank, before any task
    check_fit(args.dist, n_layer=args.n_layer, batch=args.batch, stages=args.stages)
    out = out or sys.stdout
    if rank() != 0:  # under mpirun only rank 0 reports (every rank runs the same flow)
        import os
        out = open(os.devnull, "w")
        args = dataclasses.replace(args, progress=False)
    up_front_error = None  # under mpirun: agreed by every rank before any step (_agree_up_front)
    try:
        ckpt_path = ck.check_writable(args.ckpt_dir) / ck.CHECKPOINT_NAME if args.ckpt_dir else None
        resume_meta = None
        if args.resume:
            if not ckpt_path.is_file():
                raise ck.CheckpointError(f"--resume: no checkpoint at {ckpt_path}")
            _, resume_meta = ck.load(ckpt_path, RESUME_KEYS)
            done = resume_meta["step"]
            if isinstance(done, bool) or not isinstance(done, int) or done < 0:
                raise ck.CheckpointError(f"{ckpt_path}: checkpoint metadata has a bad step {done!r}")
            if done > args.steps:
                raise ValueError(f"--resume: {ckpt_path} is at step {done}, beyond --steps {args.steps} "
                                 f"(the schedule spans --steps: pass --steps {done} or more)")
            if done == args.steps:
                print(f"training is already complete: {ckpt_path} is at step {done} of --steps {args.steps} "
                      f"(pass a larger --steps to train on)", file=out, flush=True)
                return TrainResult(done, [], {}, 0.0, 0.0, False, str(ckpt_path), None)
        corpus = load_corpus(args.data or None, val_fraction=args.val_fraction, max_bytes=args.max_bytes)
        tok = ByteTokenizer()
        if len(corpus.val) <= args.seq_len + 1:
            raise ValueError(f"the validation split has {len(corpus.val)} tokens, too few for --seq-len "
                             f"{args.seq_len}: use more data or a larger --val-fraction")
    except Exception as exc:
        if world_size() == 1:
            raise
        up_front_error = exc
    rt = tt.init(ncpu=args.ncpu, sched=args.sched)
    if world_size() > 1:
        _agree_up_front(up_front_error, args)
    try:
        cfg = resume_meta["config"] if resume_meta else None
        if cfg is not None:
            mine = args.model_config(tok.vocab_size)
            diff = {k: (cfg.get(k), v) for k, v in mine.items() if cfg.get(k) != v}
            if diff:
                raise ck.CheckpointError(
                    f"{ckpt_path} holds a model with a different configuration: "
                    + ", ".join(f"{k} checkpoint={a} requested={b}" for k, (a, b) in diff.items()))
        activations.manual_seed(args.seed)
        model = build_model(args, tok.vocab_size, cfg)
        place(model, args.dist, args.stages)  # owners of parameters and where each module runs (before the optimizer)
        opt = AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=args.weight_decay)
        data_rng = np.random.default_rng(args.seed)
        eval_rng_seed = args.seed + 1
        start = 0
        if resume_meta is not None:
            meta = load_training_state(ckpt_path, model, opt, data_rng)
            start = int(meta["step"])
            print(f"resumed from {ckpt_path} at step {start}", file=out, flush=True)
        n_params = sum(p.numel() for p in model.parameters())
        tokens_per_step = args.batch * args.micro_batches * args.seq_len
        fpt = model.flops_per_token(args.seq_len)  # the model's one formula (nn/gpt.py)
        print(f"model: {model.config.n_layer} layers x {model.config.n_embd} wide, {model.config.n_head} heads, "
              f"{n_params / 1e6:.2f} M parameters, {args.dtype}; {rt!r}", file=out, flush=True)
        print(f"data: {len(corpus.train):,} train / {len(corpus.val):,} val tokens; {tokens_per_step} tokens "
              f"per step ({args.micro_batches} micro-batches of {args.batch} x {args.seq_len})", file=out, flush=True)
        if args.dist in ("pipeline", "pipeline+data") and world_size() > 1 and args.micro_batches == 1:
            print("note: with one micro-batch the pipeline stages run one after the other; --micro-batches 4 "
                  "(with a 4x smaller --batch for the same tokens per step) lets them overlap", file=out, flush=True)

        train_losses: list[float] = []
        val_losses: dict[int, float] = {}
        bar = None
        if args.progress:
            from tqdm import tqdm
            bar = tqdm(total=args.steps, initial=start, desc="train", unit="step", dynamic_ncols=True,
                       file=sys.stderr)
        t_start, tokens_done = time.perf_counter(), 0
        ends = collections.deque(maxlen=11)  # wall times of the last step completions
        step = start
        stopped = interrupted = False
        last_good = start if resume_meta is not None else None  # step of the last checkpoint written

        def checkpoint(losses: dict) -> None:
            nonlocal last_good
            try:
                save_training_state(ckpt_path, model, opt, args, step, data_rng, losses)
            except ck.CheckpointWriteError as exc:  # one line: what, where, and what is left
                good = (f"the last good checkpoint is {ckpt_path} at step {last_good}" if last_good is not None
                        else "no checkpoint was written in this run")
                raise ck.CheckpointWriteError(f"{exc} (at step {step}); {good}") from None
            last_good = step

        with _StopFlag() as stop:
            while step < args.steps:
                lr = cosine_with_warmup(step, lr=args.lr, warmup=args.warmup, total=args.steps, min_lr=args.min_lr)
                for g in opt.param_groups:
                    g["lr"] = lr
                # every micro-batch is submitted before any loss is read: they overlap
                micro = []
                for k in range(args.micro_batches):
                    x, y = corpus.batch("train", args.batch, args.seq_len, data_rng)
                    # one shard per data-parallel replica (one in single and pipeline mode):
                    # its forward and backward run on the replica's ranks; the partial
                    # gradients are reduced on each parameter's owner
                    n = args.micro_batches * n_replicas()
                    for d, xs, ys in shards(x, y):
                        with replica(d), microbatch(k):
                            loss = model.loss(xs, ys)
                            (loss if n == 1 else tt.scale(loss, 1.0 / n)).backward()
                        micro.append(loss)
                if args.grad_clip > 0:
                    clip_grad_norm_(model.parameters(), args.grad_clip)
                opt.step()
                opt.zero_grad()
                value = float(np.mean([float(v) for v in micro]))
                del micro, loss
                if not math.isfinite(value):
                    raise FloatingPointError(f"the training loss became {value} at step {step}; lower --lr")
                step += 1
                train_losses.append(value)
                tokens_done += tokens_per_step
                # throughput from the spacing of the last step completions: a loss can be read
                # before its step's backward and update have run, so one step's own time
                # under-counts right after a drain (an evaluation) and over-counts otherwise
                ends.append(time.perf_counter())
                if bar is not None:
                    bar.update(1)
                    rate = {}
                    if len(ends) >= 2:
                        dt = (ends[-1] - ends[0]) / (len(ends) - 1)
                        rate = dict(tok_s=f"{tokens_per_step / dt:,.0f}", gflops=f"{fpt * tokens_per_step / dt / 1e9:.1f}")
                    bar.set_postfix(loss=f"{value:.4f}", **rate, lr=f"{lr:.2e}")
                last = step == args.steps
                if args.eval_every and (step % args.eval_every == 0 or last):
                    ends.clear()  # the evaluation's time is not training throughput
                    val_losses[step] = evaluate(model, corpus, args, np.random.default_rng(eval_rng_seed))
                    msg = f"step {step}: train loss {value:.4f}, val loss {val_losses[step]:.4f}"
                    (bar.write(msg) if bar is not None else print(msg, file=out, flush=True))
                    if ckpt_path is not None:
                        checkpoint({"train": value, "val": val_losses[step]})
                if stop.stop or (args.stop_after is not None and step - start >= args.stop_after):
                    stopped, interrupted = True, stop.stop
                    break
        if bar is not None:
            bar.close()
        elapsed = time.perf_counter() - t_start
        if ckpt_path is not None and (stopped or not args.eval_every or step % args.eval_every):
            checkpoint({"train": train_losses[-1] if train_losses else None})
        tps = tokens_done / elapsed if elapsed > 0 else 0.0
        print(f"{'stopped' if stopped else 'done'} at step {step}: {tps:,.0f} tokens/s, "
              f"{fpt * tps / 1e9:.1f} GFLOP/s" + (f"; checkpoint {ckpt_path}" if ckpt_path else ""),
              file=out, flush=True)
        sample = None
        if args.sample_tokens > 0 and not stopped:
            sample = generate(model, tok.encode("def "), args.sample_tokens, temperature=0.8,
                              rng=np.random.default_rng(args.seed))
            print("sample:\n" + sample, file=out, flush=True)
        return TrainResult(step, train_losses, val_losses, tps, fpt * tps / 1e9, stopped,
                           str(ckpt_path) if ckpt_path else None, sample, interrupted)
    finally:
        tt.shutdown()


def generate(model, prompt_ids, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
             rng: np.random.Generator | None = None) -> str:
    """Sample tokens from the model (greedy when temperature == 0) and decode the result."""
    import tiletrain as tt
    from .data import ByteTokenizer

    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    rng = rng or np.random.default_rng(0)
    ids = list(int(i) for i in prompt_ids) or [10]
    bs = model.config.block_size
    was_training = model.training
    model.eval()
    with tt.no_grad():
        for _ in range(max_new_tokens):
            ctx = np.asarray(ids[-bs:], dtype=np.int64)[None, :]
            logits = model.forward(ctx).numpy()[0, -1].astype(np.float64)
            if temperature == 0:
                nxt = int(np.argmax(logits))
            else:
                logits = logits / temperature
                if top_k is not None and top_k < logits.size:
                    cut = np.partition(logits, -top_k)[-top_k]
                    logits = np.where(logits < cut, -np.inf, logits)
                p = np.exp(logits - logits.max())
                p /= p.sum()
                nxt = int(rng.choice(p.size, p=p))
            ids.append(nxt)
    if was_training:
        model.train()
    return ByteTokenizer().decode(ids)


def load_for_generation(ckpt_dir: str, ncpu=None, tiles=None):
    """Start a runtime and build the checkpoint's model with its weights."""
    import tiletrain as tt
    path = Path(ckpt_dir) / ck.CHECKPOINT_NAME
    arrays, meta = ck.load(path, MODEL_KEYS)
    targs = TrainArgs(**{k: (tuple(v) if k == "tiles" and v is not None else v)
                         for k, v in meta["train_args"].items() if k in {f.name for f in dataclasses.fields(TrainArgs)}})
    if tiles is not None:
        targs.tiles = tiles
    targs.batch = 1
    tt.init(ncpu=ncpu)
    model = build_model(targs, meta["config"]["vocab_size"], meta["config"])
    weights = {k: v for k, v in arrays.items() if not k.startswith(OPTIM_PREFIX)}
    weights["lm_head.weight"] = weights["transformer.wte.weight"]
    model.load_state_dict(weights)
    return model, meta


