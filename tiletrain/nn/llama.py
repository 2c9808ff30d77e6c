"""Llama in tiletrain: token embedding, pre-RMSNorm decoder layers with rotary grouped-query
causal self-attention and a SwiGLU MLP, a final RMSNorm and a language-model head (tied to
the embedding or not), no biases.  Parameter names and layouts are those of Hugging Face's
LlamaForCausalLM, so ``state_dict()`` / ``load_state_dict()`` exchange weights with it
directly; ``Llama.config_from_hf`` / ``hf_config`` convert its config.json.

The model contract (forward, loss, generation, FLOPs, folders) and the decoder block are
CausalLM's (nn/causal_lm.py); flash attention reads the shared kv heads in place."""
from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

from .. import functional as F
from ..tensors import Tensor
from ..tensors.tensor import as_dtype
from .causal_lm import Block, CausalLM, LMHead, Tiling, check_recompute, positive_int
from .layers import Embedding, Linear, normal
from .module import Module, ModuleDict, ModuleList, Parameter

__all__ = ["LlamaConfig", "LlamaRMSNorm", "LlamaMLP", "LlamaAttention", "LlamaDecoderLayer", "Llama",
           "hf_config_dict"]


@dataclass
class LlamaConfig:
    """transformers' LlamaConfig fields tiletrain implements (same names and defaults;
    num_key_value_heads None means num_attention_heads)."""

    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int | None = None
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02
    recompute: str = "none"  # activation recomputation in training, as GPTConfig.recompute (not in config.json)

    def __post_init__(self):
        check_recompute(self.recompute, "LlamaConfig.recompute")
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        for f in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "max_position_embeddings"):
            setattr(self, f, positive_int(getattr(self, f), f"LlamaConfig.{f}"))
        H, Hkv, C = self.num_attention_heads, self.num_key_value_heads, self.hidden_size
        if C % H:
            raise ValueError(f"LlamaConfig: num_attention_heads={H} must divide hidden_size={C}")
        if H % Hkv:
            raise ValueError(f"LlamaConfig: num_key_value_heads={Hkv} must divide num_attention_heads={H}")
        if (C // H) % 2:
            raise ValueError(f"LlamaConfig: the head size hidden_size / num_attention_heads = {C // H} must be "
                             "even (rotary embeddings rotate pairs)")
        for f in ("rms_norm_eps", "rope_theta", "initializer_range"):
            v = getattr(self, f)
            if not isinstance(v, numbers.Real) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"LlamaConfig.{f} must be a positive number, got {v!r}")
            setattr(self, f, float(v))
        if not isinstance(self.tie_word_embeddings, (bool, np.bool_)):
            raise ValueError(f"LlamaConfig.tie_word_embeddings must be a bool, got {self.tie_word_embeddings!r}")
        self.tie_word_embeddings = bool(self.tie_word_embeddings)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    # the sizes every CausalLM config has (nn/causal_lm.py), under GPT's names
    n_embd = property(lambda self: self.hidden_size)
    n_head = property(lambda self: self.num_attention_heads)
    n_layer = property(lambda self: self.num_hidden_layers)
    block_size = property(lambda self: self.max_position_embeddings)


def _linear(n_in: int, n_out: int, tiles, std: float, kw) -> Linear:
    """A bias-free Linear (HF layout (out, in)) drawn N(0, std^2) as transformers initialises."""
    lin = Linear(n_in, n_out, bias=False, tiles=tiles, dtype=kw["dtype"], rng=kw["rng"])
    lin.weight = Parameter(normal((n_out, n_in), std, kw["rng"], kw["dtype"], lin.weight.tiles))
    return lin


class LlamaRMSNorm(Module):
    """x / sqrt(mean(x^2) + eps) * weight over the last axis (unit weight)."""

    def __init__(self, n: int, eps: float = 1e-6, *, tile=None, dtype=np.float32):
        super().__init__()
        self.n, self.eps = n, float(eps)
        self.weight = Parameter(np.ones(n, as_dtype(dtype)), None if tile is None else (tile,))

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, (self.n,), self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.n}, eps={self.eps}"


class LlamaMLP(Module):

    def __init__(self, config: LlamaConfig, tiling: Tiling, kw):
        super().__init__()
        C, I, W, Hd, std = config.hidden_size, config.intermediate_size, tiling.width, tiling.hidden, \
            config.initializer_range
        self.gate_proj = _linear(C, I, (Hd, W), std, kw)
        self.up_proj = _linear(C, I, (Hd, W), std, kw)
        self.down_proj = _linear(I, C, (W, Hd), std, kw)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))  # SwiGLU: (B, T, C)


class LlamaAttention(Module):

    def __init__(self, config: LlamaConfig, tiling: Tiling, kw):
        super().__init__()
        C, D, std = config.hidden_size, config.head_dim, config.initializer_range
        self.n_head, self.n_kv_head, self.theta = config.num_attention_heads, config.num_key_value_heads, \
            config.rope_theta
        W = tiling.width
        Wkv = max(W // (self.n_head // self.n_kv_head), D)   # whole kv heads: one kv tile per query tile
        self.q_proj = _linear(C, C, (W, W), std, kw)
        self.k_proj = _linear(C, self.n_kv_head * D, (Wkv, W), std, kw)
        self.v_proj = _linear(C, self.n_kv_head * D, (Wkv, W), std, kw)
        self.o_proj = _linear(C, C, (W, W), std, kw)

    def forward(self, x: Tensor, cache=None, layer: int = 0, pos: int = 0) -> Tensor:
        """With a key/value ``cache`` (inference, tiletrain/inference): x holds the
        tokens at positions pos.. (rotary angles from pos), whose keys and values go into the
        cache's ``layer``, and the queries attend to every cached position."""
        q = F.rotary_embedding(F.split_heads(self.q_proj(x), self.n_head), self.theta, offset=pos)  # (B, H, T, D)
        k = F.rotary_embedding(F.split_heads(self.k_proj(x), self.n_kv_head), self.theta, offset=pos)
        v = F.split_heads(self.v_proj(x), self.n_kv_head)                        # k, v: (B, Hkv, T, D)
        if cache is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)   # (B, H, T, D)
        else:
            y = cache.attend(layer, q, k, v, pos)
        return self.o_proj(F.merge_heads(y))                                               # (B, T, C)


class LlamaDecoderLayer(Block):
    """x + self_attn(input_layernorm(x)), then x + mlp(post_attention_layernorm(x))
    (nn/causal_lm.py's Block under LlamaDecoderLayer's names and order)."""

    NAMES = {"attn": "self_attn", "mlp": "mlp", "norm_1": "input_layernorm", "norm_2": "post_attention_layernorm"}

    def __init__(self, config: LlamaConfig, tiling: Tiling, kw):
        C, eps, W = config.hidden_size, config.rms_norm_eps, tiling.width
        attn, mlp = LlamaAttention(config, tiling, kw), LlamaMLP(config, tiling, kw)
        super().__init__(config, attn=attn, mlp=mlp, norm_1=LlamaRMSNorm(C, eps, tile=W, dtype=kw["dtype"]),
                         norm_2=LlamaRMSNorm(C, eps, tile=W, dtype=kw["dtype"]))

    @staticmethod
    def add_norm(x: Tensor, r: Tensor, norm: LlamaRMSNorm) -> tuple[Tensor, Tensor]:
        return F.add_rms_norm(x, r, norm.weight, norm.eps)


# transformers LlamaConfig keys tiletrain does not implement -> the values it accepts (other
# keys are ignored: token ids, use_cache, dtype, ...)
_HF_FIXED = {"hidden_act": ("silu",), "rope_scaling": (None,), "attention_bias": (False,), "mlp_bias": (False,),
             "attention_dropout": (0, 0.0), "pretraining_tp": (1,), "model_type": ("llama",)}


class Llama(CausalLM):
    """Llama (Hugging Face LlamaForCausalLM).  ``Llama(config, tiling=None, dtype=np.float32,
    seed=0)``: weights drawn from NumPy's generator seeded with ``seed``, N(0,
    initializer_range^2) for every projection and the embedding, unit RMSNorm weights, as
    transformers initialises them."""

    config_class = LlamaConfig
    model_type = "llama"
    train_sizes = ("n_layer", "n_head", "n_kv_head", "n_embd", "ffn")

    def __init__(self, config: LlamaConfig, tiling: Tiling | None = None, dtype=np.float32, seed: int = 0):
        super().__init__(config, tiling, dtype)
        t, kw = self.tiling, dict(dtype=self.dtype, rng=np.random.default_rng(seed))
        C, V = config.hidden_size, config.vocab_size
        self.model = ModuleDict(dict(
            embed_tokens=Embedding(V, C, tiles=(t.vocab, t.width), std=config.initializer_range, **kw),
            layers=ModuleList([LlamaDecoderLayer(config, t, kw) for _ in range(config.num_hidden_layers)]),
            norm=LlamaRMSNorm(C, config.rms_norm_eps, tile=t.width, dtype=self.dtype),
        ))
        self.lm_head = (LMHead(self.model.embed_tokens.weight) if config.tie_word_embeddings
                        else _linear(C, V, (t.vocab, t.width), config.initializer_range, kw))

    # -- the CausalLM contract ------------------------------------------------------------
    blocks = property(lambda self: self.model.layers)
    final_norm = property(lambda self: self.model.norm)
    embeddings = property(lambda self: (self.model.embed_tokens,))

    def embed(self, idx: Tensor, pos: int) -> Tensor:
        return self.model.embed_tokens(idx)   # (B, T, C); positions enter as rotary angles

    @classmethod
    def resolve_tiling(cls, tiling: Tiling, config: LlamaConfig) -> Tiling:
        """``tiling`` with width, hidden and vocab filled in and checked for a Llama: width holds
        whole heads (a multiple of the head size) whose number is a multiple or a divisor of the
        query heads per kv head, so each attention task reads one kv tile (default: the largest
        such tile up to 1024 dividing hidden_size); hidden tiles intermediate_size (default
        min(intermediate_size, 1024))."""
        C, D = config.hidden_size, config.head_dim
        G = config.num_attention_heads // config.num_key_value_heads
        ok = [t for t in range(D, C + 1, D) if (t // D) % G == 0 or G % (t // D) == 0]
        width = tiling.width
        if width is None:
            width = max([t for t in ok if t <= 1024 and C % t == 0] or ok[:1])
        elif width not in ok:
            raise ValueError(f"Tiling.width={width} must be a multiple of the head size {D} holding a multiple or a "
                             f"divisor of {G} heads (query heads per kv head); valid: {ok}")
        I = config.intermediate_size
        hidden = min(I, 1024) if tiling.hidden is None else min(tiling.hidden, I)
        return replace(tiling, width=width, hidden=hidden, vocab=tiling.vocab_tile(config.vocab_size))

    @classmethod
    def train_config(cls, vocab_size: int, block_size: int, n_layer: int, n_head: int, n_embd: int,
                     n_kv_head: int | None = None, ffn: int | None = None) -> LlamaConfig:
        """--n-kv-head key/value heads (default --n-head); --ffn the SwiGLU width (default 8/3
        --n-embd rounded up to a multiple of 64)."""
        if n_kv_head is not None and n_head % n_kv_head:
            raise ValueError(f"--n-kv-head {n_kv_head} must divide --n-head {n_head}")
        if (n_embd // n_head) % 2:
            raise ValueError(f"--n-embd / --n-head = {n_embd // n_head} must be even for llama "
                             "(rotary embeddings rotate pairs)")
        return LlamaConfig(vocab_size=vocab_size, max_position_embeddings=block_size, num_hidden_layers=n_layer,
                           num_attention_heads=n_head, num_key_value_heads=n_kv_head or n_head,
                           hidden_size=n_embd, intermediate_size=ffn or -(-8 * n_embd // 3 // 64) * 64)

    # -- Hugging Face LlamaForCausalLM ----------------------------------------------------
    def state_dict(self, *args, **kwargs) -> dict:
        """HF LlamaForCausalLM names and layouts; lm_head.weight is absent when the embeddings
        are tied (as transformers saves it)."""
        d = super().state_dict(*args, **kwargs)
        if self.config.tie_word_embeddings:
            prefix = args[1] if len(args) > 1 else kwargs.get("prefix", "")
            d.pop(prefix + "lm_head.weight", None)
        return d

    @classmethod
    def config_from_hf(cls, cfg: dict) -> LlamaConfig:
        """A LlamaConfig from a transformers config.json dict; values tiletrain does not
        implement (another activation, rope scaling, biases, a head_dim other than
        hidden_size / num_attention_heads, ...) raise ValueError naming the key."""
        if not isinstance(cfg, dict):
            raise TypeError(f"Llama.config_from_hf: expected a dict, got {type(cfg).__name__}")
        names = {f.name for f in fields(LlamaConfig)}
        for key, allowed in _HF_FIXED.items():
            if key in cfg and cfg[key] not in allowed:
                raise ValueError(f"Llama.config_from_hf: unsupported {key}={cfg[key]!r} (supported: "
                                 f"{', '.join(map(repr, allowed))})")
        values = {k: cfg[k] for k in names if k in cfg}
        rope = cfg.get("rope_parameters")  # transformers 5: {"rope_type": "default", "rope_theta": ...}
        if rope is not None:
            if not isinstance(rope, dict):
                raise ValueError(f"Llama.config_from_hf: rope_parameters must be a dict, got {rope!r}")
            for k, v in rope.items():
                if k == "rope_theta":
                    values["rope_theta"] = v
                elif not (k == "rope_type" and v == "default"):
                    raise ValueError(f"Llama.config_from_hf: unsupported rope_parameters.{k}={v!r} (only the "
                                     "default rope_type with rope_theta)")
        C, H, D = cfg.get("hidden_size", 4096), cfg.get("num_attention_heads", 32), cfg.get("head_dim")
        ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (C, H, D))  # (not "ab" * 10**12)
        if D is not None and not (ints and D * H == C):
            raise ValueError(f"Llama.config_from_hf: unsupported head_dim={D!r:.40} (only hidden_size / "
                             f"num_attention_heads = {C // H if ints and H else '?'})")
        return LlamaConfig(**values)

    def hf_config(self) -> dict:
        """A config.json dict that transformers' LlamaConfig accepts unchanged."""
        return hf_config_dict(self.config, self.dtype)


def hf_config_dict(config: LlamaConfig, dtype=np.float32) -> dict:
    """``config`` as a transformers config.json dict (model_type, architectures, dtype, the
    fixed values tiletrain implements; rope_theta both as transformers 4 and 5 write it)."""
    c = asdict(config)
    c.pop("recompute")  # a choice of the run, not of the model
    c.update(model_type="llama", architectures=["LlamaForCausalLM"], hidden_act="silu", rope_scaling=None,
             rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
             attention_bias=False, mlp_bias=False, attention_dropout=0.0, pretraining_tp=1,
             head_dim=config.head_dim, torch_dtype=str(as_dtype(dtype)), use_cache=True)
    return c
