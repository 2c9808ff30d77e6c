"""Checkpoints: one safetensors file holding the model weights (Hugging Face GPT-2 names),
the optimizer state, and JSON metadata (config, step, data position, RNG states).

Writes are atomic: the file is written under a temporary name in the same directory,
flushed and fsynced, then renamed over the previous checkpoint (and the directory is
fsynced), so a crash at any moment leaves either the old or the new checkpoint whole;
temporaries left by an interrupted write are removed at the next save.

Every tensor's bytes carry a SHA-256 checksum in the file's metadata, verified on load
(CheckpointError naming the tensor and the file).  Checkpoints written before checksums
existed load with a warning."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "tiletrain-checkpoint-1"
CHECKPOINT_NAME = "checkpoint.safetensors"


class CheckpointError(ValueError):
    """A checkpoint file is missing, corrupt, truncated or does not fit."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, I/O error, not a directory...)."""


def checksum(a: np.ndarray) -> str:
    """SHA-256 of an array's bytes (C order), as stored in the file."""
    return hashlib.sha256(np.ascontiguousarray(a).view(np.uint8).reshape(-1)).hexdigest()


def _stale_temporaries(path: Path) -> list[Path]:
    return list(path.parent.glob(f".{path.name}.*.tmp"))


def check_writable(directory: str | os.PathLike) -> Path:
    """Create `directory` if needed and prove a file can be written there (before any work);
    CheckpointError (a bad argument) naming the path otherwise."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise CheckpointError(f"checkpoint directory {directory} is not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".tiletrain-write-test.", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise CheckpointError(f"checkpoint directory {directory} is not writable: {exc.strerror or exc}") from None
    return directory


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
    for stale in _stale_temporaries(path):  # left by a write that was killed before its rename
        stale.unlink(missing_ok=True)
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
    meta = {"format": FORMAT, "metadata": json.dumps(metadata, sort_keys=True),
            "checksums": json.dumps({k: checksum(a) for k, a in arrays.items()}, sort_keys=True)}
    try:
        write_atomic(path, st_save(arrays, metadata=meta), _before_rename=_before_rename)
    except OSError as exc:
        raise CheckpointWriteError(f"cannot write checkpoint {path}: {exc.strerror or exc}") from exc
    return Path(path)


def _verify(path: Path, arrays: dict[str, np.ndarray], meta: dict) -> None:
    if "checksums" not in meta:
        warnings.warn(f"{path} has no checksums (written by an older tiletrain): loading it unverified",
                      stacklevel=3)
        return
    try:
        sums = json.loads(meta["checksums"])
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: the checksum table is unreadable ({exc})") from None
    if not isinstance(sums, dict) or set(sums) != set(arrays):
        missing = sorted(set(arrays) ^ set(sums if isinstance(sums, dict) else {}))
        raise CheckpointError(f"{path}: the checksum table does not match the tensors ({', '.join(missing)})")
    for k in sorted(arrays):
        if checksum(arrays[k]) != sums[k]:
            raise CheckpointError(f"{path}: tensor {k!r} fails its SHA-256 checksum (the file is corrupt)")


def _missing_keys(metadata: Any, required) -> list[str]:
    missing = []
    for key in required:  # "a.b": key b of the dict under key a
        node = metadata
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                missing.append(key)
                break
            node = node[part]
    return missing


def load(path: str | os.PathLike, required: tuple[str, ...] = ()) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read a checkpoint: (arrays, metadata), each tensor checked against its checksum and
    the metadata against the `required` keys ("a.b" for a nested key).  Raises
    CheckpointError saying what is wrong."""
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
    _verify(path, arrays, meta)
    missing = _missing_keys(metadata, required)
    if missing:
        raise CheckpointError(f"{path}: checkpoint metadata lacks {', '.join(map(repr, missing))} "
                              f"(damaged, or not written by this version of tiletrain)")
    return arrays, metadata
