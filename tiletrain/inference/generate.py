"""Generation with a key/value cache (GPT and Llama): the prompt runs once (prefill) and each
new token runs one position through the model, attending to the cached keys and values of
the tokens before it (``tiletrain.ops.attention.decode_attention``) instead of recomputing
the whole context.  A model provides ``forward_cached(ids, cache, pos)``; its attention
layers call ``cache.attend``.  Greedy output equals the uncached loop token for token."""
from __future__ import annotations

import numbers

import numpy as np

from ..ops import no_grad
from ..ops.attention import decode_attention
from ..runtime.kernels import copy_regions
from ..tensors import Tensor, zeros


class KVCache:
    """Per layer, keys and values of shape (B, Hkv, max_len, D), tiled along time by
    ``time_tile``; allocated at the first write with the batch and head tiles of the keys
    written (so decode attention reads them without re-tiling), filled in place."""

    def __init__(self, n_layer: int, max_len: int, time_tile: int = 64):
        self.max_len, self.time_tile = int(max_len), int(time_tile)
        self.k: list[Tensor | None] = [None] * n_layer
        self.v: list[Tensor | None] = [None] * n_layer

    def write(self, layer: int, k: Tensor, v: Tensor, pos: int) -> None:
        """Keys and values (B, Hkv, n, D) of positions pos .. pos + n - 1 of ``layer``."""
        B, Hkv, n, D = k.shape
        if pos + n > self.max_len:
            raise ValueError(f"KVCache: positions up to {pos + n} exceed the cache length {self.max_len}")
        if self.k[layer] is None:
            tiles = (k.tiles[0], k.tiles[1], min(self.time_tile, self.max_len), D)
            self.k[layer], self.v[layer] = (zeros((B, Hkv, self.max_len, D), tiles=tiles, dtype=k.dtype)
                                            for _ in range(2))
        spec = ((0, 0, 0, 0), (0, 1, 2, 3), (1, 1, 1, 1), (0, 0, pos, 0), (1, 1, 1, 1), (B, Hkv, n, D))
        copy_regions(self.k[layer], [(k, *spec)])
        copy_regions(self.v[layer], [(v, *spec)])

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor, pos: int) -> Tensor:
        """Write the new keys/values (B, Hkv, n, D) at pos, then causal attention of the
        queries (B, H, n, D) at pos.. over every cached position up to theirs."""
        self.write(layer, k, v, pos)
        return decode_attention(q, self.k[layer], self.v[layer], pos)


def pick_next(logits: np.ndarray, temperature: float, top_k, rng) -> np.ndarray:
    """The next token of each row of logits (B, vocab): argmax when temperature == 0."""
    if temperature == 0:
        return logits.argmax(axis=-1)
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        cut = np.partition(logits, -top_k, axis=-1)[:, -top_k, None]  # each row's k-th largest
        logits = np.where(logits < cut, -np.inf, logits)
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.array([rng.choice(p.shape[1], p=row) for row in p])


def generate(model, input_ids, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                    seed: int | None = None, time_tile: int = 64) -> np.ndarray:
    """``input_ids`` (B, T) extended by ``max_new_tokens`` tokens (an int64 array (B, T + new),
    the prompt included, as transformers' generate), with a key/value cache: one prefill pass
    over the prompt, then one position per new token.  T + max_new_tokens must fit the
    model's context (no sliding window)."""
    idx = np.asarray(input_ids)
    if idx.ndim != 2 or idx.dtype.kind not in "iu" or idx.shape[1] < 1:
        raise ValueError(f"generate: input_ids must be a non-empty 2-D integer array (B, T), got "
                         f"{idx.dtype} {idx.shape}")
    if not isinstance(max_new_tokens, numbers.Integral) or max_new_tokens < 0:
        raise ValueError(f"generate: max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if not isinstance(temperature, numbers.Real) or temperature < 0:
        raise ValueError(f"generate: temperature must be >= 0, got {temperature!r}")
    B, T = idx.shape
    context = model.config.block_size
    if T + max_new_tokens > context:
        raise ValueError(f"generate: the prompt ({T}) plus max_new_tokens ({max_new_tokens}) exceed the model's "
                         f"context of {context} positions")
    rng = np.random.default_rng(seed)
    out = [idx.astype(np.int64)]
    cache = KVCache(model.config.n_layer, T + max_new_tokens, time_tile)
    was_training = model.training
    model.eval()
    try:
        with no_grad():
            step_ids, pos = out[0], 0
            for _ in range(int(max_new_tokens)):
                logits = model.forward_cached(step_ids, cache, pos).numpy()[:, -1].astype(np.float64)
                pos += step_ids.shape[1]
                step_ids = pick_next(logits, float(temperature), top_k, rng).astype(np.int64)[:, None]
                out.append(step_ids)
    finally:
        model.train(was_training)
    return np.concatenate(out, axis=1)
