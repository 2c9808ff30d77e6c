"""Inference: the key/value cache, generation (``generate``) for GPT and Llama with top-k /
top-p sampling, eos handling and speculative decoding with a draft model.

Above ``nn`` in the import order: models call into it only lazily (``GPT.generate``), and
their attention layers take a cache object passed in (``cache.attend``)."""
from .generate import DECODE_SCHED, GenerationStats, KVCache, generate, pick_next, sampling_probs
from .text import sample_text

__all__ = ["DECODE_SCHED", "GenerationStats", "KVCache", "generate", "pick_next", "sample_text", "sampling_probs"]
