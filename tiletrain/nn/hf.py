"""Conversion between tiletrain's GPT and Hugging Face's GPT2LMHeadModel.

The GPT's parameter names and layouts already are GPT2LMHeadModel's (Conv1D weights in
(in, out) layout, lm_head.weight tied to transformer.wte.weight), so conversion is a
matter of configs, key clean-up and dtypes.  transformers is never imported: a model is
anything with ``.config`` and ``.state_dict()``; nothing touches the network.  Folders
(config.json + safetensors) are read and written by tiletrain/nn/pretrained.py, which uses
the GPT's config_from_hf / hf_config / hf_rename defined from this module."""
from __future__ import annotations

import numbers
import re
from collections.abc import Mapping

import numpy as np

from .gpt import GPTConfig
from .module import to_numpy

__all__ = ["config_from_hf", "hf_config", "clean_state_dict", "infer_config", "from_hf", "to_hf_state_dict", "HF_BUFFERS"]

# non-parameter buffers that older transformers versions put in the state dict
HF_BUFFERS = re.compile(r"^(transformer\.)?h\.\d+\.attn\.(bias|masked_bias)$")
_TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh")


def _near(x: numbers.Real, target: float, tol: float) -> bool:
    try:
        return abs(float(x) - target) <= tol
    except OverflowError:  # an int beyond the floats
        return False


def config_from_hf(hf_config, dropout: float = 0.0) -> GPTConfig:
    """A GPTConfig from a GPT-2 config: a transformers GPT2Config (or any object with its
    attributes) or a config.json dict.  Unsupported values are refused (ValueError naming
    the key); keys that do not change the computation (dropout rates, token ids, ...) are
    ignored.

    Dropout is not taken from the HF config (its attn/resid/embd_pdrop differ and attention
    dropout is not supported); the model is built with ``dropout`` (default 0)."""
    if isinstance(hf_config, Mapping):
        def get(name, default=None):
            return hf_config.get(name, default)
    else:
        def get(name, default=None):
            return getattr(hf_config, name, default)

    for name in ("vocab_size", "n_positions", "n_layer", "n_head", "n_embd"):
        if get(name) is None:
            raise ValueError(f"from_hf: the model's config has no {name!r}; is it a GPT-2 config?")
    problems = []
    act = get("activation_function", "gelu_new")
    if act not in _TANH_GELUS:
        problems.append(f"activation_function={act!r} (tiletrain's GPT uses the tanh GELU: {_TANH_GELUS})")
    eps = get("layer_norm_epsilon", 1e-5)
    if not isinstance(eps, numbers.Real) or isinstance(eps, bool) or not _near(eps, 1e-5, 1e-12):
        problems.append(f"layer_norm_epsilon={eps!r:.40} (tiletrain's GPT uses 1e-5)")
    n_inner, n_embd = get("n_inner"), get("n_embd")
    if n_inner is not None and isinstance(n_embd, numbers.Integral) and n_inner != 4 * n_embd:
        problems.append(f"n_inner={n_inner!r:.40} (tiletrain's GPT uses 4 * n_embd = {4 * n_embd})")
    if not get("scale_attn_weights", True):
        problems.append("scale_attn_weights=False")
    for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"):
        if get(flag, False):
            problems.append(f"{flag}=True")
    if not get("tie_word_embeddings", True):
        problems.append("tie_word_embeddings=False (tiletrain's GPT ties the head to wte)")
    if problems:
        raise ValueError("from_hf: unsupported GPT-2 configuration: " + "; ".join(problems))
    return GPTConfig(vocab_size=get("vocab_size"), block_size=get("n_positions"), n_layer=get("n_layer"),
                     n_head=get("n_head"), n_embd=get("n_embd"), dropout=dropout, bias=True)


def hf_config(config: GPTConfig) -> dict:
    """config.json of a GPT2LMHeadModel with this configuration (transformers loads it as is)."""
    if not config.bias:
        raise ValueError("hf_config: GPT-2 has biases in every Linear and LayerNorm; this model was built "
                         "with bias=False and cannot be exported as a GPT2LMHeadModel")
    # GPT-2's <|endoftext|> is id 50256; a smaller vocabulary has no such token
    eot = 50256 if config.vocab_size > 50256 else None
    return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": config.vocab_size,
            "n_positions": config.block_size, "n_ctx": config.block_size, "n_layer": config.n_layer,
            "n_head": config.n_head, "n_embd": config.n_embd, "n_inner": None,
            "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "initializer_range": 0.02,
            "resid_pdrop": config.dropout, "embd_pdrop": config.dropout, "attn_pdrop": 0.0,
            "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
            "reorder_and_upcast_attn": False, "tie_word_embeddings": True, "use_cache": True,
            "bos_token_id": eot, "eos_token_id": eot}


def clean_state_dict(state_dict: Mapping) -> dict:
    """HF keys as tiletrain names: buffers dropped, a bare GPT2Model's keys prefixed."""
    sd = {str(k): v for k, v in state_dict.items() if not HF_BUFFERS.match(str(k))}
    if "transformer.wte.weight" not in sd and "wte.weight" in sd:  # GPT2Model (no LM head)
        sd = {f"transformer.{k}": v for k, v in sd.items()}
    return sd


def _shape(v) -> tuple:
    return tuple(v.shape) if hasattr(v, "shape") else np.shape(v)


def infer_config(state_dict: Mapping) -> dict:
    """What the shapes of a GPT-2 state dict say: vocab_size, block_size, n_embd, n_layer
    (n_head cannot be inferred)."""
    sd = clean_state_dict(state_dict)
    out = {}
    if "transformer.wte.weight" in sd:
        out["vocab_size"], out["n_embd"] = _shape(sd["transformer.wte.weight"])
    if "transformer.wpe.weight" in sd:
        out["block_size"] = _shape(sd["transformer.wpe.weight"])[0]
    layers = {int(m.group(1)) for k in sd if (m := re.match(r"transformer\.h\.(\d+)\.", k))}
    if layers:
        out["n_layer"] = max(layers) + 1
    return out


def _as_config(config) -> GPTConfig:
    if isinstance(config, GPTConfig):
        return config
    if isinstance(config, Mapping):  # a config.json dict (HF names) or GPTConfig's fields
        return config_from_hf(config) if "n_positions" in config else GPTConfig(**config)
    if hasattr(config, "n_positions"):
        return config_from_hf(config)
    raise TypeError("from_hf: config must be a GPTConfig, a dict or a GPT2Config, "
                    f"got {type(config).__name__}")


def from_hf(cls, model_or_state_dict, config=None, tiling=None, dtype=np.float32):
    """Build ``cls`` (GPT) from a GPT2LMHeadModel or a GPT-2 state dict (see GPT.from_hf)."""
    src = model_or_state_dict
    if isinstance(src, Mapping):
        sd = src
        if config is None:
            known = infer_config(sd)
            said = known or "nothing: no GPT-2 keys found"
            raise ValueError("from_hf: a state dict does not say how many heads the model has; pass "
                             f"config=GPTConfig(...) (the shapes say {said})")
    elif callable(getattr(src, "state_dict", None)) and hasattr(src, "config"):
        sd = src.state_dict()
        if config is None:
            config = config_from_hf(src.config)
    else:
        raise TypeError("from_hf: expected a GPT2LMHeadModel (an object with .config and .state_dict()) or a "
                        f"state dict mapping names to arrays, got {type(src).__name__}")
    config = _as_config(config)
    if not config.bias:
        raise ValueError("from_hf: GPT-2 checkpoints have biases; config.bias must be True")
    sd = clean_state_dict(sd)
    known = infer_config(sd)
    mismatch = [f"{k}: config {getattr(config, k)}, state dict {v}" for k, v in known.items()
                if getattr(config, k) != v]
    if mismatch:
        raise ValueError("from_hf: the config does not match the state dict's shapes: " + "; ".join(mismatch))
    model = cls(config, tiling=tiling, dtype=dtype)
    model.load_state_dict({k: to_numpy(v, f"from_hf: {k}") for k, v in sd.items()}, strict=True)
    return model


def to_hf_state_dict(model) -> dict[str, np.ndarray]:
    """The model's weights under GPT2LMHeadModel's names and layouts (NumPy arrays, with
    lm_head.weight the same array as transformer.wte.weight)."""
    if not model.config.bias:
        raise ValueError("to_hf_state_dict: GPT-2 has biases in every Linear and LayerNorm; this model was "
                         "built with bias=False and cannot be exported as a GPT2LMHeadModel")
    sd = model.state_dict()
    assert "lm_head.weight" in sd
    return sd
