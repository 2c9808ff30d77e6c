"""Hugging Face model folders as files, for every model: ``config.json`` and the weights as
``model.safetensors`` or as shards listed by ``model.safetensors.index.json``.

This module knows no model class (it is below them: ``CausalLM.from_pretrained`` and
``save_pretrained`` call it); each model converts its own config (``config_from_hf`` /
``hf_config``, in nn/gpt.py and nn/llama.py), and nn/pretrained.py picks the class of a
folder by its ``model_type``.  A tied weight appears in ``state_dict()`` under each name as
the same tensor; the file stores it once, under its first name, as transformers does."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ..checkpoint import SafetensorsFile, write_atomic, write_safetensors
from ..data.tokenizer import TOKENIZER_NAME
from ..distribution import rank

__all__ = ["read_hf_config", "read_safetensors", "stored_safetensors", "save_folder", "model_tensors",
           "unique_tensors", "folder_of", "CONFIG_NAME", "WEIGHTS_NAME", "INDEX_NAME"]

CONFIG_NAME, WEIGHTS_NAME, INDEX_NAME = "config.json", "model.safetensors", "model.safetensors.index.json"
NAME_MAX = 255  # bytes in a file name on the filesystems tiletrain runs on (longer: ENAMETOOLONG)


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


def folder_of(path) -> Path:
    """The folder of a model folder, or of a file in it (where tokenizer.json would be)."""
    path = Path(path)
    return path if path.is_dir() else path.parent


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


def _stored_file(f: Path) -> dict:
    """{name: StoredTensor} of one safetensors file (only its header is read)."""
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
    read, or removed by save_folder)."""
    doc = _read_json(index)
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict):
        raise ValueError(f"from_pretrained: {index} has no weight_map object")
    for name, shard in weight_map.items():
        if not (isinstance(shard, str) and shard.endswith(".safetensors") and Path(shard).name == shard
                and "\\" not in shard and "\0" not in shard and len(os.fsencode(shard)) <= NAME_MAX):
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


def save_folder(cfg: dict, tensors: dict, path, tokenizer=None) -> Path:
    """Write a Hugging Face folder: config.json (``cfg``, with the weights' dtype) and
    model.safetensors (``tensors``, streamed from their tiles), and with a tokenizer (a
    tiletrain.data.Tokenizer) its tokenizer.json.  Each file is written atomically, the
    weights before config.json; the shards of an earlier sharded save are removed.  Under MPI
    every rank calls it; rank 0 writes the folder (the weights stream through it)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"save_pretrained: {path} exists and is not a folder")
    cfg = dict(cfg, dtype=str(np.dtype(next(iter(tensors.values())).dtype)))
    write_safetensors(path / WEIGHTS_NAME, tensors, {"format": "pt"})  # (MPI: collective)
    if rank() != 0:
        return path
    text = tokenizer.to_str() if tokenizer is not None else None  # the ByteTokenizer has none
    if text is not None:
        write_atomic(path / TOKENIZER_NAME, text.encode())
    _remove_shards(path)  # an earlier sharded save's files would contradict the new weights
    write_atomic(path / CONFIG_NAME, (json.dumps(cfg, indent=2, sort_keys=True) + "\n").encode())
    return path
