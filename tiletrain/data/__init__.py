"""Corpora and batching: a byte-level tokenizer (vocabulary 256) and a text corpus with a
train/validation split, sampled reproducibly from a seed."""
from __future__ import annotations

import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

__all__ = ["ByteTokenizer", "Corpus", "stdlib_sources", "load_corpus"]


class ByteTokenizer:
    """UTF-8 bytes as tokens: vocabulary 256, lossless for any text."""

    vocab_size = 256

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)

    def decode(self, ids) -> str:
        arr = np.asarray(ids, dtype=np.int64)
        if arr.size and (arr.min() < 0 or arr.max() > 255):
            raise ValueError(f"byte tokens must be in [0, 255], got values in [{arr.min()}, {arr.max()}]")
        return arr.astype(np.uint8).tobytes().decode("utf-8", errors="replace")


def stdlib_sources() -> list[Path]:
    """The Python standard library's own .py files, in a fixed (sorted) order: real text
    that exists on every machine with Python."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py")
                   if "site-packages" not in p.parts and "test" not in p.parts and "tests" not in p.parts)
    if not files:
        raise RuntimeError(f"no Python sources found under {root}")
    return files


@dataclass
class Corpus:
    """Token ids split into train and validation parts."""

    train: np.ndarray
    val: np.ndarray
    sources: list[str]

    def batch(self, split: str, batch: int, seq: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(inputs, targets), each (batch, seq) int64: random windows, targets shifted by one."""
        data = {"train": self.train, "val": self.val}.get(split)
        if data is None:
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        if len(data) <= seq + 1:
            raise ValueError(f"the {split} split has {len(data)} tokens, too few for sequences of {seq}")
        starts = rng.integers(0, len(data) - seq - 1, size=batch)
        idx = starts[:, None] + np.arange(seq + 1)[None, :]
        window = data[idx]
        return np.ascontiguousarray(window[:, :-1]), np.ascontiguousarray(window[:, 1:])


def load_corpus(files: Sequence[str | os.PathLike] | None = None, *, val_fraction: float = 0.1,
                max_bytes: int | None = None) -> Corpus:
    """Read text files (default: the standard library's sources) as UTF-8, concatenate them
    in the given order, tokenize bytes and split off the last `val_fraction` for validation."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    paths = [Path(f) for f in files] if files else stdlib_sources()
    chunks, total = [], 0
    for p in paths:
        if not p.is_file():
            raise FileNotFoundError(f"data file not found: {p}")
        raw = p.read_bytes()
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{p} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
        chunks.append(raw)
        total += len(raw)
        if max_bytes is not None and total >= max_bytes:
            break
    data = b"\n".join(chunks)
    if max_bytes is not None:
        data = data[:max_bytes]
    if len(data) < 64:
        raise ValueError(f"the corpus has {len(data)} bytes ({', '.join(map(str, paths[:3]))}); "
                         "it needs at least 64")
    ids = np.frombuffer(data, dtype=np.uint8).astype(np.int64)
    n_val = max(1, int(len(ids) * val_fraction))
    return Corpus(ids[:-n_val], ids[-n_val:], [str(p) for p in paths])
