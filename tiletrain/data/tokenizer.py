"""Tokenizers: bytes (the default, vocabulary 256) and Hugging Face ``tokenizer.json`` files
(through the ``tokenizers`` library).  Both have ``encode(text)``, ``decode(ids)``,
``vocab_size`` and a ``fingerprint`` that keys cached tokenised corpora."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

__all__ = ["ByteTokenizer", "Tokenizer", "TOKENIZER_NAME", "load_tokenizer"]

TOKENIZER_NAME = "tokenizer.json"


class ByteTokenizer:
    """UTF-8 bytes as tokens: vocabulary 256, lossless for any text."""

    vocab_size = 256
    fingerprint = "bytes"

    def encode(self, text: str) -> np.ndarray:
        """The UTF-8 bytes of ``text`` as an int64 array (a sequence of ints)."""
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)

    def decode(self, ids) -> str:
        arr = np.asarray(ids, dtype=np.int64)
        if arr.size and (arr.min() < 0 or arr.max() > 255):
            raise ValueError(f"byte tokens must be in [0, 255], got values in [{arr.min()}, {arr.max()}]")
        return arr.astype(np.uint8).tobytes().decode("utf-8", errors="replace")

    def to_str(self) -> None:
        """No tokenizer.json: bytes need none."""
        return None

    def __repr__(self) -> str:
        return "ByteTokenizer()"


class Tokenizer:
    """A Hugging Face fast tokenizer (``tokenizer.json``), as transformers'
    ``PreTrainedTokenizerFast``: ``encode`` adds the special tokens its post-processor adds
    (GPT-2: none; Llama: <s>) unless ``add_special_tokens=False``."""

    def __init__(self, tokenizer, source: str = "<memory>"):
        self._tok = tokenizer
        self.source = source
        ids = tokenizer.get_vocab(with_added_tokens=True).values()
        n = tokenizer.get_vocab_size(with_added_tokens=True)
        if len(ids) != n or (n and (min(ids) != 0 or max(ids) != n - 1)) or len(set(ids)) != n:
            # ids index the model's embedding rows: vocab_size of them, each token its own
            raise ValueError(f"tokenizer: {source}: the token ids must be 0..vocab_size-1, one per token "
                             f"({len(ids)} tokens, {len(set(ids))} distinct ids in [{min(ids, default=0)}, "
                             f"{max(ids, default=0)}], vocab_size {n})")
        self._json = tokenizer.to_str()
        self.fingerprint = hashlib.sha256(self._json.encode()).hexdigest()

    @classmethod
    def from_pretrained(cls, path) -> "Tokenizer":
        """Load ``tokenizer.json`` from a folder (a Hugging Face model folder) or a file."""
        from tokenizers import Tokenizer as HFTokenizer
        path = Path(path)
        f = path / TOKENIZER_NAME if path.is_dir() else path
        if not f.is_file():
            raise FileNotFoundError(f"tokenizer: no {TOKENIZER_NAME} at {path}" if path.is_dir()
                                    else f"tokenizer: {path} does not exist")
        return cls._parse(HFTokenizer.from_file, str(f), str(f))

    @classmethod
    def from_str(cls, text: str, source: str = "<checkpoint>") -> "Tokenizer":
        """The tokenizer of a tokenizer.json text (as stored in checkpoints); ValueError
        naming ``source`` when it is not one."""
        from tokenizers import Tokenizer as HFTokenizer
        if not isinstance(text, str):
            raise ValueError(f"tokenizer: {source} holds a {type(text).__name__}, not a tokenizer.json text")
        return cls._parse(HFTokenizer.from_str, text, source)

    @classmethod
    def _parse(cls, read, arg: str, source: str) -> "Tokenizer":
        try:
            return cls(read(arg), source)
        except Exception as exc:  # the library raises a bare Exception for a malformed file
            raise ValueError(f"tokenizer: {source} is not a valid tokenizer.json ({exc})") from None

    @property
    def vocab_size(self) -> int:
        """Ids are in [0, vocab_size) (added tokens included)."""
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        try:
            return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)
        except TypeError:
            raise
        except Exception as exc:  # the library's bare Exception ("Missing [UNK] token from the vocabulary")
            raise ValueError(f"tokenizer: {self.source} cannot encode the text ({exc})") from None

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        ids = [int(i) for i in np.asarray(ids, dtype=np.int64).reshape(-1)]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"token ids must be in [0, {self.vocab_size}), got {bad[0]}")
        try:
            return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)
        except Exception as exc:  # (as in encode)
            raise ValueError(f"tokenizer: {self.source} cannot decode the ids ({exc})") from None

    def to_str(self) -> str:
        """The tokenizer.json text (stored in checkpoints, written by export)."""
        return self._json

    def __repr__(self) -> str:
        return f"Tokenizer({self.source!r}, vocab_size={self.vocab_size})"


def load_tokenizer(path=None):
    """``Tokenizer.from_pretrained(path)``, or the ByteTokenizer when path is None."""
    return ByteTokenizer() if path is None else Tokenizer.from_pretrained(path)
