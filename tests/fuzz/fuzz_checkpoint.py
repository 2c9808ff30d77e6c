"""Fuzz target: checkpoint directories (tiletrain.checkpoint.load, tiletrain.nn.pretrained.find_checkpoint
and what ``tiletrain generate --ckpt-dir`` reads: tiletrain.nn.pretrained.load_model).

Input: the first byte's bit 0 picks what the rest is: 0 -> the whole checkpoint file; 1 ->
the text of its "metadata" entry (the JSON of config, train_args, tokenizer, step, ...),
written into a checkpoint with valid checksums so that mutations reach the metadata's
meaning.  Bits 1-3 shape the directory: the file named ``run.safetensors`` instead of
``checkpoint.safetensors``; a second ``.safetensors`` file; a config.json (a Hugging Face
folder).  Contract: discovery and ``load`` raise CheckpointError; ``load_model`` (up to
building the model, which needs the runtime: the model class, its config, tiling and dtype
are made, and the tensors listed) raises what the CLI reports as bad input (ValueError,
TypeError)."""
from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np

from _harness import instrumented, main, mode, refused, scratch

with instrumented(__name__):
    from tiletrain import checkpoint as ck
    from tiletrain import train
    from tiletrain.nn import GPTConfig, Tiling, pretrained
    from tiletrain.nn.llama import LlamaConfig
    from tiletrain.nn.pretrained import model_class

CLI_BAD_INPUT = (ValueError, TypeError)  # what `tiletrain` prints as "error: ..." (tiletrain/cli.py main)
TOKENS = [f'"{w}"' for w in (
    "format metadata checksums config train_args tokenizer model_type gpt2 llama vocab_size tiles dtype "
    "float64 step optimizer steps param_groups data_rng dropout_rng n_head n_embd").split()] + [
    f'"{ck.FORMAT}"', "null", "[]", "{}", "-1", "0", "1e308"]
# the tensors a metadata input is saved with (names of a GPT's weights; the values do not matter)
TENSORS = {"transformer.wte.weight": np.zeros((16, 8), np.float32), "transformer.wpe.weight": np.ones((8, 8)),
           "optim.0.exp_avg": np.arange(4)}


class _Model:
    """What load_model gets instead of a model (no runtime, no tiles): the config, and the
    weights' shapes read."""

    def __init__(self, config):
        self.config = config

    def load_state_dict(self, weights) -> None:
        for v in weights.values():
            v.shape, v.dtype


def _config_only(model_type, cfg, tiling=None, dtype=np.float32, seed=0):
    """pretrained.build_model without the model: its class and config (the tiling and dtype
    are made by load_model)."""
    cls = model_class(model_type)
    assert isinstance(tiling, Tiling)
    np.dtype(dtype)
    return _Model(cls.config_class(**cfg))


def _checkpoint_with_metadata(path: Path, text: str) -> None:
    ck.write_safetensors(path, TENSORS, {"format": ck.FORMAT, "metadata": text}, checksums="checksums")


def check(data: bytes) -> None:
    m, rest = mode(data)
    d = scratch("ckpt")
    f = d / ("run.safetensors" if m & 2 else ck.CHECKPOINT_NAME)
    if m & 1:
        _checkpoint_with_metadata(f, rest.decode("utf-8", "surrogateescape" if m & 16 else "replace"))
    else:
        f.write_bytes(rest)
    if m & 4:
        (d / "other.safetensors").write_bytes(b"")
    if m & 8:
        (d / "config.json").write_text("{}")
    path, _ = refused(ck.CheckpointError, pretrained.find_checkpoint, d)
    if path is None:
        return
    refused(ck.CheckpointError, ck.load, path, train.RESUME_KEYS)  # what --resume reads (every tensor)
    with mock.patch.object(pretrained, "build_model", _config_only):  # (no runtime: load_model needs one)
        refused(CLI_BAD_INPUT, pretrained.load_model, ckpt_dir=d)


def seeds() -> dict[str, bytes]:
    from tiletrain.testing.tiny_hf import tiny_tokenizer
    rng = np.random.default_rng(0)
    gpt = GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8)
    llama = LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                        num_attention_heads=2, max_position_embeddings=8)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        tok = tiny_tokenizer(tmp, "hello world, hello tiles " * 4, vocab_size=260).read_text()
        for model_type, config, tokenizer in (("gpt2", gpt, None), ("llama", llama, tok)):
            args = train.TrainArgs(arch=model_type, tiles=(1, 8, 8))
            meta = {"model_type": model_type, "config": dataclasses.asdict(config), "tokenizer": tokenizer,
                    "train_args": dataclasses.asdict(args), "step": 3,
                    "optimizer": {"param_groups": [{"lr": 0.001, "params": [0]}], "steps": {"0": 3}},
                    "data_rng": rng.bit_generator.state, "dropout_rng": rng.bit_generator.state,
                    "losses": {"train": 2.5}}
            f = Path(tmp) / f"{model_type}.safetensors"
            ck.save(f, TENSORS, meta)
            out[f"file-{model_type}"] = b"\x00" + f.read_bytes()
            out[f"metadata-{model_type}"] = b"\x01" + json.dumps(meta, sort_keys=True).encode()
    return out


if __name__ == "__main__":
    main(check, seeds, TOKENS)
