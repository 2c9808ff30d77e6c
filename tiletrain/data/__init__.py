"""Corpora and batching (3-D volumes for CNNs: tiletrain.data.volume): tokenizers (bytes, the default, or a Hugging Face tokenizer.json) and
a text corpus with a train/validation split, sampled reproducibly from a seed.  A corpus
tokenised with a tokenizer.json is cached on disk, keyed by a hash of the text and the
tokenizer (``$TILETRAIN_CACHE``, default ~/.cache/tiletrain)."""
from __future__ import annotations

import hashlib
import io
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..checkpoint import write_atomic
from ..config import cache_root
from .tokenizer import TOKENIZER_NAME, ByteTokenizer, Tokenizer, load_tokenizer
from .volume import VolumeDataset, gaussian_random_fields, make_cosmo_dataset, write_volumes

__all__ = ["ByteTokenizer", "Tokenizer", "load_tokenizer", "TOKENIZER_NAME", "Corpus", "stdlib_sources",
           "load_corpus", "cache_dir", "VolumeDataset", "gaussian_random_fields", "make_cosmo_dataset",
           "write_volumes"]


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


def cache_dir() -> Path:
    """Where tokenised corpora are cached: $TILETRAIN_CACHE/tokens or ~/.cache/tiletrain/tokens."""
    return Path(cache_root()) / "tokens"


def _tokenise(data: bytes, tokenizer, progress: bool) -> np.ndarray:
    """Token ids of UTF-8 text with a tokenizer.json, cached on disk by content hash; a
    progress line on stderr while tokenising."""
    key = hashlib.sha256(tokenizer.fingerprint.encode() + b"\0" + data).hexdigest()
    path = cache_dir() / f"{key}.npy"
    if path.is_file():
        try:
            ids = np.load(path, mmap_mode="r")  # a damaged header claiming a huge shape allocates nothing
            if ids.ndim == 1 and ids.dtype.kind in "iu":
                return np.array(ids, dtype=np.int64)
        except (OSError, ValueError):
            pass  # a damaged cache entry is rebuilt
    text = data.decode("utf-8", errors="ignore")  # max_bytes may have cut a character
    lines = text.splitlines(keepends=True)
    chunks, start, size = [], 0, 0
    for i, line in enumerate(lines):  # ~1 MB pieces at line ends: a progress unit each
        size += len(line)
        if size >= 1 << 20 or i == len(lines) - 1:
            chunks.append("".join(lines[start:i + 1]))
            start, size = i + 1, 0
    from tqdm import tqdm
    ids: list[int] = []
    with tqdm(total=len(data), unit="B", unit_scale=True, desc=f"tokenise ({tokenizer.source})",
              disable=not progress, file=sys.stderr, dynamic_ncols=True) as bar:
        for chunk in chunks:
            ids.extend(tokenizer.encode(chunk, add_special_tokens=False))
            bar.update(len(chunk.encode("utf-8")))
    arr = np.asarray(ids, dtype=np.int64)
    try:  # cache atomically; an unwritable cache only costs the next run the time
        buf = io.BytesIO()
        np.save(buf, arr.astype(np.int32 if tokenizer.vocab_size < 2**31 else np.int64))
        write_atomic(path, buf.getvalue())
    except OSError:
        pass
    return arr


def load_corpus(files: Sequence[str | os.PathLike] | None = None, *, val_fraction: float = 0.1,
                max_bytes: int | None = None, tokenizer=None, progress: bool = False) -> Corpus:
    """Read text files (default: the standard library's sources) as UTF-8, concatenate them
    in the given order, tokenize (bytes, or ``tokenizer``: a tiletrain.data.Tokenizer, the
    result cached on disk) and split off the last `val_fraction` for validation."""
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
    if tokenizer is None or isinstance(tokenizer, ByteTokenizer):
        ids = np.frombuffer(data, dtype=np.uint8).astype(np.int64)
    else:
        ids = _tokenise(data, tokenizer, progress)
        if len(ids) < 2:
            raise ValueError(f"the corpus has {len(ids)} tokens after tokenisation; it needs more text")
    n_val = max(1, int(len(ids) * val_fraction))
    return Corpus(ids[:-n_val], ids[-n_val:], [str(p) for p in paths])
