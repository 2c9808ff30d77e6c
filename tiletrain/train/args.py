"""`tiletrain train`'s options: the ``TrainArgs`` dataclass.  Each field's metadata (help,
flag, choices, allowed range, argument group) is the one description of its option: it
generates the argparse arguments (``add_arguments``) and checks the values
(``TrainArgs.validate``); choices come from where they are defined (the models of
tiletrain.nn.MODELS, parallel.MODES, nn's RECOMPUTE), never from a copied list."""
from __future__ import annotations

import argparse
import math
import os
import warnings
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from ..config import parse_bytes
from ..nn.causal_lm import RECOMPUTE
from ..nn.pretrained import MODELS, model_class
from ..parallel import MODES
from ..pipeline.schedules import NAMES as SCHEDULES
from ..pipeline.training import COMPENSATION_CHOICES, check_schedule_option

__all__ = ["TrainArgs", "add_arguments", "check_option", "parse_tiles", "DTYPES"]

DTYPES = ("float32", "float64")


def parse_tiles(text: str) -> tuple[int, int, int]:
    """--tiles B,T,C as three positive ints (argparse's type)."""
    try:
        parts = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"tiles must be B,T,C integers, got {text!r}") from None
    if len(parts) != 3 or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"tiles must be three positive integers B,T,C, got {text!r}")
    return parts


def option(default: Any = None, help: str = "", *, group: str, **spec) -> Any:
    """A TrainArgs field and its option.  ``spec``: ``limits`` (low, high, low excluded, high
    excluded: a number's range, see check_option), ``choices`` (a function returning the
    allowed values), ``size`` (a model-size option: the help names the models using it),
    ``exclusive`` (a mutually exclusive group's name), ``flag``, and argparse's ``type``,
    ``metavar``, ``nargs``, ``action``."""
    meta = dict(help=help, group=group, **spec)
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


# the --arch models: every registered one (checked and listed when used, so a model
# registered after import is accepted)
def _archs() -> list[str]:
    return list(MODELS)


POSITIVE, NON_NEGATIVE = (1, None), (0, None)
MODEL, DATA, OPTIM, RUNTIME, OUTPUT = "model", "data", "optimisation", "runtime", "checkpoints and output"


@dataclass
class TrainArgs:
    # model: an architecture from scratch (sized by its train_sizes options), or a HF folder
    arch: str = option("gpt2", "architecture to train from scratch, sized by the flags below", group=MODEL,
                       choices=_archs)
    n_layer: int = option(4, "transformer blocks", group=MODEL, limits=POSITIVE, size=True)
    n_head: int = option(4, "attention heads", group=MODEL, limits=POSITIVE, size=True)
    n_embd: int = option(256, "embedding width", group=MODEL, limits=POSITIVE, size=True)
    n_kv_head: int | None = option(None, "key/value heads, shared by groups of query heads (default: --n-head)",
                                   group=MODEL, limits=POSITIVE, size=True)
    ffn: int | None = option(None, "SwiGLU MLP width (default: 8/3 --n-embd rounded up to a multiple of 64)",
                             group=MODEL, limits=POSITIVE, size=True)
    dropout: float = option(0.0, "dropout on the embeddings and residual branches (also when fine-tuning)",
                            group=MODEL, limits=(0, 1, False, True), size=True)
    block_size: int | None = option(None, "context length (default: --seq-len)", group=MODEL, limits=POSITIVE)
    init_from: str | None = option(None, "fine-tune the model of a Hugging Face folder (config.json + "
                                   "safetensors): its config replaces --arch and the size flags, its tokenizer.json "
                                   "(if any) is the tokenizer", group=MODEL, metavar="HF_FOLDER")
    recompute: str = option("none", "activation recomputation: keep only each transformer block's input (block) "
                            "or recompute the attention branch (attention) in backward: less memory, more time",
                            group=MODEL, choices=lambda: RECOMPUTE)
    # data
    data: list[str] = option([], "UTF-8 text files (default: the Python standard library's sources)", group=DATA,
                             nargs="+", metavar="FILE")
    tokenizer: str | None = option(None, "a Hugging Face tokenizer.json (or a folder holding one) to tokenise "
                                   "--data with; the tokenised corpus is cached in $TILETRAIN_CACHE (default: bytes, "
                                   "or --init-from's)", group=DATA, metavar="PATH")
    max_bytes: int | None = option(8_000_000, "read at most this much text", group=DATA, limits=POSITIVE)
    val_fraction: float = option(0.05, "share of the tokens held out for validation (the end of the corpus)",
                                 group=DATA, limits=(0, 1, True, True))
    # optimisation
    batch: int = option(8, "sequences per micro-batch", group=OPTIM, limits=POSITIVE)
    micro_batches: int = option(1, "micro-batches per step", group=OPTIM, limits=POSITIVE)
    seq_len: int = option(128, "tokens per training sequence", group=OPTIM, limits=POSITIVE)
    steps: int = option(300, "total steps (the schedule spans them)", group=OPTIM, limits=POSITIVE)
    stop_after: int | None = option(None, "stop after this many steps in this run, with a checkpoint (continue "
                                    "with --resume)", group=OPTIM, limits=POSITIVE)
    # --lr is at most 1: AdamW moves every weight by about lr per step, so larger rates only
    # destroy the model
    lr: float = option(2e-3, "peak learning rate, in (0, 1]", group=OPTIM, limits=(0, 1, True, False))
    min_lr: float = option(2e-4, "final learning rate, in [0, --lr]", group=OPTIM, limits=NON_NEGATIVE)
    warmup: int = option(20, "warm-up steps (>= 0)", group=OPTIM, limits=NON_NEGATIVE)
    weight_decay: float = option(0.1, "AdamW weight decay", group=OPTIM, limits=NON_NEGATIVE)
    grad_clip: float = option(1.0, "clip the gradient norm to this (>= 0; 0 disables clipping)", group=OPTIM,
                              limits=NON_NEGATIVE)
    # runtime
    tiles: tuple[int, int, int] | None = option(None, "tile sizes B,T,C (default: chosen from the model)",
                                                group=RUNTIME, type=parse_tiles)
    ncpu: int | None = option(None, "CPU workers (default: STARPU_NCPU or all cores)", group=RUNTIME,
                              limits=POSITIVE)
    sched: str | None = option(None, "StarPU scheduling policy (default: STARPU_SCHED or prio)", group=RUNTIME)
    mem_limit: str | None = option(None, "cap StarPU's CPU memory, e.g. 2G or 512M (docs/howto/memory-budget.md)",
                                   group=RUNTIME, metavar="SIZE")
    # deprecated alias of mem_limit, in MiB (the runtime's RuntimeConfig.memory_limit_mb): made
    # mem_limit="<n>M" when the args are made, so only mem_limit travels
    memory_limit_mb: int | None = option(None, argparse.SUPPRESS, group=RUNTIME, limits=POSITIVE)
    ooc_dir: str | None = option(None, "with --mem-limit: a directory for a disk memory node receiving the tiles "
                                 "evicted under the limit (out-of-core training)", group=RUNTIME, metavar="DIR")
    dtype: str = option("float32", "parameter and activation dtype", group=RUNTIME, choices=lambda: DTYPES)
    seed: int = option(0, "seed of the initial weights, batches and dropout", group=RUNTIME, limits=NON_NEGATIVE)
    dist: str = option("single", "under mpirun: single (all on rank 0), pipeline (layers split over the ranks as "
                       "stages), data (each batch split over the ranks, gradients reduced) or pipeline+data "
                       "(--stages stages x the rest as replicas); see docs/distributed.md",
                       group=RUNTIME, choices=lambda: MODES)
    stages: int | None = option(None, "--dist pipeline+data: number of pipeline stages (default 2; the world size "
                                "must be a multiple); --dist pipeline in one process: stages on groups of workers",
                                group=RUNTIME, limits=POSITIVE)
    schedule: str | None = option(None, "--dist pipeline|pipeline+data: the pipeline schedule, a built-in ("
                                  + ", ".join(SCHEDULES) + ") or a CSV file (one row per stage, PyTorch's layout); "
                                  "default 1f1b (docs/pipeline-schedules.md); pb and local update each stage during "
                                  "the step (docs/pipelines-noflush.md)", group=RUNTIME, metavar="NAME|FILE.csv")
    compensation: str = option("sc+lwp", "--schedule pb: the per-stage AdamW's delay compensation, none, sc (Spike "
                               "Compensation), lwp (Linear Weight Prediction) or sc+lwp (docs/pipelines-noflush.md)",
                               group=RUNTIME, choices=lambda: COMPENSATION_CHOICES)
    # checkpoints, evaluation, output
    ckpt_dir: str | None = option(None, "write checkpoint.safetensors here (default: no checkpoint)", group=OUTPUT)
    resume: bool = option(False, "continue from the checkpoint in --ckpt-dir", group=OUTPUT, exclusive="how")
    overwrite: bool = option(False, "replace the checkpoint in --ckpt-dir (without --resume or --overwrite an "
                             "existing one is refused)", group=OUTPUT, exclusive="how")
    eval_every: int = option(50, "validate (and checkpoint) every N steps (0: never, a checkpoint at the end)",
                             group=OUTPUT, limits=NON_NEGATIVE)
    eval_batches: int = option(4, "validation batches per evaluation", group=OUTPUT, limits=POSITIVE)
    sample_tokens: int = option(200, "tokens to sample at the end", group=OUTPUT, limits=NON_NEGATIVE)
    progress: bool = option(True, "no progress bars", group=OUTPUT, flag="--no-progress", action="store_false")
    # the run directory (tiletrain.utils.runlog, docs/runs.md)
    run_dir: str | None = option(None, "write metrics.jsonl, run.json, TensorBoard event files and --trace-step's "
                                 "trace here (default: --ckpt-dir, else runs/<date>-<time>-<model>)", group=OUTPUT,
                                 metavar="DIR")
    tensorboard: bool = option(True, "no TensorBoard event files in the run directory (metrics.jsonl is written all "
                               "the same)", group=OUTPUT, flag="--no-tensorboard", action="store_false")
    trace_step: int | None = option(None, "record step N's tasks: its Perfetto trace (trace-stepN.json) and metrics "
                                    "(makespan, idle, critical path: trace-stepN-metrics.json) into the run directory "
                                    "(the runtime starts with profiling on)", group=OUTPUT, limits=POSITIVE,
                                    metavar="N")

    def __post_init__(self):
        if self.memory_limit_mb is not None:
            warnings.warn("TrainArgs.memory_limit_mb (--memory-limit-mb) is deprecated: use mem_limit "
                          "(--mem-limit), e.g. '2G'", DeprecationWarning, stacklevel=3)
            check_option("--memory-limit-mb", self.memory_limit_mb, *POSITIVE)
            alias = f"{int(self.memory_limit_mb)}M"
            if self.mem_limit is not None and parse_bytes(self.mem_limit, "--mem-limit") >> 20 != self.memory_limit_mb:
                raise ValueError(f"--mem-limit {self.mem_limit} and --memory-limit-mb {self.memory_limit_mb} "
                                 "disagree: give one (--mem-limit)")
            self.mem_limit, self.memory_limit_mb = self.mem_limit or alias, None

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> "TrainArgs":
        """The TrainArgs of a parse by ``add_arguments``' parser."""
        return cls(**{f.name: getattr(ns, f.name) for f in fields(cls)})

    def model_sizes(self) -> dict:
        """The model-size options the --arch model is sized by (its train_sizes), by field name."""
        return {name: getattr(self, name) for name in model_class(self.arch).train_sizes}

    def model_config(self, vocab_size: int) -> dict:
        """The --arch model's config (as a dict) for a vocabulary size."""
        cls = model_class(self.arch)
        return asdict(cls.train_config(vocab_size, self.block_size or self.seq_len, **self.model_sizes()))

    def validate(self) -> None:
        """Every option checked (ranges, finiteness, choices, combinations) before any work:
        the one place for `tiletrain train` and train(); ValueError naming the option."""
        for f in fields(self):
            _check_field(f, getattr(self, f.name))
        if self.init_from is None:
            self._validate_sizes()
        if self.block_size is not None and self.seq_len > self.block_size:
            raise ValueError(f"--seq-len {self.seq_len} exceeds --block-size {self.block_size}")
        if self.mem_limit is not None:
            parse_bytes(self.mem_limit, "--mem-limit")
        if self.ooc_dir is not None:
            if self.mem_limit is None:
                raise ValueError("--ooc-dir needs --mem-limit (tiles are evicted to disk only under a limit)")
            if not os.path.isdir(self.ooc_dir):
                raise ValueError(f"--ooc-dir {self.ooc_dir!r} is not an existing directory")
        if self.min_lr > self.lr:
            raise ValueError(f"--min-lr {self.min_lr} must not exceed --lr {self.lr}")
        check_schedule_option(self.schedule, self.dist, self.resume)
        if self.resume and not self.ckpt_dir:
            raise ValueError("--resume needs --ckpt-dir")
        if self.resume and self.overwrite:
            raise ValueError("--resume and --overwrite exclude each other")
        if self.tiles is not None:
            if len(self.tiles) != 3 or any(t < 1 for t in self.tiles):
                raise ValueError(f"--tiles must be three positive sizes B,T,C, got {self.tiles}")
        self._validate_run_dir()

    def _validate_run_dir(self) -> None:
        """The run directory's options (metrics, TensorBoard, --trace-step)."""
        if self.trace_step is not None and self.trace_step > self.steps:
            raise ValueError(f"--trace-step {self.trace_step} is beyond --steps {self.steps}")

    def _validate_sizes(self) -> None:
        """The --arch model's size options make a model (its train_config's checks)."""
        sizes = self.model_sizes()
        if "n_head" in sizes and "n_embd" in sizes and self.n_embd % self.n_head:
            raise ValueError(f"--n-embd {self.n_embd} must be divisible by --n-head {self.n_head}")
        self.model_config(vocab_size=1)  # (the vocabulary is the tokenizer's, known later)


def flag_of(f) -> str:
    return f.metadata.get("flag") or f"--{f.name.replace('_', '-')}"


def _check_field(f, value) -> None:
    """A field's own checks: its range (limits) and its choices."""
    meta = f.metadata
    if "limits" in meta:
        check_option(flag_of(f), value, *meta["limits"])
    if "choices" in meta and value not in meta["choices"]():
        raise ValueError(f"{flag_of(f)} must be one of {', '.join(meta['choices']())}, got {value!r}")


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


# argparse's type of a field, by its annotation (metadata "type" overrides)
_TYPES = {"int": int, "int | None": int, "float": float, "float | None": float}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """TrainArgs' options on the parser ``p``, by argument group, each from its field."""
    groups: dict[str, Any] = {}
    for f in fields(TrainArgs):
        meta = f.metadata
        group = groups.get(meta["group"]) or groups.setdefault(meta["group"], p.add_argument_group(meta["group"]))
        if "exclusive" in meta:
            key = (meta["group"], meta["exclusive"])
            group = groups.get(key) or groups.setdefault(key, group.add_mutually_exclusive_group())
        group.add_argument(flag_of(f), dest=f.name, **_argument(f))


def _argument(f) -> dict:
    """argparse's keywords for a field."""
    meta = f.metadata
    default = f.default_factory() if callable(f.default_factory) else f.default
    kw: dict[str, Any] = dict(default=default, help=meta["help"])
    if meta.get("size"):  # the models that use it
        users = "/".join(mt for mt, cls in MODELS.items() if f.name in cls.train_sizes)
        kw["help"] = f"{meta['help']} ({users})"
    if f.type == "bool":
        kw["action"] = meta.get("action", "store_true")
        return kw
    for key in ("metavar", "nargs"):
        if key in meta:
            kw[key] = meta[key]
    if "choices" in meta:
        kw["choices"] = list(meta["choices"]())
    kind = meta.get("type", _TYPES.get(f.type))
    if kind is not None:
        kw["type"] = kind
    return kw
