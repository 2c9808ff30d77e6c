"""Fuzz target: tokenizer.json (tiletrain.data.tokenizer.Tokenizer.from_pretrained and
from_str, through the ``tokenizers`` library), then what training and generation do with it.

Input: the file's bytes.  Contract: ValueError naming the file, or a tokenizer that encodes
a fixed text into ids in [0, vocab_size) (they index the model's embedding rows), decodes
them, and reloads from its own to_str() (as checkpoints store it)."""
from __future__ import annotations

import tempfile

from _harness import as_file, instrumented, main, refused

with instrumented(__name__):
    from tiletrain.data.tokenizer import TOKENIZER_NAME, Tokenizer
    from tiletrain.testing.tiny_hf import tiny_tokenizer

ALLOWED = (ValueError,)
TEXT = "Hello wörld 123 <|endoftext|>\n\tdef f(x):  return x  # ok\r\n"
TOKENS = [f'"{w}"' for w in (
    "model type BPE WordPiece WordLevel Unigram vocab merges added_tokens id content special normalizer "
    "pre_tokenizer post_processor decoder ByteLevel unk_token TemplateProcessing single pair "
    "continuing_subword_prefix max_input_chars_per_word dropout version 1.0").split()] + [
    "null", "true", "false", "-1", "4294967295", "[]", "{}"]


def check(data: bytes) -> None:
    tok, _ = refused(ALLOWED, Tokenizer.from_pretrained, as_file(data, TOKENIZER_NAME).parent)
    refused(ALLOWED, Tokenizer.from_str, data.decode("utf-8", "replace"))
    if tok is None:
        return
    n = tok.vocab_size
    ids, _ = refused(ALLOWED, tok.encode, TEXT)
    if ids is not None:
        assert all(0 <= i < n for i in ids), f"ids outside [0, {n}): {sorted(set(ids))[-3:]}"
        refused(ALLOWED, tok.decode, ids)
    again = Tokenizer.from_str(tok.to_str())
    assert again.vocab_size == n, (again.vocab_size, n)


def seeds() -> dict[str, bytes]:
    from tokenizers import Tokenizer as HFTokenizer, models, pre_tokenizers, trainers
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        out["bpe"] = tiny_tokenizer(tmp, "hello world, hello tiles\n" * 4, vocab_size=262).read_bytes()
        for name, model, trainer in (
                ("wordpiece", models.WordPiece(unk_token="[UNK]"), trainers.WordPieceTrainer),
                ("wordlevel", models.WordLevel(unk_token="[UNK]"), trainers.WordLevelTrainer),
                ("unigram", models.Unigram(), trainers.UnigramTrainer)):
            tok = HFTokenizer(model)
            tok.pre_tokenizer = pre_tokenizers.Whitespace()
            kw = {"unk_token": "[UNK]"} if name == "unigram" else {}
            trainer = trainer(vocab_size=30, special_tokens=["[UNK]"], show_progress=False, **kw)
            tok.train_from_iterator(["hello world", "hello tiles"], trainer)
            out[name] = Tokenizer(tok).to_str().encode()  # as tiletrain stores it
    return out


if __name__ == "__main__":
    main(check, seeds, TOKENS)
