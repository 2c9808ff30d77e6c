"""Every model by name: the ``MODELS`` registry, Hugging Face folders in and out
(``from_pretrained`` / ``save_pretrained``) and ``load_model``, the model of a training
checkpoint or of a folder (what ``tiletrain generate`` and ``export`` run).

``MODELS`` maps config.json's ``model_type`` to a ``CausalLM`` subclass (nn/causal_lm.py);
it is the one place besides its own module where an architecture is named (one
``register_model`` line below).  Training (``tiletrain train --arch MODEL_TYPE``),
generation, pipelines and checkpoints find a model's class here and call the contract.
The files themselves are read and written by nn/hf.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import checkpoint as ck
from ..data.tokenizer import TOKENIZER_NAME, ByteTokenizer, Tokenizer, load_tokenizer
from .causal_lm import CausalLM, Tiling
from .gpt import GPT
from .hf import (CONFIG_NAME, INDEX_NAME, WEIGHTS_NAME, folder_of, model_tensors, read_hf_config,  # noqa: F401
                 read_safetensors, stored_safetensors, unique_tensors)
from .llama import Llama

__all__ = ["MODELS", "register_model", "model_class", "build_model", "from_pretrained", "save_pretrained",
           "find_checkpoint", "load_model", "read_hf_config", "read_safetensors", "stored_safetensors",
           "model_tensors", "unique_tensors", "CONFIG_NAME", "WEIGHTS_NAME", "INDEX_NAME", "MODEL_KEYS",
           "OPTIM_PREFIX"]

# model_type of config.json -> model class (a CausalLM subclass)
MODELS: dict[str, type[CausalLM]] = {}


def register_model(cls: type[CausalLM]) -> type[CausalLM]:
    """Add a CausalLM subclass to MODELS under its ``model_type`` (usable as a decorator):
    `tiletrain train --arch`, generation, checkpoints and pipelines then take it."""
    if not (isinstance(cls, type) and issubclass(cls, CausalLM)):
        raise TypeError(f"register_model: expected a CausalLM subclass, got {cls!r:.100}")
    if not isinstance(cls.model_type, str) or not cls.model_type or cls.config_class is None:
        raise TypeError(f"register_model: {cls.__name__} must set model_type (a str) and config_class")
    MODELS[cls.model_type] = cls
    return cls


register_model(GPT)
register_model(Llama)

# a checkpoint's tensors whose names start with this are the optimizer state, not weights
OPTIM_PREFIX = "optimizer."
# metadata generate/export need of a checkpoint ("a.b": key b under a): the model's config
MODEL_KEYS = ("config", "config.vocab_size")


def model_class(model_type: str | None) -> type[CausalLM]:
    """The class registered in MODELS for a model_type (of a config.json or a checkpoint)."""
    if model_type is None:
        raise ValueError(f"config.json has no 'model_type' (supported: {', '.join(MODELS)})")
    if not isinstance(model_type, str) or model_type not in MODELS:
        raise ValueError(f"model_type {model_type!r:.100} is not supported (supported: {', '.join(MODELS)})")
    return MODELS[model_type]


def build_model(model_type: str, config: dict, tiling: Tiling | None = None, dtype=np.float32, seed: int = 0):
    """A freshly initialised model of this type and config (a dict of its config class)."""
    cls = model_class(model_type)
    return cls(cls.config_class(**config), tiling=tiling, dtype=dtype, seed=seed)


def from_pretrained(path, dtype=np.float32, tiling=None, **config_overrides):
    """The model of a Hugging Face folder (config.json + model.safetensors or a sharded
    index), or of a .safetensors file next to a config.json, by ``config["model_type"]``.

    ``config_overrides`` replace fields of the model's config (e.g. ``dropout=0.1``)."""
    cls = model_class(read_hf_config(path).get("model_type"))
    return cls.from_pretrained(path, dtype=dtype, tiling=tiling, **config_overrides)


def save_pretrained(model: CausalLM, path, tokenizer=None) -> Path:
    """Write ``model`` as a Hugging Face folder (config.json + model.safetensors) that
    ``transformers.AutoModelForCausalLM.from_pretrained`` loads unchanged; with a
    tokenizer (a tiletrain.data.Tokenizer) also its tokenizer.json.  Each file is written
    atomically, the weights before config.json; the shards of an earlier sharded save are
    removed.  Under MPI every rank calls it; rank 0 writes the folder (the weights stream
    through it)."""
    return model.save_pretrained(path, tokenizer=tokenizer)


def find_checkpoint(path) -> Path:
    """The checkpoint file of a --ckpt-dir: checkpoint.safetensors, or the directory's only
    .safetensors file (as written by checkpoint.save from Python), or the file itself."""
    p = Path(path)
    if p.is_file():
        return p
    if (p / ck.CHECKPOINT_NAME).is_file() or not p.is_dir():
        return p / ck.CHECKPOINT_NAME  # ck.load says "no checkpoint at ..." if missing
    if (p / CONFIG_NAME).is_file():
        raise ck.CheckpointError(f"{p} is a Hugging Face model folder, not a checkpoint directory (use --model {p})")
    files = sorted(p.glob("*.safetensors"))
    if len(files) == 1:
        return files[0]
    what = f"several .safetensors files ({', '.join(f.name for f in files)})" if files else "no .safetensors file"
    raise ck.CheckpointError(f"no checkpoint at {p / ck.CHECKPOINT_NAME} and {what} in {p}")


def load_model(ckpt_dir=None, hf_folder=None, tokenizer=None, tiles=None, dtype=None):
    """(model, tokenizer, metadata) of a checkpoint (any written by train or by checkpoint.save
    with the model's config in its metadata) or of a Hugging Face folder, for generation or
    export (no activation recomputation).  ``tokenizer``: a tokenizer.json path replacing
    the model's own; ``tiles``: (batch, time, width) tile sizes (default: the checkpoint's
    training run's); ``dtype``: default the checkpoint's.  The runtime must be running."""
    if (ckpt_dir is None) == (hf_folder is None):
        raise ValueError("give exactly one of --ckpt-dir and --model")
    if ckpt_dir is not None:
        model, own, meta = _from_checkpoint(ckpt_dir, tiles, dtype)
    else:
        folder = folder_of(hf_folder)
        own = load_tokenizer(folder if (folder / TOKENIZER_NAME).is_file() else None)
        meta = {"init_from": str(hf_folder)}
        model = from_pretrained(hf_folder, dtype=np.dtype(dtype or "float32"), tiling=Tiling.from_tiles(tiles))
    tok = own if tokenizer is None else load_tokenizer(tokenizer)
    vocab = model.config.vocab_size
    if tok.vocab_size > vocab:
        raise ValueError(f"the tokenizer {tok!r} has {tok.vocab_size} tokens, more than the model's "
                         f"vocab_size {vocab}" + ("" if tokenizer else ": pass --tokenizer"))
    return model, tok, meta


def _from_checkpoint(ckpt_dir, tiles, dtype):
    """(model, its tokenizer, metadata) of a checkpoint; the weights stream into the tiles."""
    path = find_checkpoint(ckpt_dir)
    arrays, meta = ck.load(path, MODEL_KEYS, lazy=True)
    train_args = meta.get("train_args") or {}
    if not isinstance(train_args, dict):
        raise ck.CheckpointError(f"{path}: checkpoint metadata has a bad train_args {train_args!r:.100}")
    dtype = str(dtype or train_args.get("dtype", "float32"))
    tiles = tuple(tiles or train_args.get("tiles") or ()) or None
    own = Tokenizer.from_str(meta["tokenizer"]) if meta.get("tokenizer") else ByteTokenizer()
    try:
        config = dict(meta["config"], recompute="none")  # recomputation is a choice of training runs
        model = build_model(meta.get("model_type", "gpt2"), config, Tiling.from_tiles(tiles), np.dtype(dtype))
        model.load_state_dict({k: v for k, v in arrays.items() if not k.startswith(OPTIM_PREFIX)})
    except (ValueError, TypeError) as exc:
        raise ck.CheckpointError(f"{path}: the weights do not fit its config ({exc})") from None
    return model, own, meta
