"""The model contract: every language model of tiletrain is a ``CausalLM``.

A model module (nn/gpt.py, nn/llama.py) writes its config dataclass, its layers and one
subclass of ``CausalLM`` that says four things -- ``embed`` (token ids to vectors), the
``blocks``, the ``final_norm`` and the ``lm_head`` -- plus its Hugging Face conversion.  The
rest lives here, once: the forward pass, the loss, the cached forward of decoding, input
validation, FLOP counting, the pieces a pipeline places (``parts``), the model's sizes for
``tiletrain train --arch`` and Hugging Face folders.  Registering the class in
``tiletrain.nn.MODELS`` (nn/pretrained.py) is the only other place an architecture is
named: training, generation, pipelines and data-parallel placement call this contract and
nothing else (docs/architecture.md, principle 14: one contract per kind of thing).

``Block`` is the one decoder block: pre-norm attention and MLP residual branches, given
its four parts.  ``Tiling`` says how a model's tensors are cut into tiles."""
from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

from .. import functional as F
from ..ops import matmul
from ..ops.softmax import cross_entropy_last
from ..tensors import Tensor, from_numpy
from ..tensors.tensor import as_dtype
from ..utils.checkpoint import checkpoint as recompute
from . import hf
from .module import Module, ModuleList, Parameter

__all__ = ["CausalLM", "Block", "LMHead", "Tiling", "RECOMPUTE", "positive_int"]

# activation recomputation in training (a config's ``recompute``): "none", "block" (each
# decoder block keeps only its input) or "attention" (the norm + attention branch of each block)
RECOMPUTE = ("none", "block", "attention")


def positive_int(v, what: str) -> int:
    """``v`` as an int; ValueError naming ``what`` unless it is an int >= 1 (not a bool)."""
    if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{what} must be a positive int, got {v!r}")
    return int(v)


def check_recompute(value, what: str) -> None:
    if value not in RECOMPUTE:
        raise ValueError(f"{what} must be one of {', '.join(map(repr, RECOMPUTE))}, got {value!r}")


@dataclass(frozen=True)
class Tiling:
    """Tile sizes of a model's tensors; None takes a default from the config and batch shape.

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
    hidden: tile along the MLP's hidden width 4 * n_embd (default min(4 * n_embd, 1024), or
        the width tile where that is larger: the MLP's weights in tiles no smaller than the
        attention's).
    vocab: tile along the rows of the embedding tables and the logits' last axis (default
        min(vocab_size, 1024)).

    ``resolve`` is the rule of a transformer with a 4 n_embd MLP (GPT-2, and the default of
    ``CausalLM.resolve_tiling``); a model with other widths overrides ``resolve_tiling``."""

    batch: int | None = None
    time: int | None = None
    width: int | None = None
    hidden: int | None = None
    vocab: int | None = None

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None:
                positive_int(v, f"Tiling.{f.name}")

    @classmethod
    def from_tiles(cls, tiles) -> "Tiling":
        """The tiling of `tiletrain train --tiles B,T,C` (batch, time, width); None: defaults."""
        if tiles is None:
            return cls()  # defaults chosen from the model and each batch's shape
        b, t, c = tiles
        return cls(batch=b, time=t, width=c)

    def resolve(self, config) -> "Tiling":
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
        hidden = min(4 * C, max(1024, width)) if self.hidden is None else min(self.hidden, 4 * C)
        return replace(self, width=width, hidden=hidden, vocab=self.vocab_tile(config.vocab_size))

    def vocab_tile(self, vocab_size: int) -> int:
        """The vocab tile for a vocabulary of vocab_size (default min(vocab_size, 1024))."""
        return min(vocab_size, 1024) if self.vocab is None else min(self.vocab, vocab_size)

    def rows(self, B: int, T: int) -> tuple[int, int]:
        """(batch tile, time tile) of the activations for a (B, T) batch."""
        tt_ = min(T, 256) if self.time is None else min(self.time, T)
        tb = max(1, min(B, 512 // tt_)) if self.batch is None else min(self.batch, B)
        return tb, tt_


class LMHead(Module):
    """logits = x @ weight^T with weight the (vocab, C) token-embedding table (tied)."""

    def __init__(self, weight: Parameter):
        super().__init__()
        self.weight = weight

    def forward(self, x: Tensor) -> Tensor:
        return matmul(x, self.weight, transpose_b=True)  # (B, T, C) -> (B, T, vocab)


class Block(Module):
    """One decoder block, pre-norm:

        x = x + attn(norm_1(x))
        x = x + mlp(norm_2(x))

    ``parts``: the four modules by role (norm_1, attn, norm_2, mlp), registered under the
    model's own names in ``NAMES`` order (Hugging Face's names and state-dict order differ
    per model).  ``add_norm(x, r, norm)``: (x + r, norm(x + r)) as one fused op of the norm
    kind (one task per tile in a decode step).  ``attn(h, cache, layer, pos)`` takes the
    key/value cache of decoding (tiletrain/inference) or of pipeline sequence chunks."""

    NAMES = {"norm_1": "norm_1", "attn": "attn", "norm_2": "norm_2", "mlp": "mlp"}  # role -> attribute

    def __init__(self, config, **parts: Module):
        super().__init__()
        if set(parts) != set(self.NAMES):
            raise TypeError(f"{type(self).__name__}: expected the parts {', '.join(self.NAMES)}, got "
                            f"{', '.join(parts)}")
        for role, name in self.NAMES.items():
            setattr(self, name, parts[role])
        self.config = config  # shared with the model: config.recompute may change between steps

    def part(self, role: str) -> Module:
        return getattr(self, self.NAMES[role])

    @staticmethod
    def add_norm(x: Tensor, r: Tensor, norm: Module) -> tuple[Tensor, Tensor]:
        raise NotImplementedError("Block.add_norm: (x + r, norm(x + r)) of the model's norm")

    def forward(self, x: Tensor, cache=None, layer: int = 0, pos: int = 0) -> Tensor:
        """``cache``: keys and values of ``layer`` at positions pos.. (decoding, sequence chunks)."""
        if self.config.recompute == "attention" and (cache is None or cache.recomputable):
            a = recompute(self.attention, x, cache, layer, pos)   # backward recomputes the branch
        else:
            a = self.attention(x, cache, layer, pos)                # (B, T, C)
        x, h = self.add_norm(x, a, self.part("norm_2"))
        return x + self.part("mlp")(h)

    def attention(self, x: Tensor, cache=None, layer: int = 0, pos: int = 0) -> Tensor:
        return self.part("attn")(self.part("norm_1")(x), cache, layer, pos)


def _last_positions(x: Tensor, last: int | None) -> Tensor:
    """x (B, T, C) cut to its last ``last`` positions (all when None or >= T; a copy task)."""
    return x if last is None or last >= x.shape[1] else x[:, x.shape[1] - last:]



# Generation (tiletrain.inference) sits above nn in the import order and registers its entry
# point here when it is imported, so that a model's generate() reaches it without an
# upward import (docs/architecture.md, tests/test_imports.py).
_GENERATE = None


def register_generate(fn) -> None:
    """Called once by tiletrain.inference.generate: the function CausalLM.generate forwards to."""
    global _GENERATE
    _GENERATE = fn


class CausalLM(Module):
    """A causal language model: ``model(idx)`` -> logits (B, T, vocab), ``model.loss(idx,
    targets)``, ``model.generate(...)``.

    A subclass sets the class attributes ``config_class`` (a dataclass with at least
    vocab_size, block_size, n_layer, n_head, n_embd and recompute -- properties may map the
    model's own names onto them), ``model_type`` (config.json's, the key of
    tiletrain.nn.MODELS) and ``train_sizes``; calls ``super().__init__(config, tiling,
    dtype)`` (checks, ``self.tiling``); registers its modules and ``self.lm_head``; and
    defines ``embed``, ``blocks``, ``final_norm`` and ``embeddings``, ``train_config``, and
    for Hugging Face folders ``config_from_hf`` / ``hf_config`` (``hf_rename`` optionally)."""

    config_class: type = None   # checkpoints rebuild the model from its config as a dict
    model_type: str = None      # config.json's model_type (tiletrain.nn.MODELS)
    train_sizes: tuple[str, ...] = ()  # `tiletrain train` options (TrainArgs fields) that size it

    def __init__(self, config, tiling: Tiling | None = None, dtype=np.float32):
        super().__init__()
        name = type(self).__name__
        if not isinstance(config, self.config_class):
            raise TypeError(f"{name}: config must be a {self.config_class.__name__}, got {type(config).__name__}")
        if tiling is not None and not isinstance(tiling, Tiling):
            raise TypeError(f"{name}: tiling must be a Tiling or None, got {type(tiling).__name__}")
        self.config, self.dtype = config, as_dtype(dtype)
        if self.dtype.kind != "f" or self.dtype.itemsize < 4:
            raise TypeError(f"{name}: dtype must be float32 or float64, got {self.dtype}")
        self.tiling = self.resolve_tiling(tiling or Tiling(), config)

    # -- what a model defines -------------------------------------------------------------
    def embed(self, idx: Tensor, pos: int) -> Tensor:
        """Vectors (B, T, C) of the token ids idx (B, T) at positions pos.. (dropout included)."""
        raise NotImplementedError(f"{type(self).__name__}.embed")

    @property
    def blocks(self) -> ModuleList:
        """The decoder blocks, in order (each called as block(x, cache=None, layer=0, pos=0))."""
        raise NotImplementedError(f"{type(self).__name__}.blocks")

    @property
    def final_norm(self) -> Module:
        raise NotImplementedError(f"{type(self).__name__}.final_norm")

    @property
    def embeddings(self) -> tuple[Module, ...]:
        """The modules ``embed`` runs (a pipeline places them with the first blocks)."""
        raise NotImplementedError(f"{type(self).__name__}.embeddings")

    @classmethod
    def resolve_tiling(cls, tiling: Tiling, config) -> Tiling:
        """``tiling`` with its defaults filled in for ``config`` (checked)."""
        return tiling.resolve(config)

    @classmethod
    def train_config(cls, vocab_size: int, block_size: int, **sizes):
        """The config of a model trained from scratch by `tiletrain train --arch MODEL_TYPE`:
        ``sizes`` are the ``train_sizes`` options (TrainArgs fields); ValueError naming the
        option (``--n-head``) when they do not make a model."""
        raise NotImplementedError(f"{cls.__name__} cannot be trained from scratch (no train_config)")

    # -- Hugging Face folders (nn/hf.py reads and writes them) ----------------------------
    @classmethod
    def config_from_hf(cls, cfg: dict):
        """The config of a config.json dict; ValueError naming an unsupported key."""
        raise NotImplementedError(f"{cls.__name__} has no Hugging Face config (config_from_hf)")

    def hf_config(self) -> dict:
        """The config.json dict that transformers loads this model with."""
        raise NotImplementedError(f"{type(self).__name__} has no Hugging Face config (hf_config)")

    @staticmethod
    def hf_rename(state_dict) -> dict:
        """A Hugging Face checkpoint's keys as this model's (default: the same names)."""
        return dict(state_dict)

    @classmethod
    def from_pretrained(cls, path, dtype=np.float32, tiling: Tiling | None = None, **config_overrides):
        """This model from a Hugging Face folder (config.json + model.safetensors or a sharded
        index) or a .safetensors file next to a config.json of its model_type;
        ``config_overrides`` replace fields of the config (e.g. ``dropout=0.1``).
        (tiletrain.nn.from_pretrained picks the class by model_type.)"""
        cfg = hf.read_hf_config(path)
        mt = cfg.get("model_type")
        if mt != cls.model_type:
            raise ValueError(f"{cls.__name__}.from_pretrained: {path} holds model_type {mt!r:.100}, not "
                             f"{cls.model_type!r} (tiletrain.nn.from_pretrained picks the class by model_type)")
        config = cls.config_from_hf(cfg)
        if config_overrides:
            config = replace(config, **config_overrides)
        sd = cls.hf_rename(hf.stored_safetensors(path))  # streamed into the model's tiles by load_state_dict
        model = cls(config, tiling=tiling, dtype=dtype)
        try:
            model.load_state_dict(sd, strict=True)
        except ValueError as exc:
            raise ValueError(f"from_pretrained: the tensors in {path} do not fit its config.json: {exc}") from None
        return model

    def save_pretrained(self, path, tokenizer=None):
        """Write a Hugging Face folder (config.json, model.safetensors, and tokenizer.json
        when a tiletrain.data.Tokenizer is given) that transformers loads unchanged."""
        return hf.save_folder(self.hf_config(), hf.model_tensors(self), path, tokenizer)

    # -- the contract's own methods -------------------------------------------------------
    def forward(self, idx) -> Tensor:
        x = self.embed(self.token_ids(idx, "idx"), 0)        # (B, T, C)
        for block in self.blocks:
            x = recompute(block, x) if self.config.recompute == "block" else block(x)
        return self.logits(x)                                 # (B, T, vocab)

    def logits(self, x: Tensor) -> Tensor:
        """The head over the last block's output: lm_head(final_norm(x)), (B, T, vocab)."""
        return self.lm_head(self.final_norm(x))

    def forward_cached(self, ids, cache, pos: int, last: int | None = None) -> Tensor:
        """Logits (B, n, vocab) of the tokens ``ids`` (B, n) at positions pos .. pos + n - 1,
        with the keys and values of earlier positions read from ``cache`` and theirs written
        to it (inference: tiletrain/inference); ``last``: those of the last ``last`` positions
        only (B, last, vocab) (a prefill needs one, speculative verification k + 1)."""
        x = self.embed(self.token_ids(ids, "ids"), pos)
        for i, block in enumerate(self.blocks):  # each block where it is placed
            x = block(x, cache, i, pos)
        return self.logits(_last_positions(x, last))

    def loss(self, idx, targets) -> Tensor:
        """Mean cross-entropy of the next-token logits against ``targets`` (B, T) (a 0-d
        Tensor; targets equal to -100 are ignored)."""
        logits = self(idx)
        return cross_entropy_last(logits, self.token_ids(targets, "targets", logits.shape[:2]))

    def head_loss(self, x: Tensor, targets, reduction: str = "mean") -> Tensor:
        """Cross-entropy of the head over the last block's output x (a pipeline's last stage)."""
        logits = self.logits(x)
        return cross_entropy_last(logits, self.token_ids(targets, "targets", logits.shape[:2]), reduction=reduction)

    def parts(self) -> tuple[tuple[Module, ...], tuple[Module, ...], tuple[Module, ...]]:
        """(modules before the blocks, the blocks, modules after them): the units a pipeline
        places (the embeddings with the first blocks, the final norm and head with the last)."""
        return tuple(self.embeddings), tuple(self.blocks), (self.final_norm, self.lm_head)

    def token_ids(self, ids, name: str = "idx", shape=None) -> Tensor:
        """ids (a NumPy int array or an int64 Tensor, (B, T)) as an int64 Tensor tiled as the
        tiling says; TypeError / ValueError naming ``name`` for anything else."""
        who = type(self).__name__
        if isinstance(ids, Tensor):
            if ids.dtype != np.int64:
                raise TypeError(f"{who}: {name} must be an int64 tensor, got {ids.dtype}")
            arr, dims = None, ids.shape
        else:
            arr = np.asarray(ids)
            if arr.dtype.kind not in "iu":
                raise TypeError(f"{who}: {name} must be an integer array, got dtype {arr.dtype}")
            dims = arr.shape
        if len(dims) != 2:
            raise ValueError(f"{who}: {name} must be 2-D (B, T), got shape {tuple(dims)}")
        if shape is not None and tuple(dims) != tuple(shape):
            raise ValueError(f"{who}: {name} has shape {tuple(dims)}, expected {tuple(shape)} (idx's shape)")
        B, T = dims
        if B < 1 or T < 1:
            raise ValueError(f"{who}: {name} is empty (shape {tuple(dims)}): need at least one sequence of at "
                             "least one token")
        if T > self.config.block_size:
            raise ValueError(f"{who}: cannot forward a sequence of length {T}: block_size is only "
                             f"{self.config.block_size}")
        tiles = self.tiling.rows(B, T)
        if arr is None:
            if ids.tiles == tiles:
                return ids
            arr = ids.numpy(force=True)
        return from_numpy(np.ascontiguousarray(arr, dtype=np.int64), tiles)

    def num_params(self, non_embedding: bool = False) -> int:
        """Parameter count, a tied weight counted once.  non_embedding=True leaves out the
        embedding tables that are not also the head (GPT-2: the position table), as nanoGPT."""
        n = self.num_parameters()
        if not non_embedding:
            return n
        head = {id(p) for p in self.lm_head.parameters()}
        tables = {id(p): p for m in self.embeddings for p in m.parameters() if id(p) not in head}
        return n - sum(p.numel() for p in tables.values())

    def flops_per_token(self, T: int) -> int:
        """Forward + backward FLOPs per token at sequence length T (nanoGPT / PaLM estimate:
        6 N for the weights, N without the embedding tables that are not the head, plus
        12 n_layer n_embd T for attention scores)."""
        c = self.config
        return 6 * self.num_params(non_embedding=True) + 12 * c.n_layer * c.n_embd * T

    def metadata(self) -> dict:
        """What rebuilds this model (a checkpoint's metadata): its model_type and its config."""
        return {"model_type": self.model_type, "config": asdict(self.config)}

    def generate(self, input_ids, max_new_tokens: int | None = None, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None, eos_token_id=None, seed: int | None = None,
                 draft=None, num_draft_tokens: int = 4, generation_config=None):
        """``input_ids`` (B, T) extended by ``max_new_tokens`` sampled tokens (greedy when
        temperature == 0; top_k, then top_p filtering), an int64 array (B, T + new) with the
        prompt, as transformers' generate; rows stop at ``eos_token_id`` (then padded with it;
        the output is shorter when every row stopped early); ``draft``: speculative decoding
        with that model proposing ``num_draft_tokens`` per round; ``generation_config``: a
        tiletrain.inference.GenerationConfig instead of the sampling keywords.  With a
        key/value cache (tiletrain.inference.generate, which also returns statistics)."""
        if _GENERATE is None:  # tiletrain/__init__.py imports tiletrain.inference, which registers it
            raise RuntimeError("generation is not loaded: import tiletrain (tiletrain.inference registers it)")
        return _GENERATE(self, input_ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                         eos_token_id=eos_token_id, seed=seed, draft=draft, num_draft_tokens=num_draft_tokens,
                         generation_config=generation_config)

