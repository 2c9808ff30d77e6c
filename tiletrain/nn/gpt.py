"""GPT-2 in tiletrain: learned token and position embeddings, pre-LayerNorm blocks with
causal self-attention and a tanh-GELU MLP, a final LayerNorm and a language-model head
tied to the token embedding.  Parameter names and layouts are those of Hugging Face's
GPT2LMHeadModel (Conv1D weights in (in, out) layout, lm_head.weight tied to
transformer.wte.weight), so conversion (the end of this module) is a matter of configs, key
clean-up and dtypes; transformers is never imported.

The model contract (forward, loss, generation, FLOPs, folders) is CausalLM's
(nn/causal_lm.py); how tensors are split into tiles is its one ``Tiling`` argument."""
from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .. import functional as F
from ..ops import add_broadcast
from ..ops.autograd import needs_grad
from ..tensors import Tensor, from_numpy
from .causal_lm import RECOMPUTE, Block as DecoderBlock, CausalLM, LMHead, Tiling, check_recompute, positive_int
from .layers import Conv1D, Dropout, Embedding, LayerNorm
from .module import Module, ModuleDict, ModuleList, state_arrays, to_numpy

__all__ = ["GPTConfig", "Tiling", "MLP", "CausalSelfAttention", "Block", "LMHead", "GPT", "RECOMPUTE",
           "config_from_hf", "hf_config", "clean_state_dict", "infer_config", "HF_BUFFERS"]


@dataclass
class GPTConfig:
    vocab_size: int
    block_size: int          # the longest sequence (rows of the position table)
    n_layer: int
    n_head: int
    n_embd: int
    dropout: float = 0.0     # embeddings and residual branches (attention probabilities: none)
    bias: bool = True        # biases in Conv1D and LayerNorm layers (GPT-2: True)
    recompute: str = "none"  # activation recomputation in training: "none", "block" (each
    #                          transformer block) or "attention" (ln_1 + attention of each block)

    def __post_init__(self):
        for f in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            setattr(self, f, positive_int(getattr(self, f), f"GPTConfig.{f}"))
        if self.n_embd % self.n_head:
            raise ValueError(f"GPTConfig: n_head={self.n_head} must divide n_embd={self.n_embd}")
        if not isinstance(self.dropout, numbers.Real) or isinstance(self.dropout, bool) \
                or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"GPTConfig.dropout must be a number in [0, 1), got {self.dropout!r}")
        self.dropout = float(self.dropout)
        if not isinstance(self.bias, (bool, np.bool_)):
            raise ValueError(f"GPTConfig.bias must be a bool, got {self.bias!r}")
        self.bias = bool(self.bias)
        check_recompute(self.recompute, "GPTConfig.recompute")


class MLP(Module):

    def __init__(self, config: GPTConfig, tiling: Tiling, *, dtype=np.float32, rng=None):
        super().__init__()
        C, W, Hd = config.n_embd, tiling.width, tiling.hidden
        proj_std = 0.02 / math.sqrt(2 * config.n_layer)
        self.c_fc = Conv1D(4 * C, C, config.bias, tiles=(W, Hd), dtype=dtype, rng=rng)
        self.c_proj = Conv1D(C, 4 * C, config.bias, tiles=(Hd, W), dtype=dtype, std=proj_std, rng=rng)
        self.dropout = Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        x = self.c_fc(x, gelu="tanh")                  # (B, T, 4C): gelu(c_fc(x)), one gemm task
        return self.dropout(self.c_proj(x))             # (B, T, C)


class CausalSelfAttention(Module):

    def __init__(self, config: GPTConfig, tiling: Tiling, *, dtype=np.float32, rng=None):
        super().__init__()
        C, W = config.n_embd, tiling.width
        proj_std = 0.02 / math.sqrt(2 * config.n_layer)
        self.c_attn = Conv1D(3 * C, C, config.bias, tiles=(W, W), dtype=dtype, rng=rng)  # q, k, v fused
        self.c_proj = Conv1D(C, C, config.bias, tiles=(W, W), dtype=dtype, std=proj_std, rng=rng)
        self.resid_dropout = Dropout(config.dropout)
        self.n_head = config.n_head

    def forward(self, x: Tensor, cache=None, layer: int = 0, pos: int = 0) -> Tensor:
        """With a key/value ``cache`` (inference, tiletrain/inference): x holds the
        tokens at positions pos.., whose keys and values go into the cache's ``layer``, and
        the queries attend to every cached position."""
        qkv = self.c_attn(x)                                                            # (B, T, 3C)
        q, k, v = (F.split_heads(qkv, self.n_head, part=i, nparts=3) for i in range(3))  # (B, nh, T, hs)
        y = (F.scaled_dot_product_attention(q, k, v, is_causal=True) if cache is None  # (B, nh, T, hs)
             else cache.attend(layer, q, k, v, pos))
        y = F.merge_heads(y)                                                            # (B, T, C)
        return self.resid_dropout(self.c_proj(y))


class Block(DecoderBlock):
    """x + attn(ln_1(x)), then x + mlp(ln_2(x)) (nn/causal_lm.py's Block, GPT-2's names)."""

    NAMES = {"norm_1": "ln_1", "attn": "attn", "norm_2": "ln_2", "mlp": "mlp"}

    def __init__(self, config: GPTConfig, tiling: Tiling, *, dtype=np.float32, rng=None):
        C, W = config.n_embd, tiling.width
        super().__init__(config, norm_1=LayerNorm(C, bias=config.bias, tile=W, dtype=dtype),
                         attn=CausalSelfAttention(config, tiling, dtype=dtype, rng=rng),
                         norm_2=LayerNorm(C, bias=config.bias, tile=W, dtype=dtype),
                         mlp=MLP(config, tiling, dtype=dtype, rng=rng))

    @staticmethod
    def add_norm(x: Tensor, r: Tensor, ln: LayerNorm) -> tuple[Tensor, Tensor]:
        return F.add_layer_norm(x, r, ln.weight, ln.bias, ln.eps)


class GPT(CausalLM):
    """GPT-2.  ``GPT(config, tiling=None, dtype=np.float32, seed=0)``: weights drawn from
    NumPy's generator seeded with ``seed`` (normal 0.02, residual projections 0.02 /
    sqrt(2 n_layer), zero biases, unit LayerNorm weights), as nanoGPT and GPT-2."""

    config_class = GPTConfig
    model_type = "gpt2"
    train_sizes = ("n_layer", "n_head", "n_embd", "dropout")

    def __init__(self, config: GPTConfig, tiling: Tiling | None = None, dtype=np.float32, seed: int = 0):
        super().__init__(config, tiling, dtype)
        t, kw = self.tiling, dict(dtype=self.dtype, rng=np.random.default_rng(seed))
        C = config.n_embd
        self.transformer = ModuleDict(dict(
            wte=Embedding(config.vocab_size, C, tiles=(t.vocab, t.width), std=0.02, **kw),
            wpe=Embedding(config.block_size, C, tiles=(t.vocab, t.width), std=0.02, **kw),
            drop=Dropout(config.dropout),
            h=ModuleList([Block(config, t, **kw) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(C, bias=config.bias, tile=t.width, dtype=self.dtype),
        ))
        self.lm_head = LMHead(self.transformer.wte.weight)  # weight tying (listed once, as wte)

    # -- the CausalLM contract ------------------------------------------------------------
    blocks = property(lambda self: self.transformer.h)
    final_norm = property(lambda self: self.transformer.ln_f)
    embeddings = property(lambda self: (self.transformer.wte, self.transformer.wpe, self.transformer.drop))

    def embed(self, idx: Tensor, pos: int) -> Tensor:
        """Token plus position embeddings (B, T, C) of idx (B, T) at positions pos.., dropout."""
        wpe, T = self.transformer.wpe.weight, idx.shape[1]
        if not needs_grad(wpe) and min(wpe.tiles[0], T) == idx.tiles[1]:
            p = wpe[pos:pos + T]  # rows of the table (one copy task): no positions tensor to upload
        else:
            p = self.transformer.wpe(from_numpy(np.arange(pos, pos + T, dtype=np.int64), idx.tiles[1]))
        return self.transformer.drop(add_broadcast(self.transformer.wte(idx), p, axis=0))

    @classmethod
    def train_config(cls, vocab_size: int, block_size: int, n_layer: int, n_head: int, n_embd: int,
                     dropout: float = 0.0) -> GPTConfig:
        return GPTConfig(vocab_size=vocab_size, block_size=block_size, n_layer=n_layer, n_head=n_head,
                         n_embd=n_embd, dropout=dropout, bias=True)

    # -- Hugging Face GPT-2 ---------------------------------------------------------------
    @classmethod
    def config_from_hf(cls, cfg) -> GPTConfig:
        """A GPTConfig from a GPT-2 config.json dict (or a GPT2Config); ValueError naming
        an unsupported key or a missing one."""
        return config_from_hf(cfg)

    def hf_config(self) -> dict:
        """config.json of the GPT2LMHeadModel this model is (model_type, architectures, sizes)."""
        return hf_config(self.config)

    @staticmethod
    def hf_rename(state_dict) -> dict:
        """A GPT-2 checkpoint's keys as this model's: attention buffers dropped, a bare
        GPT2Model's keys prefixed with ``transformer.``."""
        return clean_state_dict(state_dict)

    @classmethod
    def from_hf(cls, model_or_state_dict, config=None, tiling: Tiling | None = None, dtype=np.float32) -> "GPT":
        """A GPT holding the weights of a transformers GPT2LMHeadModel (its config is read
        from the model) or of its state dict (torch tensors or NumPy arrays; then pass
        ``config``: a GPTConfig, a dict or a GPT2Config)."""
        sd, config = _state_and_config(model_or_state_dict, config)
        model = cls(config, tiling=tiling, dtype=dtype)
        model.load_state_dict({k: to_numpy(v, f"from_hf: {k}") for k, v in sd.items()}, strict=True)
        return model

    def to_hf_state_dict(self) -> dict[str, np.ndarray]:
        """The weights as a GPT2LMHeadModel state dict of NumPy arrays (HF names and
        layouts, lm_head.weight the same array as transformer.wte.weight).  Needs bias=True."""
        if not self.config.bias:
            raise ValueError("to_hf_state_dict: GPT-2 has biases in every Linear and LayerNorm; this model was "
                             "built with bias=False and cannot be exported as a GPT2LMHeadModel")
        return state_arrays(self)


# -- GPT-2 configs and state dicts of Hugging Face ---------------------------------------------

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
    if hasattr(config, "n_positions"):  # a transformers GPT2Config (not imported here)
        return config_from_hf(config)
    raise TypeError("from_hf: config must be a GPTConfig, a dict or a GPT2Config, "
                    f"got {type(config).__name__}")


def _state_and_config(src, config) -> tuple[dict, GPTConfig]:
    """(state dict under tiletrain's names, GPTConfig) of a GPT2LMHeadModel or a GPT-2 state
    dict with ``config`` (GPT.from_hf); checked against each other."""
    if isinstance(src, Mapping):
        sd = src
        if config is None:
            said = infer_config(sd) or "nothing: no GPT-2 keys found"
            raise ValueError("from_hf: a state dict does not say how many heads the model has; pass "
                             f"config=GPTConfig(...) (the shapes say {said})")
    elif callable(getattr(src, "state_dict", None)) and hasattr(src, "config"):  # a torch model, duck-typed
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
    mismatch = [f"{k}: config {getattr(config, k)}, state dict {v}" for k, v in infer_config(sd).items()
                if getattr(config, k) != v]
    if mismatch:
        raise ValueError("from_hf: the config does not match the state dict's shapes: " + "; ".join(mismatch))
    return sd, config
