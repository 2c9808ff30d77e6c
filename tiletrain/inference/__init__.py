"""Inference: the key/value cache and generation (``generate``) for GPT and Llama.

Above ``nn`` in the import order: models call into it only lazily (``GPT.generate``), and
their attention layers take a cache object passed in (``cache.attend``)."""
from .generate import KVCache, generate, pick_next

__all__ = ["KVCache", "generate", "pick_next"]
