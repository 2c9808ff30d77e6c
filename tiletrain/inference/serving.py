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
"""
from __future__ import annotations

import numbers
import time
from dataclasses import dataclass

import numpy as np

from ..ops import no_grad
from ..trace.tags import tag
from .generate import KVCache, pick_next, row_rngs

__all__ = ["generate_pipeline", "PipelineStats"]


@dataclass(frozen=True)
class PipelineStats:
    """What one ``generate_pipeline`` call did: request streams, pipeline stages, batch rows,
    new tokens per row and wall seconds (submission to the last token, on this rank)."""
    streams: int
    stages: int
    batch: int
    new_tokens: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.batch * self.new_tokens / self.seconds if self.seconds > 0 else float("inf")


def _check(model, idx, max_new_tokens, streams, temperature, top_k, time_tile) -> np.ndarray:
    try:
        idx = np.asarray(idx)
    except ValueError:  # rows of different lengths
        raise ValueError("generate_pipeline: input_ids must be a batch of equal-length prompts (B, T); "
                         "got rows of different lengths") from None
    if idx.ndim != 2 or idx.dtype.kind not in "iu" or idx.shape[1] < 1:
        raise ValueError(f"generate_pipeline: input_ids must be a non-empty 2-D integer array (B, T) of "
                         f"equal-length prompts, got {idx.dtype} {idx.shape}")
    if not isinstance(max_new_tokens, numbers.Integral) or isinstance(max_new_tokens, bool) or max_new_tokens < 0:
        raise ValueError(f"generate_pipeline: max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if not isinstance(streams, numbers.Integral) or isinstance(streams, bool) or not 1 <= streams <= idx.shape[0]:
        raise ValueError(f"generate_pipeline: streams must be an int between 1 and the batch size "
                         f"{idx.shape[0]}, got {streams!r}")
    if not isinstance(temperature, numbers.Real) or isinstance(temperature, bool) or temperature < 0:
        raise ValueError(f"generate_pipeline: temperature must be >= 0, got {temperature!r}")
    if top_k is not None and (not isinstance(top_k, numbers.Integral) or isinstance(top_k, bool) or top_k < 1):
        raise ValueError(f"generate_pipeline: top_k must be None or an int >= 1, got {top_k!r}")
    if not isinstance(time_tile, numbers.Integral) or isinstance(time_tile, bool) or time_tile < 1:
        raise ValueError(f"generate_pipeline: time_tile must be an int >= 1, got {time_tile!r}")
    T, context = idx.shape[1], model.config.block_size
    if T + max_new_tokens > context:
        raise ValueError(f"generate_pipeline: the prompt ({T}) plus max_new_tokens ({max_new_tokens}) exceed the "
                         f"model's context of {context} positions")
    return idx.astype(np.int64)


def generate_pipeline(model, input_ids, max_new_tokens: int, streams: int = 1, temperature: float = 0.0,
                      top_k: int | None = None, seed: int | None = None, time_tile: int = 64,
                      return_stats: bool = False):
    """``input_ids`` (B, T) extended by ``max_new_tokens`` tokens (int64 (B, T + new), the
    prompt included), with the model placed as a pipeline over the ranks
    (``place(model, "pipeline")``: one stage per rank; one process: one stage) and the batch
    split into ``streams`` request streams (``np.array_split`` of the rows), each with its own
    key/value cache, kept in flight together.  Collective under MPI: every rank calls it with
    the same arguments and gets the same tokens.  temperature 0 is greedy; with sampling,
    ``seed`` fixes the draws: row b draws from its own stream of the seed, as in ``generate``,
    so any number of streams samples the tokens of ``generate``.  ``return_stats``: return (tokens,
    :class:`PipelineStats`)."""
    from ..parallel import check_fit, place
    idx = _check(model, input_ids, max_new_tokens, streams, temperature, top_k, time_tile)
    B, T = idx.shape
    check_fit("pipeline", n_layer=model.config.n_layer, batch=B)
    plan = place(model, "pipeline")
    rows = np.array_split(np.arange(B), int(streams))
    rngs = row_rngs(seed, B)
    out = [[idx[r]] for r in rows]
    caches = [KVCache(model.config.n_layer, T + max_new_tokens, time_tile) for _ in rows]
    pending = [None] * len(rows)      # each stream's logits being computed
    was_training = model.training
    model.eval()
    t0 = time.perf_counter()
    try:
        with no_grad():
            if max_new_tokens:
                for s, r in enumerate(rows):  # every stream's prefill in flight
                    with tag(microbatch=s):
                        pending[s] = model.forward_cached(idx[r], caches[s], 0)
            for step in range(int(max_new_tokens)):
                for s in range(len(rows)):    # wait for stream s only; the others keep running
                    logits = pending[s].numpy()[:, -1].astype(np.float64)
                    nxt = pick_next(logits, float(temperature), top_k, [rngs[i] for i in rows[s]]).astype(np.int64)[:, None]
                    out[s].append(nxt)
                    pending[s] = None
                    if step + 1 < max_new_tokens:
                        with tag(microbatch=s):
                            pending[s] = model.forward_cached(nxt, caches[s], T + step)
    finally:
        model.train(was_training)
    tokens = np.concatenate([np.concatenate(o, axis=1) for o in out], axis=0)
    if return_stats:
        return tokens, PipelineStats(len(rows), plan.stages, B, int(max_new_tokens), time.perf_counter() - t0)
    return tokens


def cli_generate(model, tokenizer, args) -> int:
    """``tiletrain generate --dist pipeline --streams S``: the prompt repeated over a batch
    (``--batch`` rows, at least one per stream) served by
    :func:`generate_pipeline`; rank 0 prints each row's text and a tokens/s line."""
    from ..distribution import rank
    for name in ("draft", "top_p", "eos_token_id", "eos"):  # options of the one-process generate
        if getattr(args, name, None) is not None:
            raise NotImplementedError(f"tiletrain generate --dist pipeline does not support --{name.replace('_', '-')} "
                                      "yet (serving streams greedy, temperature and top-k only)")
    from .text import print_samples, prompt_ids
    batch = max(getattr(args, "batch", 1), args.streams)
    prompts = np.tile(np.asarray(prompt_ids(tokenizer, args.prompt), dtype=np.int64), (batch, 1))
    tokens, stats = generate_pipeline(model, prompts, args.tokens, streams=args.streams, temperature=args.temperature,
                                      top_k=args.top_k, seed=args.seed, return_stats=True)
    if rank() == 0:
        print_samples([tokenizer.decode([int(t) for t in row]) for row in tokens],
                      f"{stats.batch * stats.new_tokens} tokens in {stats.seconds:.2f} s: {stats.tokens_per_s:.1f} "
                      f"tokens/s ({stats.streams} stream(s), {stats.stages} stage(s), batch {stats.batch})")
    return 0
