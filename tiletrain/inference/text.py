"""Text in, text out: what ``tiletrain generate`` and the end-of-training sample run.  The
cached ``generate`` with its sliding window (a prompt plus tokens longer than the model's
context keeps going), ``batch`` copies of the prompt sampled with the seed's row streams,
each text cut at its first eos token."""
from __future__ import annotations

import sys

import numpy as np

from .generate import GenerationConfig, GenerationStats, generate


def eos_ids(values, tokenizer) -> list[int] | None:
    """``--eos`` values (token ids, or texts the tokenizer encodes as one token) as ids."""
    if not values:
        return None
    out = []
    for v in values:
        v = str(v)
        if v.lstrip("-").isdigit():
            out.append(int(v))
            continue
        ids = tokenizer.encode(v)
        if len(ids) != 1:
            raise ValueError(f"--eos {v!r} is not one token of the tokenizer (it encodes as {ids}); give a token id")
        out.append(int(ids[0]))
    return out


def prompt_ids(tokenizer, prompt: str) -> list[int]:
    """The prompt's token ids; an empty prompt starts from a newline (or token 0)."""
    return [int(i) for i in tokenizer.encode(prompt)] or [int(i) for i in tokenizer.encode("\n")][-1:] or [0]


def print_samples(texts: list[str], *summary: str) -> None:
    """The samples on stdout (numbered when there are several), then the ``summary`` lines
    (the tokens/s line last) on stderr."""
    for i, text in enumerate(texts):
        print(text if len(texts) == 1 else f"--- sample {i + 1} of {len(texts)} ---\n{text}", flush=True)
    for line in summary:
        print(line, file=sys.stderr, flush=True)


def sample_text(model, tokenizer, prompt: str, generation_config: GenerationConfig, seed: int | None = 0,
                batch: int = 1, draft=None) -> tuple[list[str], GenerationStats]:
    """``batch`` continuations of ``prompt`` (an empty prompt starts from a newline, or token 0)
    generated as ``generation_config`` says and decoded with ``tokenizer``, each with the
    prompt and up to its first eos token (left out), and the GenerationStats."""
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be an int >= 1, got {batch!r}")
    ids = prompt_ids(tokenizer, prompt)
    out, stats = generate(model, np.array([ids] * batch, dtype=np.int64), seed=seed, draft=draft,
                          sliding_window=True, return_stats=True, generation_config=generation_config)
    return decode_rows(tokenizer, out, len(ids), generation_config.eos_token_id), stats


def decode_rows(tokenizer, tokens: np.ndarray, prompt_len: int, eos_token_id=None) -> list[str]:
    """Each row of ``tokens`` (B, prompt_len + new) decoded, up to its first eos token after
    the prompt (left out)."""
    eos = [] if eos_token_id is None else np.atleast_1d(eos_token_id)
    texts = []
    for row in tokens:
        hits = np.flatnonzero(np.isin(row[prompt_len:], eos))
        texts.append(tokenizer.decode([int(t) for t in (row[:prompt_len + hits[0]] if hits.size else row)]))
    return texts
