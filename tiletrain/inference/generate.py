"""Generation with a key/value cache (any tiletrain.nn.CausalLM): the prompt runs once
(prefill) and each new token runs one position through the model, attending to the cached
keys and values of the tokens before it (``tiletrain.ops.attention.decode_attention``) instead
of recomputing the whole context.  The model contract gives ``forward_cached(ids, cache, pos,
last)`` (the logits of the last ``last`` positions only); its attention layers call
``cache.attend``.  Greedy output equals the uncached loop token for token.

The options travel as one ``GenerationConfig`` (transformers' names and defaults for what
tiletrain supports).  Sampling follows transformers' generate: temperature, then top-k, then
top-p (nucleus) filtering; ``eos_token_id`` ends a row, which then emits ``pad_token_id``
(the first eos id when it is unset, as transformers does) until every row has ended.

Speculative decoding (``draft=``): a smaller model with the same vocabulary proposes k
tokens one at a time (its own cache), the model scores them in one forward over k + 1
positions, and the agreeing prefix plus one token of the model's own is kept; the rejected
positions are dropped by lowering the caches' length.  Sampling uses the standard rule
(accept a drafted x with probability min(1, p(x) / q(x)), on rejection sample from
max(0, p - q) normalised, a bonus token from p when all k are accepted), so the output
distribution is the model's; greedy output equals plain greedy.

Greedy decoding without a draft picks each next token with tile tasks (an argmax over the
logits) and feeds it to the next step as a tensor, so the steps are submitted ahead of their
execution (``AHEAD`` of them): the Python side of the next steps overlaps the tasks of this
one, and the tokens are read ``AHEAD`` steps behind (where eos ends the generation)."""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field, replace

import numpy as np

from ..nn.causal_lm import CausalLM, register_generate
from ..ops import no_grad
from ..ops.reduce import argmax
from ..ops.attention import decode_attention
from ..runtime import time as clock  # StarPU's simulated clock in a simulated process
from ..runtime.kernels import copy_regions
from ..ops.creation import zeros
from ..runtime import mpi
from ..tensors import Tensor


class KVCache:
    """Per layer, keys and values of shape (B, Hkv, max_len, D), tiled along time by
    ``time_tile``; allocated at the first write with the batch and head tiles of the keys
    written (so decode attention reads them without re-tiling), filled in place.
    ``length``: the positions it holds; ``crop(n)`` drops the later ones without copying
    (the next write at position n overwrites them), as transformers' ``DynamicCache.crop``."""

    recomputable = False  # an inference cache: blocks never recompute attention through it

    def __init__(self, n_layer: int, max_len: int, time_tile: int = 64):
        self.max_len, self.time_tile = int(max_len), int(time_tile)
        self.length = 0
        self.k: list[Tensor | None] = [None] * n_layer
        self.v: list[Tensor | None] = [None] * n_layer

    def write(self, layer: int, k: Tensor, v: Tensor, pos: int) -> None:
        """Keys and values (B, Hkv, n, D) of positions pos .. pos + n - 1 of ``layer``."""
        B, Hkv, n, D = k.shape
        if pos + n > self.max_len:
            raise ValueError(f"KVCache: positions up to {pos + n} exceed the cache length {self.max_len}")
        if pos > self.length:
            raise ValueError(f"KVCache: a write at position {pos} would leave a gap: the cache holds "
                             f"{self.length} positions")
        if self.k[layer] is None:
            tiles = (k.tiles[0], k.tiles[1], min(self.time_tile, self.max_len), D)
            self.k[layer], self.v[layer] = (zeros((B, Hkv, self.max_len, D), tiles=tiles, dtype=k.dtype)
                                            for _ in range(2))
        spec = ((0, 0, 0, 0), (0, 1, 2, 3), (1, 1, 1, 1), (0, 0, pos, 0), (1, 1, 1, 1), (B, Hkv, n, D))
        copy_regions(self.k[layer], [(k, *spec)])
        copy_regions(self.v[layer], [(v, *spec)])
        self.length = pos + n

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor, pos: int) -> Tensor:
        """Write the new keys/values (B, Hkv, n, D) at pos, then causal attention of the
        queries (B, H, n, D) at pos.. over every cached position up to theirs."""
        self.write(layer, k, v, pos)
        return decode_attention(q, self.k[layer], self.v[layer], pos)

    def crop(self, length: int) -> None:
        """Keep the first ``length`` positions (rejected draft tokens, a sliding window)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"KVCache.crop: length must be in 0..{self.length}, got {length}")
        self.length = int(length)


def sampling_probs(logits: np.ndarray, temperature: float, top_k: int | None = None,
                   top_p: float | None = None) -> np.ndarray:
    """The next-token distribution (float64, same shape) of logits (..., vocab) as
    transformers' sampling warpers make it: divided by the temperature, then top-k (ties
    with the k-th largest kept), then top-p (the smallest set of likeliest tokens whose
    probability reaches top_p, at least one), softmax.  temperature == 0: one-hot argmax."""
    logits = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        out = np.zeros_like(logits)
        np.put_along_axis(out, logits.argmax(axis=-1)[..., None], 1.0, axis=-1)
        return out
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        cut = np.partition(logits, -top_k, axis=-1)[..., -top_k, None]  # each row's k-th largest
        logits = np.where(logits < cut, -np.inf, logits)
    if top_p is not None and top_p < 1.0:
        order = np.argsort(logits, axis=-1, kind="stable")               # ascending
        ranked = np.take_along_axis(logits, order, axis=-1)
        cum = np.cumsum(_softmax(ranked), axis=-1)
        drop = cum <= 1 - top_p                                          # the unlikely tail
        drop[..., -1] = False                                            # the likeliest stays
        logits = np.where(_unsort(drop, order), -np.inf, logits)
    return _softmax(logits)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _unsort(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    out = np.empty_like(values)
    np.put_along_axis(out, order, values, axis=-1)
    return out


def row_rngs(seed, n: int) -> list:
    """One NumPy Generator per batch row: row b draws from ``SeedSequence(seed).spawn(n)[b]``,
    so a row's samples do not depend on the other rows (or on how a server groups them)."""
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(n)]


def _rngs(rng, n: int) -> list:
    return rng if isinstance(rng, (list, tuple)) else [rng] * n


def pick_next(logits: np.ndarray, temperature: float, top_k=None, rng=None, top_p=None) -> np.ndarray:
    """The next token of each row of logits (B, vocab): argmax when temperature == 0, else
    drawn from ``sampling_probs``; ``rng``: one NumPy Generator, or one per row."""
    if temperature == 0:
        return np.asarray(logits).argmax(axis=-1)
    return _sample(sampling_probs(logits, temperature, top_k, top_p), _rngs(rng, len(logits)))


def _sample(p: np.ndarray, rngs) -> np.ndarray:
    """One token per row of probabilities p (B, vocab), row b drawn with rngs[b]."""
    return np.array([rng.choice(p.shape[-1], p=row / row.sum()) for row, rng in zip(p, rngs)], dtype=np.int64)


@dataclass(frozen=True)
class GenerationConfig:
    """The generation options tiletrain supports, under ``transformers.GenerationConfig``'s
    names and with the values transformers' generate uses when they are unset (its
    ``_get_default_generation_params``): greedy unless ``do_sample``; sampling divides the
    logits by ``temperature`` and keeps the ``top_k`` likeliest tokens, then the likeliest
    whose probability reaches ``top_p`` (None: no filter); ``max_new_tokens`` new tokens (None:
    up to ``max_length`` tokens in all, the prompt included); a row that emits an
    ``eos_token_id`` (an id or a list) then emits ``pad_token_id`` (None: the first eos id);
    speculative decoding drafts ``num_assistant_tokens`` per round (transformers'
    assisted generation, whose draft model is generate's ``draft`` argument here)."""

    max_new_tokens: int | None = None
    max_length: int = 20
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = 50
    top_p: float | None = 1.0
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    num_assistant_tokens: int = 20

    @classmethod
    def from_keywords(cls, max_new_tokens=None, temperature=1.0, top_k=None, top_p=None, eos_token_id=None,
                      num_draft_tokens=4, **fields) -> "GenerationConfig":
        """tiletrain's keyword convention (``generate``'s arguments, `tiletrain generate`'s flags):
        temperature 0 is greedy, top_k / top_p None filter nothing, ``num_draft_tokens`` per
        speculative round."""
        if not isinstance(temperature, numbers.Real) or not temperature >= 0 or temperature == float("inf"):
            raise ValueError(f"generate: temperature must be a finite number >= 0 (0: greedy), got {temperature!r}")
        sample = temperature > 0
        return cls(max_new_tokens=max_new_tokens, do_sample=sample, temperature=temperature if sample else 1.0,
                   top_k=top_k, top_p=top_p, eos_token_id=eos_token_id, num_assistant_tokens=num_draft_tokens,
                   **fields)

    def validate(self) -> None:
        """ValueError naming the option unless every value is one generate takes."""
        if self.max_new_tokens is not None and (not isinstance(self.max_new_tokens, numbers.Integral)
                                                or self.max_new_tokens < 0):
            raise ValueError(f"generate: max_new_tokens must be an int >= 0, got {self.max_new_tokens!r}")
        if not isinstance(self.max_length, numbers.Integral) or self.max_length < 0:
            raise ValueError(f"generate: max_length must be an int >= 0, got {self.max_length!r}")
        t = self.temperature
        if self.do_sample and (not isinstance(t, numbers.Real) or not t > 0 or t == float("inf")):
            raise ValueError(f"generate: temperature must be a finite number > 0 with do_sample, got {t!r}")
        if self.top_k is not None and (not isinstance(self.top_k, numbers.Integral) or self.top_k < 1):
            raise ValueError(f"generate: top_k must be an int >= 1 or None, got {self.top_k!r}")
        if self.top_p is not None and (not isinstance(self.top_p, numbers.Real) or not 0 < self.top_p <= 1):
            raise ValueError(f"generate: top_p must be in (0, 1] or None, got {self.top_p!r}")
        if not isinstance(self.num_assistant_tokens, numbers.Integral) or self.num_assistant_tokens < 1:
            raise ValueError(f"generate: num_draft_tokens must be an int >= 1, got {self.num_assistant_tokens!r} "
                             "(GenerationConfig.num_assistant_tokens)")

    def new_tokens(self, prompt_len: int) -> int:
        """How many tokens to generate after a prompt of prompt_len tokens."""
        if self.max_new_tokens is not None:
            return int(self.max_new_tokens)
        return max(int(self.max_length) - prompt_len, 0)

    def logits_to_probs(self, logits: np.ndarray) -> np.ndarray:
        """The next-token distribution of logits (..., vocab) (see sampling_probs)."""
        return sampling_probs(logits, self.temperature if self.do_sample else 0, self.top_k, self.top_p)

    def ends(self) -> tuple[np.ndarray | None, int]:
        """(the eos ids as an array or None, the pad token rows emit after theirs)."""
        if self.eos_token_id is None:
            return None, 0 if self.pad_token_id is None else int(self.pad_token_id)
        eos = np.atleast_1d(np.asarray(self.eos_token_id, dtype=np.int64))
        return eos, int(eos[0] if self.pad_token_id is None else self.pad_token_id)


@dataclass
class GenerationStats:
    """What one ``generate(..., return_stats=True)`` did.  ``accepted``: per speculative
    round, the drafted tokens kept (each round also adds one token of the model's own;
    with a batch, the fewest any unfinished row accepted); ``drafted``: the tokens proposed
    per round (num_draft_tokens, fewer near max_new_tokens)."""
    new_tokens: int = 0                 # generated positions per row (the output's T + new_tokens)
    seconds: float = 0.0
    model_calls: int = 0                # forward_cached calls of the model
    draft_calls: int = 0
    accepted: list[int] = field(default_factory=list)
    drafted: list[int] = field(default_factory=list)

    @property
    def mean_accepted(self) -> float:
        """Drafted tokens accepted per round (0.0 without rounds)."""
        return float(np.mean(self.accepted)) if self.accepted else 0.0


class _Lane:
    """A model, its key/value cache and the part of the sequence the cache holds: cache
    position i holds the token at sequence index start + i.  With ``slide`` a sequence
    longer than the model's context keeps going: when the cache is full, the last half of
    the context is run again into it from position 0 (a sliding window)."""

    def __init__(self, model, max_len: int, time_tile: int, slide: bool):
        self.model, self.slide = model, slide
        self.context = model.config.block_size
        self.cache = KVCache(len(model.blocks), min(max_len, self.context), time_tile)
        self.start = 0
        self.calls = 0

    @property
    def held(self) -> int:
        """Sequence tokens whose keys and values are in the cache."""
        return self.start + self.cache.length

    def submit(self, tokens: np.ndarray, last: int = 1) -> Tensor:
        """Submit the model over the tokens of ``tokens`` (B, L) the cache does not hold; its
        logits (B, n, vocab), being computed (at least ``last`` positions)."""
        L = tokens.shape[1]
        if L - self.start > self.cache.max_len:  # validated up front unless sliding
            self.start = L - max(self.context // 2, last)
            self.cache.crop(0)
        new = np.ascontiguousarray(tokens[:, self.held:])
        self.calls += 1
        return self.model.forward_cached(new, self.cache, self.cache.length, last=last)

    def step(self, ids: Tensor) -> Tensor:
        """Submit the model over one more position whose ids (B, 1) are a tensor (an argmax's,
        not read); its logits (B, 1, vocab), being computed.  The cache must have room."""
        self.calls += 1
        return self.model.forward_cached(ids, self.cache, self.cache.length, last=1)

    def logits(self, tokens: np.ndarray, last: int = 1) -> np.ndarray:
        """Run the tokens of ``tokens`` (B, L) the cache does not hold; the logits (B, last,
        vocab), float64, of the last ``last`` positions."""
        return _last(self.submit(tokens, last).numpy(force=True), last)

    def crop(self, held: int) -> None:
        """Keep the first ``held`` sequence tokens (drop rejected draft tokens)."""
        if held < self.held:
            self.cache.crop(held - self.start)


def _last(logits: np.ndarray, last: int) -> np.ndarray:
    """The logits (B, last, vocab), float64, of the last ``last`` positions."""
    return logits[:, -last:].astype(np.float64)


def _check_ids(input_ids) -> np.ndarray:
    if isinstance(input_ids, (list, tuple)) and input_ids and all(isinstance(r, (list, tuple, np.ndarray))
                                                                  for r in input_ids):
        lengths = sorted({len(r) for r in input_ids})
        if len(lengths) > 1:
            raise ValueError(f"generate: the prompts of a batch must have equal lengths, got lengths "
                             f"{', '.join(map(str, lengths))} (pad them, or generate them separately)")
    idx = np.asarray(input_ids)
    if idx.ndim != 2 or idx.dtype.kind not in "iu" or idx.shape[1] < 1 or idx.shape[0] < 1:
        raise ValueError(f"generate: input_ids must be a non-empty 2-D integer array (B, T), got "
                         f"{idx.dtype} {idx.shape}")
    return idx.astype(np.int64)


def _check_model(model, what: str):
    if not isinstance(model, CausalLM):
        raise TypeError(f"generate: {what} must be a tiletrain GPT or Llama (a tiletrain.nn.CausalLM), got "
                        f"{type(model).__name__}")
    return model.config


def _eos_ids(eos_token_id, vocab: int) -> None:
    if eos_token_id is None:
        return
    ids = [eos_token_id] if isinstance(eos_token_id, numbers.Integral) else eos_token_id
    if (not isinstance(ids, (list, tuple, np.ndarray)) or len(ids) == 0
            or not all(isinstance(i, numbers.Integral) and 0 <= i < vocab for i in ids)):
        raise ValueError(f"generate: eos_token_id must be a token id or a non-empty list of token ids in "
                         f"0..{vocab - 1}, got {eos_token_id!r}")


def make_config(config: GenerationConfig | None, keywords: dict, defaults: dict) -> GenerationConfig:
    """The GenerationConfig of a generate call: ``config``, or one made of the sampling
    ``keywords`` (tiletrain's convention, GenerationConfig.from_keywords); with a config the
    keywords must keep their ``defaults`` but max_new_tokens, which overrides the config's."""
    if config is None:
        return GenerationConfig.from_keywords(**keywords)
    if not isinstance(config, GenerationConfig):
        raise TypeError(f"generate: generation_config must be a GenerationConfig, got {type(config).__name__}")
    given = [k for k, v in keywords.items() if k != "max_new_tokens" and v != defaults[k]]
    if given:
        raise ValueError(f"generate: pass {', '.join(given)} in generation_config or as keywords, not both")
    if keywords["max_new_tokens"] is not None:
        config = replace(config, max_new_tokens=keywords["max_new_tokens"])
    return config


def _validate(model, idx, gen: GenerationConfig, seed, draft, slide, time_tile=64):
    cfg = _check_model(model, "the model")
    if not isinstance(time_tile, numbers.Integral) or time_tile < 1:
        raise ValueError(f"generate: time_tile must be an int >= 1, got {time_tile!r}")
    gen.validate()
    if seed is not None and not isinstance(seed, numbers.Integral):
        raise ValueError(f"generate: seed must be an int or None, got {seed!r}")
    if idx.max() >= cfg.vocab_size or idx.min() < 0:
        raise ValueError(f"generate: input_ids must be token ids in 0..{cfg.vocab_size - 1}, got values in "
                         f"{idx.min()}..{idx.max()}")
    _eos_ids(gen.eos_token_id, cfg.vocab_size)
    T, new, k = idx.shape[1], gen.new_tokens(idx.shape[1]), gen.num_assistant_tokens
    models = [("the model", cfg)]
    if draft is not None:
        dcfg = _check_model(draft, "draft")
        if dcfg.vocab_size != cfg.vocab_size:
            raise ValueError(f"generate: the draft's vocab_size {dcfg.vocab_size} differs from the model's "
                             f"{cfg.vocab_size} (a draft must share the model's vocabulary)")
        models.append(("the draft", dcfg))
    for who, c in models:
        if slide:
            if draft is not None and k >= max(c.block_size // 2, 1):
                raise ValueError(f"generate: num_draft_tokens ({k}) must be below half of "
                                 f"{who}'s context ({c.block_size}) for the sliding window")
        elif T > c.block_size:
            raise ValueError(f"generate: the prompt ({T} tokens) is longer than {who}'s context of "
                             f"{c.block_size} positions")
        elif T + new > c.block_size:
            raise ValueError(f"generate: the prompt ({T}) plus max_new_tokens ({new}) exceed "
                             f"{who}'s context of {c.block_size} positions")


# generate's sampling keywords and their defaults (GenerationConfig.from_keywords)
KEYWORDS = dict(max_new_tokens=None, temperature=1.0, top_k=None, top_p=None, eos_token_id=None, num_draft_tokens=4)


def generate(model, input_ids, max_new_tokens: int | None = None, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, eos_token_id=None, seed: int | None = None,
             draft=None, num_draft_tokens: int = 4, time_tile: int = 64, sliding_window: bool = False,
             return_stats: bool = False, generation_config: GenerationConfig | None = None):
    """``input_ids`` (B, T) extended by up to ``max_new_tokens`` tokens: an int64 array (B, T +
    new), the prompt included, as transformers' generate; with a key/value cache (one prefill
    pass over the prompt, then one position per new token).

    The options are a ``generation_config`` (GenerationConfig: transformers' names and
    defaults), or these keywords, which make one: temperature == 0: greedy; else sampled
    after temperature, ``top_k`` and ``top_p`` filtering; ``eos_token_id`` (an id or a
    list): a row that emitted one emits the first id as padding from then on; generation
    stops when every row has (the output may be shorter).  ``draft``: speculative decoding
    with that model proposing ``num_draft_tokens`` per round.  Row b samples with its own
    stream of ``seed`` (``SeedSequence(seed).spawn(B)[b]``).  T + max_new_tokens must fit
    the model's (and draft's) context, unless ``sliding_window``: then a full cache restarts
    from the last half of the context.  ``return_stats``: return (ids, GenerationStats)."""
    idx = _check_ids(input_ids)
    gen = make_config(generation_config, dict(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                                              top_p=top_p, eos_token_id=eos_token_id,
                                              num_draft_tokens=num_draft_tokens), KEYWORDS)
    _validate(model, idx, gen, seed, draft, sliding_window, time_tile)
    B, T = idx.shape
    new = gen.new_tokens(T)
    stats = GenerationStats()
    t0 = clock()
    lanes = [_Lane(m, T + new, time_tile, sliding_window) for m in (model, draft) if m is not None]
    modes = [(m, m.training) for m in (model, draft) if m is not None]
    for m, _ in modes:
        m.eval()
    ahead = AHEAD > 0 and not gen.do_sample and draft is None and T + new <= lanes[0].cache.max_len \
        and not mpi.enabled()
    try:
        with no_grad():  # each step's temporaries take the tiles of the last steps' (csrc/tile.c)
            if ahead:
                seq = _greedy_ahead(lanes[0], idx, gen)
            else:
                seq = _run(_rounds(lanes, idx, gen, row_rngs(seed, B), stats))
    finally:
        for m, training in modes:
            m.train(training)
    stats.new_tokens, stats.seconds = seq.shape[1] - T, clock() - t0
    stats.model_calls = lanes[0].calls
    stats.draft_calls = lanes[1].calls if draft is not None else 0
    return (seq, stats) if return_stats else seq


# The StarPU policy `tiletrain generate` and benchmarks/generate.py start with: tt-cp's idle
# workers nap on a condition variable instead of polling (Debian's StarPU has non-blocking
# drivers), which leaves the cores to the Python thread that submits each decode step
# (measured 1.6-2.0x tokens/s over lws at batch 1; training keeps the runtime default,
# config.DEFAULT_SCHED).
DECODE_SCHED = "tt-cp"

AHEAD = 4  # greedy decode steps submitted beyond the oldest whose tokens are not read yet (0: none)


def _greedy_ahead(lane, seq, gen: GenerationConfig):
    """Greedy decoding with no host round trip per token: each step's next tokens are an
    argmax task's (B, 1) int64 tensor, which the next step embeds; the tokens are read
    ``AHEAD`` steps behind, and an eos seen there (every row ended) stops the submission.
    Output as :func:`_rounds` (rows pad after their eos)."""
    B, max_new = seq.shape[0], gen.new_tokens(seq.shape[1])
    eos, pad = gen.ends()
    if max_new == 0:
        return seq
    pending, got = [], []                      # token tensors not yet read; arrays (B,) read
    finished = np.zeros(B, dtype=bool)
    logits = lane.submit(seq)
    for s in range(max_new):
        nxt = argmax(logits, dim=-1)           # (B, 1): the logits of the last position
        pending.append(nxt)
        if s + 1 < max_new:
            logits = lane.step(nxt)
        while pending and (len(pending) > AHEAD or s + 1 == max_new):
            got.append(pending.pop(0).numpy(force=True)[:, 0])
            if eos is not None:
                finished |= np.isin(got[-1], eos)
                if finished.all():
                    break
        if eos is not None and finished.all():
            break
    new = np.stack(got, axis=1).astype(np.int64)
    if eos is not None:
        hit = np.isin(new, eos)
        first = np.where(hit.any(axis=1), hit.argmax(axis=1), new.shape[1])
        for b in range(B):
            new[b, first[b] + 1:] = pad
        if hit.any(axis=1).all():
            new = new[:, :int(first.max()) + 1]
    return np.concatenate([seq, new], axis=1)


def _run(rounds):
    """Drive a :func:`_rounds` generator, reading each forward's logits at once; its tokens."""
    logits = None
    try:
        while True:
            logits = rounds.send(logits).numpy(force=True)
    except StopIteration as done:
        return done.value


def _rounds(lanes, seq, gen: GenerationConfig, rngs, stats):
    """The generation loop, a generator: each round drafts k_r tokens (none without a
    draft), submits the model over them and yields that forward's logits tensor; sent the
    logits read (NumPy), it appends the accepted tokens plus one of the model's own.
    Returns the tokens (StopIteration.value).  ``generate`` reads each forward at once
    (:func:`_run`); pipeline serving keeps several batches' forwards in flight."""
    target, draft = lanes[0], (lanes[1] if len(lanes) > 1 else None)
    B, T = seq.shape
    max_new, k, (eos, pad) = gen.new_tokens(T), gen.num_assistant_tokens, gen.ends()
    finished = np.zeros(B, dtype=bool)
    end = np.full(B, T + max_new)           # the sequence length at which each row finished
    greedy, probs = not gen.do_sample, gen.logits_to_probs
    while seq.shape[1] - T < max_new and not finished.all():
        k_r = min(k, max_new - (seq.shape[1] - T) - 1) if draft is not None else 0
        drafts = np.zeros((B, k_r), dtype=np.int64)
        q = []
        for i in range(k_r):  # the draft proposes k_r tokens, one position at a time
            lg = draft.logits(np.concatenate([seq, drafts[:, :i]], axis=1))[:, 0]
            if greedy:
                drafts[:, i] = lg.argmax(axis=-1)
            else:
                q.append(probs(lg))
                drafts[:, i] = _sample(q[-1], rngs)
        out = yield target.submit(np.concatenate([seq, drafts], axis=1), last=k_r + 1)
        logits = _last(out, k_r + 1)                                                    # (B, k_r + 1, V)
        if greedy:
            best = logits.argmax(axis=-1)                                               # (B, k_r + 1)
            agree = np.cumprod(best[:, :k_r] == drafts, axis=1).sum(axis=1)            # per row
            c = int(agree[~finished].min()) if k_r else 0
            y = best[:, c]
        else:
            c, y = _verify(probs(logits), np.array(q).transpose(1, 0, 2) if k_r else None, drafts, rngs,
                           finished)
        if k_r:
            stats.accepted.append(c)
            stats.drafted.append(k_r)
        new = np.concatenate([drafts[:, :c], y[:, None]], axis=1)                      # (B, c + 1)
        L = seq.shape[1]
        for lane in lanes:  # drop the rejected drafted positions
            lane.crop(L + c)
        if eos is not None:
            for b in range(B):
                if finished[b]:
                    new[b] = pad
                    continue
                hits = np.flatnonzero(np.isin(new[b], eos))
                if hits.size:
                    finished[b], end[b] = True, L + hits[0] + 1
                    new[b, hits[0] + 1:] = pad
        seq = np.concatenate([seq, new], axis=1)
    return seq[:, :end.max()] if finished.all() else seq


def _verify(p: np.ndarray, q: np.ndarray | None, drafts: np.ndarray, rngs, finished: np.ndarray):
    """The standard speculative sampling rule over a batch.  p (B, k + 1, V): the model's
    distributions after each drafted prefix; q (B, k, V): the draft's, from which drafts (B, k)
    were drawn.  Row b accepts drafted x_i while u < p(x_i) / q(x_i); the batch keeps c
    tokens, the fewest any unfinished row accepted; then each row's next token is its drafted
    x_c if it accepted it, else drawn from max(0, p - q) normalised (the rejected
    position), or from p after all k.  Returns (c, next tokens (B,))."""
    B, k = drafts.shape
    accepted = np.zeros(B, dtype=np.int64)
    for b in range(B):
        while accepted[b] < k:
            i, x = accepted[b], drafts[b, accepted[b]]
            if not rngs[b].random() < p[b, i, x] / q[b, i, x]:
                break
            accepted[b] += 1
    c = int(accepted[~finished].min()) if k else 0
    y = np.empty(B, dtype=np.int64)
    for b in range(B):
        if accepted[b] > c:
            y[b] = drafts[b, c]
            continue
        dist = p[b, c] if c == k else np.maximum(p[b, c] - q[b, c], 0)
        if not dist.sum() > 0:  # p == q up to rounding: any token of p is right
            dist = p[b, c]
        y[b] = _sample(dist[None], [rngs[b]])[0]
    return c, y


register_generate(generate)  # CausalLM.generate forwards here (nn is below inference)
