"""What a training run is made of and what it saves: the model it builds (``ModelSource``:
an --arch model from scratch or an --init-from folder, with its tokenizer), and its
checkpoint -- weights, optimizer state, RNG states and metadata in one safetensors file --
written atomically and read back for an exact resume."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import checkpoint as ck
from ..data import TOKENIZER_NAME, ByteTokenizer, Tokenizer, load_tokenizer
from ..nn import pretrained
from ..nn.causal_lm import Tiling
from ..nn.hf import folder_of
from ..nn.pretrained import MODELS, OPTIM_PREFIX, from_pretrained, model_class, read_hf_config
from ..ops import activations
from .args import TrainArgs

__all__ = ["ModelSource", "RESUME_KEYS", "RUN_OPTIONS", "build_model", "run_options", "model_metadata",
           "save_training_state", "load_training_state", "read_resume_point"]

# metadata a training checkpoint must hold to resume ("a.b": key b under a)
RESUME_KEYS = ("config", "train_args", "step", "optimizer.steps", "optimizer.param_groups", "data_rng",
               "dropout_rng")

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


def build_model(args: TrainArgs, model_type: str, cfg: dict):
    """A freshly initialised model of this type and config (a dict of its config class)."""
    cfg = run_options(args, model_class(model_type), cfg)
    return pretrained.build_model(model_type, cfg, Tiling.from_tiles(args.tiles), np.dtype(args.dtype), args.seed)


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
        if args.init_from is None:
            tok = load_tokenizer(args.tokenizer)
            return cls(args.arch, args.model_config(tok.vocab_size), tok)
        hf = read_hf_config(args.init_from)
        config = dataclasses.asdict(model_class(hf.get("model_type")).config_from_hf(hf))
        if "dropout" in config:
            config["dropout"] = float(args.dropout)
        folder = folder_of(args.init_from)
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
    def model_config(self):
        """The config object (the model's config class) of ``config``."""
        return model_class(self.model_type).config_class(**self.config)

    @property
    def n_layer(self) -> int:
        return self.model_config.n_layer

    @property
    def context(self) -> int:
        return self.model_config.block_size

    def describe(self) -> str:
        sizes = ", ".join(f"{k} {v}" for k, v in self.config.items())
        origin = f"from {self.init_from}" if self.init_from else "from scratch"
        return f"{self.model_type} {origin} ({sizes}), tokenizer {self.tokenizer!r}"

    def check_resume(self, meta: dict, path: Path) -> None:
        """CheckpointError unless the checkpoint holds this model type, config and tokenizer."""
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
            return from_pretrained(self.init_from, dtype=np.dtype(args.dtype), tiling=Tiling.from_tiles(args.tiles),
                                   **run_options(args, model_class(self.model_type), self.config))
        return build_model(args, self.model_type, self.config)


def model_metadata(model, tokenizer=None) -> dict:
    """What rebuilds the model (generate, export): its model_type, its config, and the
    tokenizer.json text (None: bytes)."""
    if MODELS.get(model.model_type) is not type(model):
        raise TypeError(f"{type(model).__name__} is not in tiletrain.nn.MODELS ({', '.join(MODELS)})")
    return {**model.metadata(), "tokenizer": tokenizer.to_str() if tokenizer is not None else None}


def read_resume_point(path: Path, args: TrainArgs) -> tuple[dict, dict]:
    """(tensors, metadata) of the checkpoint --resume continues, checked once (a streaming
    pass; the tensors stay on disk until loaded into the model); its step must not be
    beyond --steps."""
    if not path.is_file():
        raise ck.CheckpointError(f"--resume: no checkpoint at {path}")
    arrays, meta = ck.load(path, RESUME_KEYS, lazy=True)
    done = meta["step"]
    if isinstance(done, bool) or not isinstance(done, int) or done < 0:
        raise ck.CheckpointError(f"{path}: checkpoint metadata has a bad step {done!r}")
    if done > args.steps:
        raise ValueError(f"--resume: {path} is at step {done}, beyond --steps {args.steps} "
                         f"(the schedule spans --steps: pass --steps {done} or more)")
    return arrays, meta


def save_training_state(path: Path, model, opt, args: TrainArgs, step: int, rng: np.random.Generator,
                        losses: dict, tokenizer=None) -> None:
    """The run's checkpoint at ``path``: the tensors themselves, streamed from their tiles into
    the file (no host copy of the model; under MPI every rank takes part: the tiles go to rank
    0 a block at a time, which writes the file once, atomically)."""
    tensors = pretrained.model_tensors(model)  # a tied weight once
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
        "train_args": dataclasses.asdict(args),
        "step": step,
        "optimizer": opt_meta,
        "data_rng": rng.bit_generator.state,
        "dropout_rng": activations.default_generator.get_state(),
        "losses": losses,
    }
    ck.save(path, tensors, meta)


def load_training_state(path: Path, model, opt, rng: np.random.Generator, loaded=None) -> dict:
    """Weights, optimizer state and RNG states of the checkpoint at ``path`` into the run;
    ``loaded``: its (tensors, metadata) when already read (train() checks them up front);
    the tensors (StoredTensors) stream from the file into the tiles."""
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
    rng.bit_generator.state = meta["data_rng"]
    activations.default_generator.set_state(meta["dropout_rng"])
    return meta
