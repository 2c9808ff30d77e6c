"""Inference: the key/value cache, generation (``generate``) for any tiletrain.nn.CausalLM
with top-k / top-p sampling, eos handling and speculative decoding with a draft model; its
options as one ``GenerationConfig`` (transformers' names and defaults).

Above ``nn`` in the import order: it calls the model contract (``forward_cached``; the
attention layers take the cache object passed in, ``cache.attend``).  ``CausalLM.generate``,
the model's convenience method, is the one call from nn up into this package (deferred to
the call)."""
from .generate import DECODE_SCHED, GenerationConfig, GenerationStats, KVCache, generate, pick_next, sampling_probs
from .text import sample_text

__all__ = ["DECODE_SCHED", "GenerationConfig", "GenerationStats", "KVCache", "generate", "pick_next", "sample_text",
           "sampling_probs"]
