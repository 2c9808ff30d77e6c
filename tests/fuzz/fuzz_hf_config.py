"""Fuzz target: config.json of a Hugging Face folder (tiletrain.nn.pretrained.read_hf_config,
model_class, and the model classes' config_from_hf: GPT-2 in tiletrain/nn/gpt.py, Llama).

Input: the file's bytes.  Contract: ValueError naming the problem, or a model config (GPTConfig
or LlamaConfig) whose sizes are positive ints: what from_pretrained builds the model from."""
from __future__ import annotations

import json

from _harness import as_file, instrumented, main, refused

with instrumented(__name__):
    from tiletrain.nn.gpt import GPTConfig, hf_config as gpt2_hf_config
    from tiletrain.nn.llama import LlamaConfig, hf_config_dict
    from tiletrain.nn.pretrained import CONFIG_NAME, model_class, read_hf_config

ALLOWED = (ValueError,)
TOKENS = [f'"{w}"' for w in (
    "model_type gpt2 llama vocab_size n_positions n_layer n_head n_embd n_inner activation_function gelu_new "
    "layer_norm_epsilon tie_word_embeddings hidden_size num_attention_heads num_key_value_heads head_dim "
    "rope_parameters rope_theta rope_type intermediate_size num_hidden_layers hidden_act "
    "rms_norm_eps").split()] + [
    "null", "true", "false", "1e-5", "-1", "0", "1e308", "[]", "{}", "NaN", "Infinity"]


def check(data: bytes) -> None:
    cfg, _ = refused(ALLOWED, read_hf_config, as_file(data, CONFIG_NAME).parent)
    if cfg is None:
        return
    cls, _ = refused(ALLOWED, model_class, cfg.get("model_type"))
    if cls is None:
        return
    config, _ = refused(ALLOWED, cls.config_from_hf, cfg)
    assert config is None or isinstance(config, cls.config_class), config


def seeds() -> dict[str, bytes]:
    gpt = GPTConfig(vocab_size=300, block_size=32, n_layer=2, n_head=2, n_embd=16)
    llama = LlamaConfig(vocab_size=300, hidden_size=16, intermediate_size=48, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    return {name: (json.dumps(c, indent=2, sort_keys=True) + "\n").encode()  # as save_pretrained writes them
            for name, c in (("gpt2", gpt2_hf_config(gpt)), ("llama", hf_config_dict(llama)))}


if __name__ == "__main__":
    main(check, seeds, TOKENS)
