"""Training distributions over MPI ranks: ``single``, ``pipeline`` and ``data``.

They are owner maps (DESIGN principle 7): the model code is the same in every mode, and
StarPU-MPI moves the tiles.  Chosen in one place: ``tiletrain train --dist MODE`` or
``TrainArgs(dist=MODE)``; from a script, ``check_fit`` then ``place(model, MODE)`` once,
before the optimizer is made, and (data mode) :func:`shards` for each batch.

- ``single``: every parameter and activation on rank 0 (the default distribution).
- ``pipeline``: ``world_size()`` stages.  GPT blocks are split evenly over the stages (block
  i on stage ``i * S // L``), the embeddings (and dropout) on the first stage, ``ln_f`` and
  the head on the last.  Each module's parameters are owned by its stage and its forward
  runs under ``use(SingleRank(stage))`` (``Module.placement``), so its activations -- and,
  as backward re-enters the block each op was recorded in, its gradients -- live there too;
  only the activations crossing a stage boundary move.  The tied token embedding ``wte`` is
  also the LM head's weight: it lives on the first stage, so every step the last stage
  reads it (vocab x n_embd moved first -> last after each update) and its head gradient
  is sent back to the first stage, where it is added to the embedding gradient.
- ``data``: each batch is split into ``world_size()`` equal shards along the batch axis;
  shard r's forward and backward run under ``use(SingleRank(r))``, so every rank computes
  its part.  Parameters are spread whole over the ranks (largest first, to the rank with
  the fewest bytes): rank r's partial gradient of a parameter is reduced into the
  parameter's ``.grad`` on its owner by a chain of tile tasks (copy, then axpy for each
  further shard: autograd's leaf placement), the optimizer update runs there, and
  StarPU-MPI sends the updated tiles to the other ranks when they next read them.
"""
from __future__ import annotations

import numpy as np

from .distribution import SingleRank, world_size

__all__ = ["MODES", "check_fit", "place", "shards"]

MODES = ("single", "pipeline", "data")


def check_fit(mode: str, *, n_layer: int, batch: int, world: int | None = None) -> None:
    """Raise ValueError if ``mode`` cannot run on ``world`` ranks (default: the launcher's or
    session's world size).  Depends only on its arguments, so every rank raises the same
    message, before anything is submitted."""
    world = world_size() if world is None else int(world)
    if mode not in MODES:
        raise ValueError(f"--dist must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "pipeline" and world > n_layer:
        raise ValueError(f"--dist pipeline: {world} stages (one per rank) but the model has only {n_layer} "
                         f"layers; use at most {n_layer} ranks or more layers")
    if mode == "data" and batch % world:
        raise ValueError(f"--dist data: the batch of {batch} sequences cannot be split evenly over {world} "
                         f"ranks; use a batch that is a multiple of {world}")


def stage_of_block(i: int, n_layer: int, stages: int) -> int:
    return i * stages // n_layer


def plan(model, mode: str, world: int | None = None) -> tuple[dict[int, int], dict[int, int]]:
    """(parameter id -> owner rank, module id -> rank its forward runs on) for a GPT."""
    world = world_size() if world is None else int(world)
    params = list(model.named_parameters())
    owner: dict[int, int] = {}
    where: dict[int, int] = {}
    if mode == "single" or world == 1:
        return {id(p): 0 for _, p in params}, {}
    if mode == "pipeline":
        tr = model.transformer
        L = len(tr.h)
        first, last = 0, stage_of_block(L - 1, L, world)
        for mod in (tr.wte, tr.wpe, tr.drop):
            where[id(mod)] = first
        for i, block in enumerate(tr.h):
            where[id(block)] = stage_of_block(i, L, world)
        where[id(tr.ln_f)] = last
        where[id(model.lm_head)] = last
        mods = [tr.wte, tr.wpe, *tr.h, tr.ln_f]  # lm_head's weight is wte's: first stage
        for mod in mods:
            for p in mod.parameters():
                owner.setdefault(id(p), where[id(mod)])
        for _, p in params:
            owner.setdefault(id(p), first)
        return owner, where
    if mode == "data":
        load = np.zeros(world, dtype=np.int64)
        for _, p in sorted(params, key=lambda kv: -kv[1].size * kv[1].dtype.itemsize):  # stable: same on every rank
            r = int(np.argmin(load))
            owner[id(p)] = r
            load[r] += p.size * p.dtype.itemsize
        return owner, where
    raise ValueError(f"unknown distribution mode {mode!r}; expected one of {', '.join(MODES)}")


def place(model, mode: str) -> None:
    """Move ``model``'s parameters to their owners for ``mode`` and set each module's
    ``placement`` (collective under MPI: every rank calls it at the same point).  Call it
    before creating the optimizer (its state is created where the parameters live)."""
    from ._ffi import lib
    from .ops.autograd import _copy_to
    if mode not in MODES:
        raise ValueError(f"--dist must be one of {', '.join(MODES)}, got {mode!r}")
    owner, where = plan(model, mode)
    for mod in model.modules():
        rank = where.get(id(mod))
        object.__setattr__(mod, "placement", None if rank is None else SingleRank(rank))
    if not lib.tt_mpi_enabled():
        return  # one process: every tile is already local
    seen = set()
    for _, p in model.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        dist = SingleRank(owner[id(p)])
        if p.grad is not None:
            raise RuntimeError("place(): call it before the first backward (a parameter has a gradient)")
        want = dist.owners(p.grid)
        if np.array_equal(p.owners().reshape(-1), want):
            p.traits = p.traits.with_dist(dist)
            continue
        moved = _copy_to(p, want)  # one copy task per tile, on the new owner
        moved.traits = p.traits.with_dist(dist)
        p.traits, p._ptr, p._base = moved.traits, moved._ptr, moved


def shards(x: np.ndarray, y: np.ndarray, world: int | None = None):
    """Data mode: the batch (x, y) split into ``world`` equal shards along axis 0, as
    ``(rank, x_r, y_r)``."""
    world = world_size() if world is None else int(world)
    n = x.shape[0] // world
    return [(r, x[r * n:(r + 1) * n], y[r * n:(r + 1) * n]) for r in range(world)]
