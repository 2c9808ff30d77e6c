"""The training command: a model (--arch, or fine-tuning a Hugging Face folder with
--init-from) on a text corpus (bytes, or a tokenizer.json), with micro-batches, AdamW, a
cosine schedule, periodic validation, atomic checkpoints, exact resume and a sample at the end.

Used by `tiletrain train` / `make train`; `train(TrainArgs(...))` from Python."""
from __future__ import annotations

import collections
import dataclasses
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import checkpoint as ck

OPTIM_PREFIX = "optimizer."
# metadata a training checkpoint must hold to resume ("a.b": key b under a) / to generate
RESUME_KEYS = ("config", "train_args", "step", "optimizer.steps", "optimizer.param_groups", "data_rng",
               "dropout_rng")
MODEL_KEYS = ("config", "config.vocab_size")  # generate/export need only the model's config


@dataclass
class TrainArgs:
    # model: an architecture from scratch (sized by its ARCHS[arch].sizes fields), or a HF folder
    arch: str = "gpt2"
    init_from: str | None = None    # a Hugging Face model folder to fine-tune (model, config, tokenizer)
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 256
    n_kv_head: int | None = None    # llama: key/value heads (grouped-query attention); None: n_head
    ffn: int | None = None          # llama: SwiGLU width; None: 8/3 n_embd rounded up to a multiple of 64
    block_size: int | None = None   # default: seq_len
    dropout: float = 0.0
    recompute: str = "none"  # activation recomputation: none | block | attention (GPTConfig.recompute)
    # data
    data: list[str] = field(default_factory=list)  # text files; empty: the Python stdlib sources
    tokenizer: str | None = None    # a tokenizer.json (or a folder holding one); None: bytes or init_from's
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
    mem_limit: str | None = None    # StarPU's CPU memory limit ("2G"; tt.init(mem_limit=...)); None: none
    ooc_dir: str | None = None      # with mem_limit: a disk node directory for evicted tiles
    dtype: str = "float32"
    seed: int = 0
    dist: str = "single"  # under mpirun: single | pipeline | data | pipeline+data (tiletrain/parallel.py)
    stages: int | None = None  # pipeline+data: pipeline stages (default 2); the rest are replicas
    # checkpoints, evaluation, output
    ckpt_dir: str | None = None
    resume: bool = False
    overwrite: bool = False         # replace a checkpoint in ckpt_dir (else refused unless resume)
    eval_every: int = 50
    eval_batches: int = 4
    sample_tokens: int = 200
    progress: bool = True

    def model_config(self, vocab_size: int) -> dict:
        """The --arch model's config (as a dict) for a vocabulary size."""
        return ARCHS[self.arch].config(self, vocab_size)

    def validate(self) -> None:
        """Every option checked (ranges, finiteness, combinations) before any work: the one
        place for `tiletrain train` and train(); ValueError naming the option."""
        for name, limits in TRAIN_LIMITS.items():
            check_option(f"--{name.replace('_', '-')}", getattr(self, name), *limits)
        if self.arch not in ARCHS:
            raise ValueError(f"--arch must be one of {', '.join(ARCHS)}, got {self.arch!r}")
        if self.init_from is None and self.n_embd % self.n_head:
            raise ValueError(f"--n-embd {self.n_embd} must be divisible by --n-head {self.n_head}")
        if self.arch == "llama" and self.init_from is None:
            if self.n_kv_head is not None and self.n_head % self.n_kv_head:
                raise ValueError(f"--n-kv-head {self.n_kv_head} must divide --n-head {self.n_head}")
            if (self.n_embd // self.n_head) % 2:
                raise ValueError(f"--n-embd / --n-head = {self.n_embd // self.n_head} must be even for llama "
                                 "(rotary embeddings rotate pairs)")
        if self.block_size is not None and self.seq_len > self.block_size:
            raise ValueError(f"--seq-len {self.seq_len} exceeds --block-size {self.block_size}")
        from .parallel import MODES
        if self.dist not in MODES:
            raise ValueError(f"--dist must be one of {', '.join(MODES)}, got {self.dist!r}")
        from .nn.gpt import RECOMPUTE
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"--recompute must be one of {', '.join(RECOMPUTE)}, got {self.recompute!r}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"--dtype must be float32 or float64, got {self.dtype!r}")
        if self.mem_limit is not None:
            from .config import parse_bytes
            parse_bytes(self.mem_limit, "--mem-limit")
        if self.ooc_dir is not None:
            if self.mem_limit is None:
                raise ValueError("--ooc-dir needs --mem-limit (tiles are evicted to disk only under a limit)")
            if not os.path.isdir(self.ooc_dir):
                raise ValueError(f"--ooc-dir {self.ooc_dir!r} is not an existing directory")
        if self.min_lr > self.lr:
            raise ValueError(f"--min-lr {self.min_lr} must not exceed --lr {self.lr}")
        if self.resume and not self.ckpt_dir:
            raise ValueError("--resume needs --ckpt-dir")
        if self.resume and self.overwrite:
            raise ValueError("--resume and --overwrite exclude each other")
        if self.tiles is not None:
            if len(self.tiles) != 3 or any(t < 1 for t in self.tiles):
                raise ValueError(f"--tiles must be three positive sizes B,T,C, got {self.tiles}")


@dataclass(frozen=True)
class Arch:
    """An architecture `tiletrain train --arch NAME` builds from scratch."""
    model_type: str                                  # key of tiletrain.nn.MODELS (config.json's model_type)
    sizes: tuple[str, ...]                           # TrainArgs fields (CLI flags) that size it
    config: Callable[["TrainArgs", int], dict]       # its config as a dict, for a vocabulary size


# --arch NAME -> Arch: one line per architecture
ARCHS = {
    "gpt2": Arch("gpt2", ("n_layer", "n_head", "n_embd", "dropout"), lambda a, vocab: dict(
        vocab_size=vocab, block_size=a.block_size or a.seq_len, n_layer=a.n_layer, n_head=a.n_head,
        n_embd=a.n_embd, dropout=a.dropout, bias=True)),
    "llama": Arch("llama", ("n_layer", "n_head", "n_kv_head", "n_embd", "ffn"), lambda a, vocab: dict(
        vocab_size=vocab, max_position_embeddings=a.block_size or a.seq_len, num_hidden_layers=a.n_layer,
        num_attention_heads=a.n_head, num_key_value_heads=a.n_kv_head or a.n_head, hidden_size=a.n_embd,
        intermediate_size=a.ffn or -(-8 * a.n_embd // 3 // 64) * 64)),
}

# model-size options of `tiletrain train`: TrainArgs field -> (type, help); the help names the
# architectures (ARCHS) that use it
MODEL_FLAGS = {
    "n_layer": (int, "transformer blocks"),
    "n_head": (int, "attention heads"),
    "n_embd": (int, "embedding width"),
    "n_kv_head": (int, "key/value heads, shared by groups of query heads (default: --n-head)"),
    "ffn": (int, "SwiGLU MLP width (default: 8/3 --n-embd rounded up to a multiple of 64)"),
    "dropout": (float, "dropout on the embeddings and residual branches (also when fine-tuning)"),
}


# Allowed values of TrainArgs' numeric fields: (low, high, low excluded, high excluded),
# None: unbounded; a field set to None is skipped (optional).  --lr is at most 1: AdamW moves
# every weight by about lr per step, so larger rates only destroy the model.
TRAIN_LIMITS = {
    **{name: (1, None) for name in ("n_layer", "n_head", "n_embd", "n_kv_head", "ffn", "block_size", "max_bytes", "batch",
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


def build_model(args: TrainArgs, model_type: str, cfg: dict):
    """A freshly initialised model of this type and config (a dict of its config class)."""
    from .nn.pretrained import model_class
    cls = model_class(model_type)
    config = cls.config_class(**run_options(args, cls, cfg))
    return cls(config, tiling=make_tiling(args, config), dtype=np.dtype(args.dtype), seed=args.seed)


# Config fields that are choices of a run, not of the model: the command line wins over a
# resumed checkpoint's value, and they are not compared when resuming.
RUN_OPTIONS = ("recompute",)


def run_options(args: TrainArgs, cls, cfg: dict) -> dict:
    """cfg with this run's RUN_OPTIONS (for model classes whose config has them); a
    non-default one the model does not have is refused."""
    have = {f.name for f in dataclasses.fields(cls.config_class)}
    out = dict(cfg)
    for name in RUN_OPTIONS:
        value, default = getattr(args, name), getattr(TrainArgs, name)
        if name in have:
            out[name] = value
        elif value != default:
            raise ValueError(f"--{name} {value} is not supported by {cls.__name__} models")
    return out


@dataclass
class ModelSource:
    """What `train` builds: an --arch model from scratch or the model of an --init-from
    folder, with its tokenizer; resolved (files read, sizes checked) before any work."""
    model_type: str
    config: dict                 # fields of the model's config class
    tokenizer: Any               # a tiletrain.data tokenizer
    init_from: str | None = None

    @classmethod
    def resolve(cls, args: TrainArgs) -> "ModelSource":
        from .data import TOKENIZER_NAME, load_tokenizer
        if args.init_from is None:
            tok = load_tokenizer(args.tokenizer)
            return cls(ARCHS[args.arch].model_type, args.model_config(tok.vocab_size), tok)
        from .nn.pretrained import model_class, read_hf_config
        hf = read_hf_config(args.init_from)
        config = dataclasses.asdict(model_class(hf.get("model_type")).config_from_hf(hf))
        if "dropout" in config:
            config["dropout"] = float(args.dropout)
        folder = Path(args.init_from) if Path(args.init_from).is_dir() else Path(args.init_from).parent
        tok_path = args.tokenizer
        if tok_path is None and (folder / TOKENIZER_NAME).is_file():
            tok_path = folder
        tok = load_tokenizer(tok_path)
        src = cls(hf["model_type"], config, tok, args.init_from)
        if tok.vocab_size > config["vocab_size"]:
            raise ValueError(f"--tokenizer {tok_path or '(bytes)'} has a vocabulary of {tok.vocab_size} tokens, "
                             f"larger than the model's vocab_size {config['vocab_size']} (--init-from {args.init_from})")
        if args.seq_len > src.context:
            raise ValueError(f"--seq-len {args.seq_len} exceeds the context length {src.context} of --init-from "
                             f"{args.init_from}")
        return src

    @property
    def n_layer(self) -> int:
        return self.config.get("n_layer", self.config.get("num_hidden_layers"))

    @property
    def context(self) -> int:
        return self.config.get("block_size", self.config.get("max_position_embeddings"))

    def describe(self) -> str:
        sizes = ", ".join(f"{k} {v}" for k, v in self.config.items())
        origin = f"from {self.init_from}" if self.init_from else "from scratch"
        return f"{self.model_type} {origin} ({sizes}), tokenizer {self.tokenizer!r}"

    def check_resume(self, meta: dict, path: Path) -> None:
        """CheckpointError unless the checkpoint holds this model type, config and tokenizer."""
        from .data import ByteTokenizer, Tokenizer
        kind = meta.get("model_type", "gpt2")  # checkpoints before --arch: GPT-2
        if kind != self.model_type:
            raise ck.CheckpointError(f"{path} holds a {kind} model, not the requested {self.model_type}")
        cfg = meta["config"]
        if not isinstance(cfg, dict):
            raise ck.CheckpointError(f"{path}: checkpoint metadata has a bad config {cfg!r:.100}")
        diff = {k: (cfg.get(k), v) for k, v in self.config.items() if cfg.get(k) != v and k not in RUN_OPTIONS}
        if diff:
            raise ck.CheckpointError(
                f"{path} holds a model with a different configuration: "
                + ", ".join(f"{k} checkpoint={a} requested={b}" for k, (a, b) in diff.items()))
        text = meta.get("tokenizer")
        theirs = (Tokenizer.from_str(text) if text else ByteTokenizer()).fingerprint
        if theirs != self.tokenizer.fingerprint:
            raise ck.CheckpointError(f"{path} was trained with a different tokenizer than {self.tokenizer!r}")

    def build(self, args: TrainArgs, fresh: bool):
        """The model: --init-from's weights when fresh, else initialised from the seed (a
        resumed run then loads the checkpoint's weights)."""
        if self.init_from is not None and fresh:
            from .nn import from_pretrained
            from .nn.pretrained import model_class
            return from_pretrained(self.init_from, dtype=np.dtype(args.dtype), tiling=make_tiling(args, None),
                                   **run_options(args, model_class(self.model_type), self.config))
        return build_model(args, self.model_type, self.config)


def make_tiling(args: TrainArgs, config):
    from .nn import Tiling
    if args.tiles is None:
        return Tiling()  # defaults chosen from the model and each batch's shape
    b, t, c = args.tiles
    return Tiling(batch=b, time=t, width=c)


def model_metadata(model, tokenizer=None) -> dict:
    """What rebuilds the model (generate, export): its model_type, its config, and the
    tokenizer.json text (None: bytes)."""
    from .nn import MODELS
    model_type = next((k for k, cls in MODELS.items() if type(model) is cls), None)
    if model_type is None:
        raise TypeError(f"{type(model).__name__} is not in tiletrain.nn.MODELS ({', '.join(MODELS)})")
    return {"model_type": model_type, "config": dataclasses.asdict(model.config),
            "tokenizer": tokenizer.to_str() if tokenizer is not None else None}


def save_training_state(path: Path, model, opt, args: TrainArgs, step: int, rng: np.random.Generator,
                        losses: dict, tokenizer=None) -> None:
    from .ops import activations
    from .nn.pretrained import model_tensors
    # the tensors themselves, streamed from their tiles into the file (no host copy of the
    # model); under MPI every rank takes part: the tiles go to rank 0 a block at a time
    tensors = model_tensors(model)  # a tied weight once
    osd = opt.state_dict(copy=False)
    opt_meta = {"param_groups": osd["param_groups"], "steps": {}}
    for idx, st in osd["state"].items():
        for name, value in st.items():
            if name == "step":
                opt_meta["steps"][str(idx)] = int(value)
            else:
                tensors[f"{OPTIM_PREFIX}{idx}.{name}"] = value
    meta = {
        **model_metadata(model, tokenizer),
        "train_args": {k: v for k, v in dataclasses.asdict(args).items()},
        "step": step,
        "optimizer": opt_meta,
        "data_rng": _rng_state(rng),
        "dropout_rng": activations.default_generator.get_state(),
        "losses": losses,
    }
    # the file is written once, by rank 0, atomically (collective under MPI)
    ck.save(path, tensors, meta)


def load_training_state(path: Path, model, opt, rng: np.random.Generator, loaded=None) -> dict:
    """Weights, optimizer state and RNG states of the checkpoint at ``path`` into the run;
    ``loaded``: its (tensors, metadata) when already read (train() checks them up front);
    the tensors (StoredTensors) stream from the file into the tiles."""
    from .ops import activations
    arrays, meta = loaded if loaded is not None else ck.load(path, RESUME_KEYS)
    arrays = {k: arrays[k] for k in sorted(arrays)}  # safetensors' order varies by process; MPI needs one
    weights = {k: v for k, v in arrays.items() if not k.startswith(OPTIM_PREFIX)}  # tied: one name is enough
    try:
        model.load_state_dict(weights)
    except (ValueError, KeyError, TypeError) as exc:
        raise ck.CheckpointError(f"{path}: the weights do not fit this model ({exc})") from None
    state: dict[int, dict[str, Any]] = {}
    try:
        for k, v in arrays.items():
            if k.startswith(OPTIM_PREFIX):
                idx, name = k[len(OPTIM_PREFIX):].split(".", 1)
                state.setdefault(int(idx), {})[name] = v
        for idx, step in meta["optimizer"]["steps"].items():
            state.setdefault(int(idx), {})["step"] = step
        opt.load_state_dict({"state": state, "param_groups": meta["optimizer"]["param_groups"]})
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
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
    from .data import load_corpus
    from .optim import AdamW, clip_grad_norm_, cosine_with_warmup
    from .ops import activations

    from .distribution import rank, world_size
    from .parallel import check_fit, place, shard_backward

    args.validate()
    out = out or sys.stdout
    if rank() != 0:  # under mpirun only rank 0 reports (every rank runs the same flow)
        import os
        out = open(os.devnull, "w")
        args = dataclasses.replace(args, progress=False)
    up_front_error = None  # under mpirun: agreed by every rank before any step (_agree_up_front)
    try:
        source = ModelSource.resolve(args)  # model type, config and tokenizer: before any work
        # a distribution that does not fit the job: the same message on every rank, before any task
        check_fit(args.dist, n_layer=source.n_layer, batch=args.batch, stages=args.stages)
        ckpt_path = ck.check_writable(args.ckpt_dir) / ck.CHECKPOINT_NAME if args.ckpt_dir else None
        if ckpt_path is not None and ckpt_path.exists() and not (args.resume or args.overwrite):
            raise ValueError(f"--ckpt-dir {args.ckpt_dir} already holds a checkpoint ({ckpt_path}): pass --resume "
                             "to continue it or --overwrite to replace it")
        resume_arrays = resume_meta = None
        if args.resume:
            if not ckpt_path.is_file():
                raise ck.CheckpointError(f"--resume: no checkpoint at {ckpt_path}")
            # verified once (a streaming pass); the tensors stay on disk until loaded into the model
            resume_arrays, resume_meta = ck.load(ckpt_path, RESUME_KEYS, lazy=True)
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
        tok = source.tokenizer
        if resume_meta is not None:
            source.check_resume(resume_meta, ckpt_path)
        corpus = load_corpus(args.data or None, val_fraction=args.val_fraction, max_bytes=args.max_bytes,
                             tokenizer=tok, progress=args.progress and rank() == 0)
        if len(corpus.val) <= args.seq_len + 1:
            raise ValueError(f"the validation split has {len(corpus.val)} tokens, too few for --seq-len "
                             f"{args.seq_len}: use more data or a larger --val-fraction")
    except Exception as exc:
        if world_size() == 1:
            raise
        up_front_error = exc
    rt = tt.init(ncpu=args.ncpu, sched=args.sched, mem_limit=args.mem_limit, ooc_dir=args.ooc_dir)
    if world_size() > 1:
        _agree_up_front(up_front_error, args)
    try:
        activations.manual_seed(args.seed)
        model = source.build(args, fresh=resume_meta is None)
        place(model, args.dist, args.stages)  # owners of parameters and where each module runs (before the optimizer)
        opt = AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=args.weight_decay)
        data_rng = np.random.default_rng(args.seed)
        eval_rng_seed = args.seed + 1
        start = 0
        if resume_meta is not None:
            meta = load_training_state(ckpt_path, model, opt, data_rng, (resume_arrays, resume_meta))
            resume_arrays = None  # the model and optimizer hold them now
            start = int(meta["step"])
            print(f"resumed from {ckpt_path} at step {start}", file=out, flush=True)
        n_params = sum(p.numel() for p in model.parameters())
        tokens_per_step = args.batch * args.micro_batches * args.seq_len
        fpt = model.flops_per_token(args.seq_len)  # the model's one formula (nn/gpt.py)
        print(f"model: {source.describe()}, {n_params / 1e6:.2f} M parameters, {args.dtype}; {rt!r}",
              file=out, flush=True)
        print(f"data: {len(corpus.train):,} train / {len(corpus.val):,} val tokens; {tokens_per_step} tokens "
              f"per step ({args.micro_batches} micro-batches of {args.batch} x {args.seq_len})", file=out, flush=True)
        from .runtime import blas_note
        note = blas_note()
        if note:
            print(f"note: {note}", file=out, flush=True)
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
                save_training_state(ckpt_path, model, opt, args, step, data_rng, losses, tok)
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
                    micro += shard_backward(model, x, y, k, args.micro_batches)
                if args.grad_clip > 0:
                    clip_grad_norm_(model.parameters(), args.grad_clip)
                opt.step()
                opt.zero_grad()
                value = float(np.mean([float(v) for v in micro]))
                del micro
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
            from .inference import GenerationConfig, sample_text
            gen = GenerationConfig.from_keywords(args.sample_tokens, temperature=0.8)
            sample = sample_text(model, tok, "def ", gen, seed=args.seed)[0][0]
            print("sample:\n" + sample, file=out, flush=True)
        return TrainResult(step, train_losses, val_losses, tps, fpt * tps / 1e9, stopped,
                           str(ckpt_path) if ckpt_path else None, sample, interrupted)
    finally:
        tt.shutdown()


def find_checkpoint(path) -> Path:
    """The checkpoint file of a --ckpt-dir: checkpoint.safetensors, or the directory's only
    .safetensors file (as written by checkpoint.save from Python), or the file itself."""
    p = Path(path)
    if p.is_file():
        return p
    if (p / ck.CHECKPOINT_NAME).is_file() or not p.is_dir():
        return p / ck.CHECKPOINT_NAME  # ck.load says "no checkpoint at ..." if missing
    from .nn.pretrained import CONFIG_NAME
    if (p / CONFIG_NAME).is_file():
        raise ck.CheckpointError(f"{p} is a Hugging Face model folder, not a checkpoint directory (use --model {p})")
    files = sorted(p.glob("*.safetensors"))
    if len(files) == 1:
        return files[0]
    what = f"several .safetensors files ({', '.join(f.name for f in files)})" if files else "no .safetensors file"
    raise ck.CheckpointError(f"no checkpoint at {p / ck.CHECKPOINT_NAME} and {what} in {p}")


def load_model(ckpt_dir=None, hf_folder=None, tokenizer=None, ncpu=None, tiles=None, dtype=None, sched=None):
    """Start a runtime (unless one is running: a second model, e.g. a draft) and return
    (model, tokenizer, metadata) of a checkpoint (any written by train or by checkpoint.save
    with the model's config in its metadata) or of a Hugging Face folder.  ``tokenizer``: a
    tokenizer.json path replacing the model's own."""
    from .data import TOKENIZER_NAME, ByteTokenizer, Tokenizer, load_tokenizer
    if (ckpt_dir is None) == (hf_folder is None):
        raise ValueError("give exactly one of --ckpt-dir and --model")
    if ckpt_dir is not None:
        path = find_checkpoint(ckpt_dir)
        arrays, meta = ck.load(path, MODEL_KEYS, lazy=True)  # streamed into the weights' tiles
        train_args = meta.get("train_args") or {}
        if not isinstance(train_args, dict):
            raise ck.CheckpointError(f"{path}: checkpoint metadata has a bad train_args {train_args!r:.100}")
        targs = TrainArgs(dtype=str(dtype or train_args.get("dtype", "float32")),
                          tiles=tuple(tiles or train_args.get("tiles") or ()) or None)
        own = Tokenizer.from_str(meta["tokenizer"]) if meta.get("tokenizer") else ByteTokenizer()
        started = _start(ncpu, sched)
        try:
            model = build_model(targs, meta.get("model_type", "gpt2"), meta["config"])
            weights = {k: v for k, v in arrays.items() if not k.startswith(OPTIM_PREFIX)}
            model.load_state_dict(weights)
        except (ValueError, TypeError) as exc:
            _stop(started)
            raise ck.CheckpointError(f"{path}: the weights do not fit its config ({exc})") from None
    else:
        from .nn import from_pretrained
        folder = Path(hf_folder) if Path(hf_folder).is_dir() else Path(hf_folder).parent
        own = load_tokenizer(folder if (folder / TOKENIZER_NAME).is_file() else None)
        meta = {"init_from": str(hf_folder)}
        started = _start(ncpu, sched)
        try:
            model = from_pretrained(hf_folder, dtype=np.dtype(dtype or "float32"),
                                    tiling=make_tiling(TrainArgs(tiles=tiles), None))
        except BaseException:
            _stop(started)
            raise
    tok = own if tokenizer is None else load_tokenizer(tokenizer)
    vocab = model.config.vocab_size
    if tok.vocab_size > vocab:
        _stop(started)
        raise ValueError(f"the tokenizer {tok!r} has {tok.vocab_size} tokens, more than the model's "
                         f"vocab_size {vocab}" + ("" if tokenizer else ": pass --tokenizer"))
    return model, tok, meta


def _start(ncpu, sched=None) -> bool:
    """Start the runtime unless one is running; whether this call started it."""
    import tiletrain as tt
    if tt.is_initialized():
        return False
    tt.init(ncpu=ncpu, sched=sched)
    return True


def _stop(started: bool) -> None:
    import tiletrain as tt
    if started:
        tt.shutdown()
