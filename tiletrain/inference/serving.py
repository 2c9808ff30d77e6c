"""Pipeline-parallel serving: a GPT or Llama split over the MPI ranks by layers (the
``pipeline`` placement of tiletrain.parallel: the embeddings and the first blocks on rank 0,
the last blocks, the final norm and the head on the last rank), with the batch split into
``streams`` independent request streams, each with its own key/value cache (whose tiles
live on the rank of the layer they belong to).

Every rank runs the same loop.  Nothing orders the stages but dataflow: each stream's next
decode step is submitted as soon as its token is known, and only reading a stream's logits
waits -- for that stream alone.  While the Python loop waits for stream s, the tasks already
submitted for streams s+1, s+2, ... run, so stream s's step t on stage r overlaps stream
s+1's step t on stage r-1::

    rank 0 (stage 0)   s0 t | s1 t | s0 t+1 | s1 t+1 | ...
    rank 1 (stage 1)        | s0 t | s1 t   | s0 t+1 | ...

The logits of a step are read on every rank (``Tensor.numpy`` is collective under MPI), so
every rank samples the same token: greedy output equals ``generate`` in one process token
for token, on any number of ranks and streams.

Each stream runs ``generate``'s own generation loop (``_rounds``, a generator that yields
each forward of the model before its logits are read), so the sampling options, eos
handling and speculative decoding are ``generate``'s.  With a draft, a stream's round
drafts its tokens one at a time (each draft step read at once, on every rank) and then
submits the model over them; the other streams' forwards run meanwhile.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ..distribution import rank
from ..ops import no_grad
from ..parallel import check_fit, place
from ..trace.tags import tag
from ..runtime import time as clock  # StarPU's simulated clock in a simulated process
from .generate import (KEYWORDS, GenerationConfig, GenerationStats, _check_ids, _Lane, _rounds, _validate,
                       make_config, row_rngs)
from .text import decode_rows, eos_ids, print_samples, prompt_ids

__all__ = ["generate_pipeline", "PipelineStats"]


@dataclass(frozen=True)
class PipelineStats:
    """What one ``generate_pipeline`` call did: request streams, pipeline stages, batch rows,
    new tokens per row (fewer than max_new_tokens when every row met an eos token) and wall
    seconds (submission to the last token, on this rank).  With a draft: ``accepted``, the
    drafted tokens kept per speculative round (every stream's rounds, stream by stream), and
    ``drafted``, the tokens proposed per round."""
    streams: int
    stages: int
    batch: int
    new_tokens: int
    seconds: float
    accepted: tuple[int, ...] = ()
    drafted: tuple[int, ...] = ()

    @property
    def tokens_per_s(self) -> float:
        return self.batch * self.new_tokens / self.seconds if self.seconds > 0 else float("inf")

    @property
    def mean_accepted(self) -> float:
        """Drafted tokens accepted per round (0.0 without rounds)."""
        return float(np.mean(self.accepted)) if self.accepted else 0.0


def _advance(rounds, logits, s: int):
    """Run stream s's generation (a ``_rounds`` generator) up to its next forward of the model:
    (that forward's logits tensor, being computed; None), or at the stream's end (None, its
    tokens).  ``logits``: the previous forward's, read (None at the start)."""
    try:
        with tag(microbatch=s):
            return rounds.send(logits), None
    except StopIteration as done:
        return None, done.value


def generate_pipeline(model, input_ids, max_new_tokens: int | None = None, streams: int = 1, temperature: float = 0.0,
                      top_k: int | None = None, top_p: float | None = None, eos_token_id=None,
                      seed: int | None = None, draft=None, num_draft_tokens: int = 4, time_tile: int = 64,
                      sliding_window: bool = False, return_stats: bool = False,
                      generation_config: GenerationConfig | None = None):
    """``input_ids`` (B, T) extended by up to ``max_new_tokens`` tokens (int64 (B, T + new), the
    prompt included), with the model placed as a pipeline over the ranks
    (``place(model, "pipeline")``: one stage per rank; one process: one stage) and the batch
    split into ``streams`` request streams (``np.array_split`` of the rows), each with its own
    key/value cache, kept in flight together.  Collective under MPI: every rank calls it with
    the same arguments and gets the same tokens.

    The options are ``generate``'s (a ``generation_config`` or the keywords, here greedy by
    default), with the same checks: temperature 0 is greedy; with
    sampling (``top_k``, ``top_p``), ``seed`` fixes the draws: row b draws from its own stream
    of the seed, as in ``generate``, so any number of streams samples the tokens of
    ``generate``.  ``eos_token_id``: a row that emitted one emits the first id from then on; a
    stream whose rows have all ended stops, and the output ends when every row has (as
    ``generate``'s).  ``draft``: speculative decoding, each stream with its own draft cache;
    the draft runs where it is (not placed: on rank 0) and every rank reads its proposals.
    Greedy output equals plain greedy; sampled, each stream keeps the fewest tokens any of its
    rows accepted (``generate`` keeps the batch's fewest), so the tokens equal ``generate``'s
    with one stream and follow the model's distribution with several.  T + max_new_tokens must
    fit the model's (and draft's) context, unless ``sliding_window``: then a full cache
    restarts from the last half of the context, as in ``generate`` (with a draft, where a
    round ends decides where the window restarts: one stream gives ``generate``'s tokens).
    ``return_stats``: return (tokens, :class:`PipelineStats`)."""
    idx = _check_ids(input_ids)
    gen = make_config(generation_config, dict(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                                              top_p=top_p, eos_token_id=eos_token_id,
                                              num_draft_tokens=num_draft_tokens), dict(KEYWORDS, temperature=0.0))
    _validate(model, idx, gen, seed, draft, sliding_window, time_tile)
    B, T = idx.shape
    if not isinstance(streams, numbers.Integral) or isinstance(streams, bool) or not 1 <= streams <= B:
        raise ValueError(f"generate: streams must be an int between 1 and the batch size {B}, got {streams!r}")
    check_fit("pipeline", n_layer=len(model.blocks), batch=B)
    plan = place(model, "pipeline")
    rows = np.array_split(np.arange(B), int(streams))
    rngs = row_rngs(seed, B)
    stats = [GenerationStats() for _ in rows]
    lanes = [[_Lane(m, T + gen.new_tokens(T), time_tile, sliding_window) for m in (model, draft) if m is not None]
             for _ in rows]
    rounds = [_rounds(lanes[s], idx[r], gen, [rngs[i] for i in r], stats[s]) for s, r in enumerate(rows)]
    pending, out = [None] * len(rows), [None] * len(rows)
    modes = [(m, m.training) for m in (model, draft) if m is not None]
    for m, _ in modes:
        m.eval()
    t0 = clock()
    try:
        with no_grad():
            for s in range(len(rows)):  # every stream's prefill in flight
                pending[s], out[s] = _advance(rounds[s], None, s)
            while any(p is not None for p in pending):
                for s, p in enumerate(pending):  # wait for stream s only; the others keep running
                    if p is not None:
                        pending[s], out[s] = _advance(rounds[s], p.numpy(force=True), s)
    finally:
        for m, training in modes:
            m.train(training)
    width = max(o.shape[1] for o in out)  # streams whose rows all ended early: padded as generate pads
    pad = gen.ends()[1]
    tokens = np.concatenate([np.pad(o, ((0, 0), (0, width - o.shape[1])), constant_values=pad) for o in out])
    if return_stats:
        return tokens, PipelineStats(len(rows), plan.stages, B, width - T, clock() - t0,
                                     tuple(a for st in stats for a in st.accepted),
                                     tuple(d for st in stats for d in st.drafted))
    return tokens


def cli_generate(model, tokenizer, args, draft=None) -> int:
    """``tiletrain generate --dist pipeline --streams S``: the prompt repeated over a batch
    (``--batch`` rows, at least one per stream) served by :func:`generate_pipeline` with the
    sampling options of ``tiletrain generate`` (``--top-k``, ``--top-p``, ``--eos``, the
    ``draft`` loaded from ``--draft``) and its sliding window past the model's context; rank 0
    prints each row's text (up to its first eos token) and a tokens/s line."""
    batch = max(args.batch, args.streams)
    ids = prompt_ids(tokenizer, args.prompt)
    gen = GenerationConfig.from_keywords(args.tokens, args.temperature, args.top_k, args.top_p,
                                         eos_ids(args.eos, tokenizer), args.num_draft_tokens)
    tokens, stats = generate_pipeline(model, np.tile(np.asarray(ids, dtype=np.int64), (batch, 1)),
                                      streams=args.streams, seed=args.seed, draft=draft, sliding_window=True,
                                      return_stats=True, generation_config=gen)
    if rank() == 0:
        accepted = ([f"speculative decoding: {stats.mean_accepted:.2f} of {args.num_draft_tokens} drafted tokens "
                     f"accepted per round ({len(stats.accepted)} rounds over {stats.streams} stream(s))"]
                    if draft is not None else [])
        print_samples(decode_rows(tokenizer, tokens, len(ids), gen.eos_token_id), *accepted,
                      f"{stats.batch * stats.new_tokens} tokens in {stats.seconds:.2f} s: {stats.tokens_per_s:.1f} "
                      f"tokens/s ({stats.streams} stream(s), {stats.stages} stage(s), batch {stats.batch})")
    return 0
