"""Hugging Face model folders: ``from_pretrained`` / ``save_pretrained`` for every model.

A folder holds ``config.json`` and the weights as ``model.safetensors`` or as shards listed
by ``model.safetensors.index.json``.  ``config["model_type"]`` picks the class in ``MODELS``;
a model class provides

    Cls.config_from_hf(cfg: dict) -> its config   (ValueError naming an unsupported key)
    Cls(config, tiling=..., dtype=...)
    model.hf_config() -> dict                    (config.json that transformers accepts)
    model.state_dict() / model.load_state_dict(d) under Hugging Face's names

and optionally ``Cls.hf_rename(state_dict) -> state_dict`` (old key spellings, buffers).
A tied weight appears in ``state_dict()`` under each name as the same array; the file
stores it once, under its first name, as transformers does."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from ..data.tokenizer import TOKENIZER_NAME
from .gpt import GPT
from .llama import Llama

__all__ = ["MODELS", "from_pretrained", "save_pretrained", "read_hf_config", "read_safetensors",
           "stored_safetensors",
           "model_class", "model_tensors", "unique_tensors", "CONFIG_NAME", "WEIGHTS_NAME", "INDEX_NAME"]

# model_type of config.json -> model class (one line per architecture)
MODELS = {"gpt2": GPT, "llama": Llama}

CONFIG_NAME, WEIGHTS_NAME, INDEX_NAME = "config.json", "model.safetensors", "model.safetensors.index.json"


def _folder_and_weights(path) -> tuple[Path, Path | None]:
    """(folder holding config.json, a single .safetensors file or None for the folder's own)."""
    path = Path(path)
    if path.is_dir():
        return path, None
    if path.suffix == ".safetensors" and path.is_file():
        return path.parent, path
    if path.name == CONFIG_NAME and path.is_file():
        return path.parent, None
    raise FileNotFoundError(f"from_pretrained: {path} is neither a model folder nor a .safetensors file")


def read_hf_config(path) -> dict:
    """config.json of a model folder (or of the folder of a .safetensors file) as a dict."""
    folder, _ = _folder_and_weights(path)
    f = folder / CONFIG_NAME
    if not f.is_file():
        raise FileNotFoundError(f"from_pretrained: no {CONFIG_NAME} in {folder}")
    cfg = _read_json(f)
    if not isinstance(cfg, dict):
        raise ValueError(f"from_pretrained: {f} must hold a JSON object")
    return cfg


def _read_json(f: Path):
    """The JSON document of a file; ValueError naming it when it is not one."""
    try:
        return json.loads(f.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as exc:  # (not UTF-8, not JSON, an int of over 4300 digits, nesting)
        raise ValueError(f"from_pretrained: {f} is not valid JSON ({exc})") from None


def model_class(model_type: str | None):
    """The class registered in MODELS for a model_type (of a config.json or a checkpoint)."""
    if model_type is None:
        raise ValueError(f"config.json has no 'model_type' (supported: {', '.join(MODELS)})")
    if not isinstance(model_type, str) or model_type not in MODELS:
        raise ValueError(f"model_type {model_type!r:.100} is not supported (supported: {', '.join(MODELS)})")
    return MODELS[model_type]


def _stored_file(f: Path) -> dict:
    """{name: StoredTensor} of one safetensors file (only its header is read)."""
    from ..checkpoint import SafetensorsFile
    try:
        return dict(SafetensorsFile(f))
    except (OSError, ValueError) as exc:
        raise ValueError(f"from_pretrained: {f} is not a readable safetensors file ({exc})") from None


def stored_safetensors(path) -> dict:
    """Every tensor of a folder (model.safetensors or its sharded index) or of one file, as
    checkpoint.StoredTensors: read when used (``copy_to_`` streams one into a model's tiles)."""
    folder, single = _folder_and_weights(path)
    if single is not None:
        return _stored_file(single)
    if (folder / WEIGHTS_NAME).is_file():
        return _stored_file(folder / WEIGHTS_NAME)
    index = folder / INDEX_NAME
    if not index.is_file():
        raise FileNotFoundError(f"from_pretrained: no {WEIGHTS_NAME} or {INDEX_NAME} in {folder} "
                                "(PyTorch .bin weights are not read: convert them to safetensors)")
    weight_map = _weight_map(index)
    out: dict = {}
    for shard in sorted(set(weight_map.values())):
        if not (folder / shard).is_file():
            raise FileNotFoundError(f"from_pretrained: shard {shard} listed in {index} is missing")
        out.update(_stored_file(folder / shard))
    missing = sorted(set(weight_map) - set(out))
    if missing:
        raise ValueError(f"from_pretrained: tensors listed in {index} are not in its shards: {', '.join(missing)}")
    return out


def _weight_map(index: Path) -> dict[str, str]:
    """The weight_map of a sharded index, {tensor name: shard}; ValueError unless every shard
    is the name of a .safetensors file in the index's folder (no path: nothing outside it is
    read, or removed by save_pretrained)."""
    doc = _read_json(index)
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict):
        raise ValueError(f"from_pretrained: {index} has no weight_map object")
    for name, shard in weight_map.items():
        if not (isinstance(shard, str) and shard.endswith(".safetensors") and Path(shard).name == shard
                and "\\" not in shard and "\0" not in shard):
            raise ValueError(f"from_pretrained: {index} maps {name!r:.100} to {shard!r:.100}, not the name "
                             "of a .safetensors file in its folder")
    return weight_map


def read_safetensors(path) -> dict[str, np.ndarray]:
    """Every tensor of a folder (model.safetensors or its sharded index) or of one file, in
    memory; bfloat16 ones (common in HF folders) as float32 (exact: NumPy computes nothing in
    bfloat16)."""
    out = {}
    for k, v in stored_safetensors(path).items():
        try:
            a = v.numpy()
        except (OSError, ValueError) as exc:
            raise ValueError(f"from_pretrained: {v.path} is not a readable safetensors file "
                             f"({exc})") from None
        out[k] = a.astype(np.float32) if a.dtype.name == "bfloat16" else a
    return out


def from_pretrained(path, dtype=np.float32, tiling=None, **config_overrides):
    """The model of a Hugging Face folder (config.json + model.safetensors or a sharded
    index), or of a .safetensors file next to a config.json, by ``config["model_type"]``.

    ``config_overrides`` replace fields of the model's config (e.g. ``dropout=0.1``)."""
    cfg = read_hf_config(path)
    cls = model_class(cfg.get("model_type"))
    config = cls.config_from_hf(cfg)
    if config_overrides:
        config = dataclasses.replace(config, **config_overrides)
    sd = stored_safetensors(path)  # streamed into the model's tiles by load_state_dict
    rename = getattr(cls, "hf_rename", None)
    if rename is not None:
        sd = rename(sd)
    model = cls(config, tiling=tiling, dtype=dtype)
    try:
        model.load_state_dict(sd, strict=True)
    except ValueError as exc:
        raise ValueError(f"from_pretrained: the tensors in {path} do not fit its config.json: {exc}") from None
    return model


def model_tensors(model) -> dict:
    """The model's parameters and buffers, each once under its first name (as unique_tensors
    of its state_dict()), as the tensors themselves: a file writer streams them from their
    tiles (under MPI collectively, through rank 0, which writes)."""
    out = dict(model.named_parameters())
    for name, b in model.named_buffers():
        out.setdefault(name, b)
    return out


def unique_tensors(sd: dict) -> dict[str, np.ndarray]:
    """Each array once, under its first name (tied weights as transformers stores them)."""
    seen, out = set(), {}
    for k, v in sd.items():
        if id(v) not in seen:
            seen.add(id(v))
            out[k] = np.ascontiguousarray(v)
    return out


def _remove_shards(folder: Path) -> None:
    index = folder / INDEX_NAME
    if not index.is_file():
        return
    try:
        shards = set(_weight_map(index).values()) - {WEIGHTS_NAME}
    except ValueError:  # an index that is not one names no shard to remove
        shards = set()
    for shard in shards:
        if (folder / shard).is_file():
            (folder / shard).unlink()
    index.unlink()


def save_pretrained(model, path, tokenizer=None) -> Path:
    """Write ``model`` as a Hugging Face folder (config.json + model.safetensors) that
    ``transformers.AutoModelForCausalLM.from_pretrained`` loads unchanged; with a
    tokenizer (a tiletrain.data.Tokenizer) also its tokenizer.json.  Each file is written
    atomically, the weights before config.json; the shards of an earlier sharded save are
    removed.  Under MPI every rank calls it; rank 0 writes the folder (the weights stream
    through it)."""
    from ..checkpoint import write_atomic, write_safetensors
    from ..distribution import rank
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"save_pretrained: {path} exists and is not a folder")
    cfg = model.hf_config()
    tensors = model_tensors(model)  # streamed from the tiles into the file
    cfg["dtype"] = str(np.dtype(next(iter(tensors.values())).dtype))
    write_safetensors(path / WEIGHTS_NAME, tensors, {"format": "pt"})  # (MPI: collective)
    if rank() != 0:
        return path
    text = tokenizer.to_str() if tokenizer is not None else None  # the ByteTokenizer has none
    if text is not None:
        write_atomic(path / TOKENIZER_NAME, text.encode())
    _remove_shards(path)  # an earlier sharded save's files would contradict the new weights
    write_atomic(path / CONFIG_NAME, (json.dumps(cfg, indent=2, sort_keys=True) + "\n").encode())
    return path
