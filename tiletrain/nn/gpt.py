"""GPT-2 in tiletrain: learned token and position embeddings, pre-LayerNorm blocks with
causal self-attention and a tanh-GELU MLP, a final LayerNorm and a language-model head
tied to the token embedding.  Parameter names and layouts are those of Hugging Face's
GPT2LMHeadModel (see tiletrain/nn/hf.py for the conversion).

How tensors are split into tiles is the one ``Tiling`` argument of GPT; the layers below
receive it once and never see the runtime."""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields, replace

import numpy as np

from .. import functional as F
from ..ops import add_broadcast, matmul
from ..ops.autograd import needs_grad
from ..tensors import Tensor, from_numpy
from ..tensors.tensor import as_dtype
from ..utils.checkpoint import checkpoint
from .layers import Conv1D, Dropout, Embedding, LayerNorm
from .module import Module, ModuleDict, ModuleList, Parameter

__all__ = ["GPTConfig", "Tiling", "MLP", "CausalSelfAttention", "Block", "LMHead", "GPT"]


def _positive_int(v, what: str) -> int:
    if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{what} must be a positive int, got {v!r}")
    return int(v)


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
            setattr(self, f, _positive_int(getattr(self, f), f"GPTConfig.{f}"))
        if self.n_embd % self.n_head:
            raise ValueError(f"GPTConfig: n_head={self.n_head} must divide n_embd={self.n_embd}")
        if not isinstance(self.dropout, numbers.Real) or isinstance(self.dropout, bool) \
                or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"GPTConfig.dropout must be a number in [0, 1), got {self.dropout!r}")
        self.dropout = float(self.dropout)
        if not isinstance(self.bias, (bool, np.bool_)):
            raise ValueError(f"GPTConfig.bias must be a bool, got {self.bias!r}")
        self.bias = bool(self.bias)
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"GPTConfig.recompute must be one of {', '.join(map(repr, RECOMPUTE))}, "
                             f"got {self.recompute!r}")


RECOMPUTE = ("none", "block", "attention")


@dataclass(frozen=True)
class Tiling:
    """Tile sizes of a GPT's tensors; None takes a default from the config and batch shape.

    batch, time: tiles of the activations along B and T (defaults: time min(T, 256), batch
        enough sequences for about 512 rows per tile).  Chosen per forward, so any (B, T) works.
        512 rows rather than 256 (benchmarks/gemm_shapes.py --sweep, GPT 4x512 B=8 and 12x768
        B=4 at T=256, 2 workers, measured under load): half the tasks, the step's gemm rate (CPU
        time) 1.00-1.19x, step CPU time 0.93-0.99x (wall time 0.90-1.07x, noise) of 256;
        128 rows were worse (0.94x gemm efficiency, 1.05x step).  With many more workers than
        two, a smaller batch or time tile gives more tasks per op.
    width: tile along n_embd, for every activation and weight; it must hold whole heads (a
        multiple of the head size n_embd / n_head) and divide n_embd (default: the largest
        such tile up to 1024).
    hidden: tile along the MLP's hidden width 4 * n_embd (default min(4 * n_embd, 1024)).
    vocab: tile along the rows of the embedding tables and the logits' last axis (default
        min(vocab_size, 1024))."""

    batch: int | None = None
    time: int | None = None
    width: int | None = None
    hidden: int | None = None
    vocab: int | None = None

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None:
                _positive_int(v, f"Tiling.{f.name}")

    def resolve(self, config: GPTConfig) -> "Tiling":
        """This tiling with width, hidden and vocab filled in and checked against config."""
        C, H = config.n_embd, config.n_head
        D = C // H
        ok = [t for t in range(D, C + 1, D) if C % t == 0]  # tiles holding whole heads, dividing C
        width = self.width
        if width is None:
            width = max([t for t in ok if t <= 1024] or ok[:1])
        elif width % D or C % width:
            raise ValueError(f"Tiling.width={width} must be a multiple of the head size {D} (n_embd={C} / "
                             f"n_head={H}) that divides n_embd; valid: {ok}")
        hidden = min(4 * C, 1024) if self.hidden is None else min(self.hidden, 4 * C)
        vocab = min(config.vocab_size, 1024) if self.vocab is None else min(self.vocab, config.vocab_size)
        return replace(self, width=width, hidden=hidden, vocab=vocab)

    def rows(self, B: int, T: int) -> tuple[int, int]:
        """(batch tile, time tile) of the activations for a (B, T) batch."""
        tt_ = min(T, 256) if self.time is None else min(self.time, T)
        tb = max(1, min(B, 512 // tt_)) if self.batch is None else min(self.batch, B)
        return tb, tt_


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


class Block(Module):

    def __init__(self, config: GPTConfig, tiling: Tiling, *, dtype=np.float32, rng=None):
        super().__init__()
        C, W = config.n_embd, tiling.width
        self.ln_1 = LayerNorm(C, bias=config.bias, tile=W, dtype=dtype)
        self.attn = CausalSelfAttention(config, tiling, dtype=dtype, rng=rng)
        self.ln_2 = LayerNorm(C, bias=config.bias, tile=W, dtype=dtype)
        self.mlp = MLP(config, tiling, dtype=dtype, rng=rng)
        self.config = config  # shared with the GPT: config.recompute may change between steps

    def forward(self, x: Tensor, cache=None, layer: int = 0, pos: int = 0) -> Tensor:
        """``cache``: inference (tiletrain/inference), keys and values of ``layer`` at pos.."""
        if self.config.recompute == "attention" and (cache is None or getattr(cache, "checkpointable", False)):
            # backward recomputes the attention branch (a sequence chunk's too: pipeline.model.PrefixKV)
            a = checkpoint(self._attention, x, cache, layer, pos)   # (B, T, C)
        else:
            a = self._attention(x, cache, layer, pos)
        x, h = _add_norm(x, a, self.ln_2)  # without gradients one task per tile (decode)
        return x + self.mlp(h)

    def _attention(self, x: Tensor, cache=None, layer: int = 0, pos: int = 0) -> Tensor:
        return self.attn(self.ln_1(x), cache, layer, pos)


def _add_norm(x: Tensor, r: Tensor, ln: LayerNorm) -> tuple[Tensor, Tensor]:
    """(x + r, ln(x + r)) (F.add_layer_norm: one task per tile in a decode step)."""
    return F.add_layer_norm(x, r, ln.weight, ln.bias, ln.eps)


def last_positions(x: Tensor, last: int | None) -> Tensor:
    """x (B, T, C) cut to its last ``last`` positions (all when None or >= T; a copy task)."""
    return x if last is None or last >= x.shape[1] else x[:, x.shape[1] - last:]


class LMHead(Module):
    """logits = x @ weight^T with weight the (vocab, C) token-embedding table (tied)."""

    def __init__(self, weight: Parameter):
        super().__init__()
        self.weight = weight

    def forward(self, x: Tensor) -> Tensor:
        return matmul(x, self.weight, transpose_b=True)  # (B, T, C) -> (B, T, vocab)


class GPT(Module):
    """GPT-2.  ``GPT(config, tiling=None, dtype=np.float32, seed=0)``: weights drawn from
    NumPy's generator seeded with ``seed`` (normal 0.02, residual projections 0.02 /
    sqrt(2 n_layer), zero biases, unit LayerNorm weights), as nanoGPT and GPT-2."""

    config_class = GPTConfig  # checkpoints rebuild the model from its config as a dict
    model_type = "gpt2"       # config.json's model_type (tiletrain.nn.MODELS)

    def __init__(self, config: GPTConfig, tiling: Tiling | None = None, dtype=np.float32, seed: int = 0):
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"GPT: config must be a GPTConfig, got {type(config).__name__}")
        if tiling is not None and not isinstance(tiling, Tiling):
            raise TypeError(f"GPT: tiling must be a Tiling or None, got {type(tiling).__name__}")
        self.config, self.dtype = config, as_dtype(dtype)
        if self.dtype.kind != "f":
            raise TypeError(f"GPT: dtype must be float32 or float64, got {self.dtype}")
        self.tiling = t = (tiling or Tiling()).resolve(config)
        rng = np.random.default_rng(seed)
        kw = dict(dtype=self.dtype, rng=rng)
        C = config.n_embd
        self.transformer = ModuleDict(dict(
            wte=Embedding(config.vocab_size, C, tiles=(t.vocab, t.width), **kw),
            wpe=Embedding(config.block_size, C, tiles=(t.vocab, t.width), **kw),
            drop=Dropout(config.dropout),
            h=ModuleList([Block(config, t, **kw) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(C, bias=config.bias, tile=t.width, dtype=self.dtype),
        ))
        self.lm_head = LMHead(self.transformer.wte.weight)  # weight tying (listed once, as wte)

    def forward(self, idx) -> Tensor:
        x = self.transformer.drop(self._embed(self._ids(idx, "idx"), 0))  # (B, T, C)
        for block in self.transformer.h:
            x = checkpoint(block, x) if self.config.recompute == "block" else block(x)
        x = self.transformer.ln_f(x)
        return self.lm_head(x)                                          # (B, T, vocab)

    def forward_cached(self, ids, cache, pos: int, last: int | None = None) -> Tensor:
        """Logits (B, n, vocab) of the tokens ``ids`` (B, n) at positions pos .. pos + n - 1,
        with the keys and values of earlier positions read from ``cache`` and theirs written
        to it (inference: tiletrain/inference); ``last``: those of the last ``last`` positions
        only (B, last, vocab) (a prefill needs one, speculative verification k + 1)."""
        x = self._embed(self._ids(ids, "ids"), pos)
        for i, block in enumerate(self.transformer.h):  # each block where it is placed
            x = block(x, cache, i, pos)
        return self.lm_head(self.transformer.ln_f(last_positions(x, last)))

    def _embed(self, idx: Tensor, start: int) -> Tensor:
        """Token plus position embeddings (B, T, C) of idx (B, T) at positions start.."""
        wpe, T = self.transformer.wpe.weight, idx.shape[1]
        if not needs_grad(wpe) and min(wpe.tiles[0], T) == idx.tiles[1]:
            p = wpe[start:start + T]  # rows of the table (one copy task): no positions tensor to upload
        else:
            p = self.transformer.wpe(from_numpy(np.arange(start, start + T, dtype=np.int64), idx.tiles[1]))
        return add_broadcast(self.transformer.wte(idx), p, axis=0)

    def loss(self, idx, targets) -> Tensor:
        """Mean cross-entropy of the next-token logits against ``targets`` (B, T) (a 0-d
        Tensor; targets equal to -100 are ignored)."""
        logits = self(idx)
        targets = self._ids(targets, "targets", logits.shape[:2])
        return F.cross_entropy(logits, targets)

    # -- helpers ------------------------------------------------------------------------
    def _ids(self, ids, name: str, shape=None) -> Tensor:
        """ids (a NumPy int array or an int64 Tensor, (B, T)) as an int64 Tensor tiled as the
        tiling says."""
        if isinstance(ids, Tensor):
            if ids.dtype != np.int64:
                raise TypeError(f"{type(self).__name__}: {name} must be an int64 tensor, got {ids.dtype}")
            arr = None
            dims = ids.shape
        else:
            arr = np.asarray(ids)
            if arr.dtype.kind not in "iu":
                raise TypeError(f"{type(self).__name__}: {name} must be an integer array, got dtype {arr.dtype}")
            dims = arr.shape
        if len(dims) != 2:
            raise ValueError(f"{type(self).__name__}: {name} must be 2-D (B, T), got shape {tuple(dims)}")
        if shape is not None and tuple(dims) != tuple(shape):
            raise ValueError(f"{type(self).__name__}: {name} has shape {tuple(dims)}, expected {tuple(shape)} (idx's shape)")
        B, T = dims
        if B < 1 or T < 1:
            raise ValueError(f"{type(self).__name__}: {name} is empty (shape {tuple(dims)}): need at least one "
                             f"sequence of at least one token")
        if T > self.config.block_size:
            raise ValueError(f"{type(self).__name__}: cannot forward a sequence of length {T}: block_size is only "
                             f"{self.config.block_size}")
        tiles = self.tiling.rows(B, T)
        if arr is None:
            if ids.tiles == tiles:
                return ids
            arr = ids.numpy()
        return from_numpy(np.ascontiguousarray(arr, dtype=np.int64), tiles)

    def generate(self, input_ids, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None, eos_token_id=None, seed: int | None = None, draft=None,
                 num_draft_tokens: int = 4):
        """``input_ids`` (B, T) extended by ``max_new_tokens`` sampled tokens (greedy when
        temperature == 0; top_k, then top_p filtering), an int64 array (B, T + new) with the
        prompt, as transformers' generate; rows stop at ``eos_token_id`` (then padded with it;
        the output is shorter when every row stopped early); ``draft``: speculative decoding
        with that model proposing ``num_draft_tokens`` per round.  With a key/value cache
        (tiletrain/inference.generate, which also returns statistics)."""
        from ..inference import generate
        return generate(self, input_ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                        eos_token_id=eos_token_id, seed=seed, draft=draft, num_draft_tokens=num_draft_tokens)

    def num_params(self, non_embedding: bool = False) -> int:
        """Parameter count, the tied head counted once.  non_embedding=True leaves out the
        position table (the token table stays: it is also the LM head), as nanoGPT."""
        n = self.num_parameters()
        return n - self.transformer.wpe.weight.numel() if non_embedding else n

    def flops_per_token(self, T: int) -> int:
        """Forward + backward FLOPs per token at sequence length T (nanoGPT / PaLM estimate:
        6 N for the weights, N without the position table, plus 12 n_layer n_embd T for
        attention scores)."""
        c = self.config
        return 6 * self.num_params(non_embedding=True) + 12 * c.n_layer * c.n_embd * T

    # -- Hugging Face GPT-2 ---------------------------------------------------------------
    @classmethod
    def from_hf(cls, model_or_state_dict, config=None, tiling: Tiling | None = None,
                dtype=np.float32) -> "GPT":
        """A GPT holding the weights of a transformers GPT2LMHeadModel (its config is read
        from the model) or of its state dict (torch tensors or NumPy arrays; then pass
        ``config``: a GPTConfig, a dict or a GPT2Config).  See tiletrain.nn.hf."""
        from .hf import from_hf
        return from_hf(cls, model_or_state_dict, config=config, tiling=tiling, dtype=dtype)

    def to_hf_state_dict(self) -> dict[str, np.ndarray]:
        """The weights as a GPT2LMHeadModel state dict of NumPy arrays (HF names and
        layouts, lm_head.weight included).  Needs bias=True."""
        from .hf import to_hf_state_dict
        return to_hf_state_dict(self)

    # -- Hugging Face folders (the interface of tiletrain/nn/pretrained.py) ----------------
    @classmethod
    def config_from_hf(cls, cfg) -> GPTConfig:
        """A GPTConfig from a GPT-2 config.json dict (or a GPT2Config); ValueError naming
        an unsupported key or a missing one."""
        from .hf import config_from_hf
        return config_from_hf(cfg)

    @staticmethod
    def hf_rename(state_dict) -> dict:
        """A GPT-2 checkpoint's keys as this model's: attention buffers dropped, a bare
        GPT2Model's keys prefixed with ``transformer.``."""
        from .hf import clean_state_dict
        return clean_state_dict(state_dict)

    def hf_config(self) -> dict:
        """config.json of the GPT2LMHeadModel this model is (model_type, architectures, sizes)."""
        from .hf import hf_config
        return hf_config(self.config)

    @classmethod
    def from_pretrained(cls, path, dtype=np.float32, tiling: Tiling | None = None, **config_overrides):
        """This model from a Hugging Face folder or .safetensors file of its model_type (see
        tiletrain.nn.from_pretrained, which picks the class by model_type)."""
        from .pretrained import from_pretrained, read_hf_config
        mt = read_hf_config(path).get("model_type")
        if mt != cls.model_type:
            raise ValueError(f"{cls.__name__}.from_pretrained: {path} holds model_type {mt!r}, not "
                             f"{cls.model_type!r} (tiletrain.nn.from_pretrained picks the class by model_type)")
        return from_pretrained(path, dtype=dtype, tiling=tiling, **config_overrides)

    def save_pretrained(self, path, tokenizer=None):
        """Write a Hugging Face folder (config.json, model.safetensors, and tokenizer.json
        when a tiletrain.data.Tokenizer is given) that transformers loads unchanged."""
        from .pretrained import save_pretrained
        return save_pretrained(self, path, tokenizer=tokenizer)
