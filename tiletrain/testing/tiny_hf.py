"""Tiny Hugging Face artefacts for tests and examples, made offline: a byte-level BPE
tokenizer.json trained on a given text (the `tokenizers` library) and a random GPT-2 folder
(transformers' own save_pretrained)."""
from __future__ import annotations

from pathlib import Path


def tiny_tokenizer(path, text: str, vocab_size: int = 300) -> Path:
    """Train a GPT-2-style byte-level BPE (<|endoftext|> special token) on ``text``, padded
    with special tokens to exactly ``vocab_size`` ids; write
    ``path``/tokenizer.json (``path`` a folder) and return its path."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text], trainer)
    n = tok.get_vocab_size()  # a short text may run out of merges: pad to exactly vocab_size
    tok.add_special_tokens([f"<|extra_{i}|>" for i in range(vocab_size - n)])
    out = Path(path) / "tokenizer.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(out))
    return out


def tiny_gpt2_folder(path, vocab_size: int, n_positions: int = 32, n_layer: int = 1, n_head: int = 2,
                     n_embd: int = 16, seed: int = 0, **save_kw) -> Path:
    """A randomly initialised transformers GPT2LMHeadModel written with its save_pretrained."""
    import torch
    import transformers
    cfg = transformers.GPT2Config(vocab_size=vocab_size, n_positions=n_positions, n_layer=n_layer, n_head=n_head,
                                  n_embd=n_embd, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(seed)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(path, **save_kw)
    return Path(path)
