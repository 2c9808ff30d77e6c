"""Fuzz target: the sharded index of a Hugging Face folder, model.safetensors.index.json
(tiletrain.nn.pretrained.stored_safetensors and read_safetensors, which read the shards it
lists, and tiletrain.nn.hf._remove_shards, which save_pretrained uses to delete an earlier save's
shards).

Input: the index's bytes, in a folder holding two valid shards (and config.json, tokenizer.json),
next to a .safetensors file outside the folder (its absolute path replaces "@OUTSIDE@").
Contract: ValueError or FileNotFoundError naming the problem, or tensors read only from shards
in the folder; _remove_shards deletes nothing but .safetensors shards in the folder (and the
index) and raises nothing."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from _harness import instrumented, main, refused, scratch

with instrumented(__name__):
    from tiletrain import checkpoint as ck
    from tiletrain.nn import hf, pretrained

ALLOWED = (ValueError, FileNotFoundError)
SHARDS = {"model-00001-of-00002.safetensors": {"a.weight": np.ones((2, 3), np.float32)},
          "model-00002-of-00002.safetensors": {"b.weight": np.arange(4, dtype=np.float32),
                                               "b.bias": np.zeros(1)}}
KEEP = ("config.json", "tokenizer.json")  # files of the folder that are not shards
TOKENS = [f'"{w}"' for w in [*SHARDS, *KEEP, *(
    "weight_map metadata total_size ../outside.safetensors @OUTSIDE@ / .. . model.safetensors a.weight "
    "b.weight b.bias").split()]] + ["null", "[]", "{}"]
_shard_bytes: dict[str, bytes] = {}


def _shards() -> dict[str, bytes]:
    if not _shard_bytes:
        with tempfile.TemporaryDirectory() as tmp:
            for name, tensors in SHARDS.items():
                ck.write_safetensors(Path(tmp) / name, tensors, {"format": "pt"})
                _shard_bytes[name] = (Path(tmp) / name).read_bytes()
    return _shard_bytes


def check(data: bytes) -> None:
    root = scratch("index")
    folder = root / "model"
    folder.mkdir()
    for name, raw in _shards().items():
        (folder / name).write_bytes(raw)
    (root / "outside.safetensors").write_bytes(_shards()[next(iter(SHARDS))])
    for name in KEEP:
        (folder / name).write_text("{}")
    # "@OUTSIDE@": the absolute path of the file outside the folder (which the fuzzer cannot know)
    outside = str(root / "outside.safetensors").encode()
    (folder / pretrained.INDEX_NAME).write_bytes(data.replace(b"@OUTSIDE@", outside))
    stored, _ = refused(ALLOWED, pretrained.stored_safetensors, folder)
    if stored is not None:
        outside = [v.path for v in stored.values() if v.path.resolve().parent != folder.resolve()]
        assert not outside, f"read a shard outside the folder: {outside}"
        refused(ALLOWED, pretrained.read_safetensors, folder)
    hf._remove_shards(folder)
    left = {p.name for p in folder.iterdir()}
    assert set(KEEP) <= left and (root / "outside.safetensors").exists(), left
    assert pretrained.INDEX_NAME not in left, left


def seeds() -> dict[str, bytes]:
    weight_map = {k: shard for shard, tensors in SHARDS.items() for k in tensors}
    total = sum(a.nbytes for tensors in SHARDS.values() for a in tensors.values())
    # the layout transformers' save_pretrained(max_shard_size=...) writes
    return {"index": (json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2,
                                 sort_keys=True) + "\n").encode(),
            "one-shard": json.dumps({"weight_map": {"a.weight": next(iter(SHARDS))}}).encode()}


if __name__ == "__main__":
    main(check, seeds, TOKENS)
