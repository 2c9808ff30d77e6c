"""Checkpoints: one safetensors file holding the model weights (Hugging Face GPT-2 names),
the optimizer state, and JSON metadata (config, step, data position, RNG states).

Writes are atomic: the file is written under a temporary name in the same directory,
flushed and fsynced, then renamed over the previous checkpoint (and the directory is
fsynced), so a crash at any moment leaves either the old or the new checkpoint whole."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "tiletrain-checkpoint-1"
CHECKPOINT_NAME = "checkpoint.safetensors"


class CheckpointError(ValueError):
    """A checkpoint file is missing, corrupt, truncated or does not fit."""


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, data: bytes, _before_rename=None) -> None:
    """Write bytes to `path` atomically (temporary file, fsync, rename, fsync dir)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if _before_rename is not None:  # tests simulate a crash here
            _before_rename(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(path.parent)


def save(path: str | os.PathLike, tensors: dict[str, np.ndarray], metadata: dict[str, Any],
         _before_rename=None) -> Path:
    """Save arrays + JSON-serialisable metadata as one safetensors file, atomically."""
    from safetensors.numpy import save as st_save

    arrays = {}
    for k, v in tensors.items():
        a = np.ascontiguousarray(v)
        if a.dtype not in (np.float32, np.float64, np.int64):
            raise TypeError(f"checkpoint entry {k!r} has unsupported dtype {a.dtype}")
        arrays[k] = a
    meta = {"format": FORMAT, "metadata": json.dumps(metadata, sort_keys=True)}
    write_atomic(path, st_save(arrays, metadata=meta), _before_rename=_before_rename)
    return Path(path)


def load(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read a checkpoint: (arrays, metadata).  Raises CheckpointError saying what is wrong."""
    from safetensors import SafetensorError
    from safetensors.numpy import load as st_load

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    raw = path.read_bytes()
    try:
        arrays = st_load(raw)
        header_len = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + header_len])
    except (SafetensorError, ValueError, json.JSONDecodeError, OSError) as exc:
        raise CheckpointError(f"{path} is not a readable checkpoint (corrupt or truncated: {exc})") from None
    meta = header.get("__metadata__", {})
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a tiletrain checkpoint (format {meta.get('format')!r}, "
                              f"expected {FORMAT!r})")
    try:
        metadata = json.loads(meta["metadata"])
    except (KeyError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: checkpoint metadata is unreadable ({exc})") from None
    return arrays, metadata
