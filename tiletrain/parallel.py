"""Training distributions over MPI ranks: ``single``, ``pipeline``, ``data`` and
``pipeline+data``.

They are owner maps (docs/architecture.md principle 7): the model code is the same in every mode, and
StarPU-MPI moves the tiles.  Chosen in one place: ``tiletrain train --dist MODE [--stages S]``
or ``TrainArgs(dist=MODE, stages=S)``; from a script, ``check_fit`` then ``place(model, MODE)``
once, before the optimizer is made (or ``pl = plan(model, MODE)``, ``print(pl)``,
``place(model, pl)``: the placement as a named, printable :class:`Plan` record; a script
stepping several models placed differently steps each inside ``with using(its_plan):``), and
for each batch::

    for d, xs, ys in shards(x, y):        # one shard per data-parallel replica
        with replica(d):
            loss = model.loss(xs, ys)
            tt.scale(loss, 1 / n_replicas()).backward()

(``shard_backward(model, x, y, k, micro_batches)`` is that loop for micro-batch k.)  That is
how ``single`` and ``data`` steps run; ``tiletrain train --dist pipeline|pipeline+data`` steps a
pipeline schedule instead (``--schedule``, 1F1B by default: tiletrain.pipeline.training, one
executor, tiletrain.pipeline.model.ModelPipeline, over the layout placed here).

Every mode is a grid of ``S`` pipeline stages x ``D`` data-parallel replicas (``S * D`` =
the world size); rank ``d * S + s`` runs stage ``s`` of replica ``d``:

- ``single``: S = D = 1 -- every parameter and activation on rank 0 (the default).
- ``pipeline``: S = world, D = 1.  GPT blocks are split evenly over the stages (block i on
  stage ``i * S // L``), the embeddings (and dropout) on the first stage, ``ln_f`` and the
  head on the last.  Each module's forward runs on its stage's rank
  (``Module.placement``, a :class:`Stage`), so its activations -- and, as backward
  re-enters the block each op was recorded in, its gradients -- live there too; only the
  activations crossing a stage boundary move.  The tied token embedding ``wte`` is also the
  LM head's weight: it lives on the first stage, so every step the last stage reads it and
  its head gradient is sent back to the first stage, where it is added to the embedding
  gradient.  Micro-batches (``--micro-batches``) overlap as the schedule orders them: stage 0
  starts the next micro-batch while the later stages work on the previous one.
- ``data``: S = 1, D = world.  Each batch is split into D equal shards along the batch axis;
  replica d's forward and backward run on rank d.  Parameters are spread whole over the
  ranks (largest first, to the rank with the fewest bytes): replica d's partial gradient
  of a parameter is reduced into the parameter's ``.grad`` on its owner by a chain of tile
  tasks (an axpy for each further replica's partial), the optimizer update runs there, and
  the updated tiles go to the other ranks.  ``shard_backward`` has each rank submit only
  its own replica's shard (the parameters sent ahead at its start); the explicit loop
  above walks every replica on every rank (the other replicas' tasks skipped in C, the
  parameters sent when a task reads them).
- ``pipeline+data``: S stages (``stages``, default 2) x D = world / S replicas.  Stage s's
  parameters are spread (as in data mode) over the D ranks that run stage s; each replica
  pipelines its shard through its S ranks.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace

import numpy as np

from . import distribution as _dist
from .distribution import SingleRank, world_size
from .nn.causal_lm import CausalLM
from .ops.autograd import _copy_to, _migrate, collect_leaf_grads
from .ops.basic import axpy_, copy, scale
from .runtime import mpi
from .runtime.context import submission
from .tensors import Tensor
from .tensors.creation import default_generator

__all__ = ["MODES", "Plan", "Stage", "blocks_of_stage", "check_fit", "model_parts", "current_plan", "layout",
           "microbatch", "n_replicas", "place", "plan", "replica", "shard_backward", "shards", "stage_modules", "using"]

MODES = ("single", "pipeline", "data", "pipeline+data")
DEFAULT_STAGES = 2  # pipeline+data without an explicit stage count
PIPELINED = ("pipeline", "pipeline+data")


def layout(mode: str, world: int | None = None, stages: int | None = None) -> tuple[int, int]:
    """(S stages, D replicas) of ``mode`` on ``world`` ranks (S * D == world, except in
    ``single`` mode, where everything is on rank 0, and in ``pipeline`` mode with ``stages``
    in one process: S groups of workers).  Raises ValueError for an unknown mode
    or a stage count that does not divide the world."""
    world = world_size() if world is None else int(world)
    if mode not in MODES:
        raise ValueError(f"--dist must be one of {', '.join(MODES)}, got {mode!r}")
    if stages is not None and mode not in PIPELINED:
        raise ValueError(f"--stages is for --dist pipeline+data, or pipeline in one process (--dist {mode} uses "
                         "no stages)")
    if mode == "single":
        return 1, 1
    if mode == "pipeline":
        if stages is None or int(stages) == world:
            return world, 1
        if world > 1:
            raise ValueError(f"--dist pipeline --stages {stages}: under mpirun the stages are the {world} ranks "
                             "(leave out --stages, or use --dist pipeline+data)")
        return int(stages), 1   # one process: the stages are groups of workers
    if mode == "data":
        return 1, world
    S = DEFAULT_STAGES if stages is None else int(stages)
    if S < 2 or world % S or world // S < 2:
        raise ValueError(f"--dist pipeline+data: {world} ranks cannot form {S} stages x at least 2 replicas "
                         f"(the world size must be a multiple of the stage count, with >= 2 stages and "
                         f">= 2 replicas; use --dist pipeline or --dist data otherwise)")
    return S, world // S


def check_fit(mode: str, *, n_layer: int, batch: int, world: int | None = None, stages: int | None = None) -> None:
    """Raise ValueError if ``mode`` cannot run on ``world`` ranks (default: the launcher's or
    session's world size).  Depends only on its arguments, so every rank raises the same
    message, before anything is submitted."""
    world = world_size() if world is None else int(world)
    S, D = layout(mode, world, stages)
    if S > n_layer:
        what = "(one per rank)" if mode == "pipeline" and stages is None else f"(--stages {S})"
        raise ValueError(f"--dist {mode}: {S} stages {what} but the model has only {n_layer} "
                         f"layers; use at most {n_layer} stages or more layers")
    if batch % D:
        raise ValueError(f"--dist {mode}: the batch of {batch} sequences cannot be split evenly over {D} "
                         f"{'ranks' if mode == 'data' else 'data-parallel replicas'}; use a batch that is a "
                         f"multiple of {D}")


def stage_of_block(i: int, n_layer: int, stages: int) -> int:
    return i * stages // n_layer


@dataclass(frozen=True)
class Plan:
    """Where a model runs: ``stages`` pipeline stages x ``replicas`` data-parallel replicas
    on ``world`` ranks (rank ``d * stages + s`` runs stage s of replica d), each parameter's
    owner rank and the pipeline stage each module's forward runs on, by name
    (``model.named_parameters()`` / ``named_modules()``).  Made by :func:`plan`, applied by
    ``place(model, plan)``; ``current_plan()`` is the placed one -- the one holder of the
    placement state: inside ``replica(d)`` it is the placed plan with ``replica`` d (the
    replica whose shard is being submitted; not part of the plan's value)."""
    mode: str = "single"
    world: int = 1
    stages: int = 1
    replicas: int = 1
    owners: tuple[tuple[str, int], ...] = ()      # (parameter name, owner rank)
    modules: tuple[tuple[str, int], ...] = ()     # (module name, stage), modules with a stage
    replica: int = field(default=0, compare=False, repr=False)   # the replica being submitted

    def owner(self, name: str) -> int:
        for n, r in self.owners:
            if n == name:
                return r
        raise KeyError(f"plan has no parameter {name!r}")

    def stage(self, name: str) -> int | None:
        """The stage module ``name``'s forward runs on (None: wherever it is called)."""
        return dict(self.modules).get(name)

    def rank_of(self, replica_index: int, stage: int) -> int:
        return replica_index * self.stages + stage

    @property
    def grid(self) -> tuple[int, int]:
        return (self.stages, self.replicas) if self.world > 1 else (1, 1)

    def __str__(self) -> str:
        lines = [f"plan {self.mode}: {self.world} rank(s), {self.stages} stage(s) x {self.replicas} "
                 "replica(s)"]
        if self.modules:
            lines.append("  modules (stage): " + ", ".join(f"{n or '<model>'}={s}" for n, s in self.modules))
        per_rank: dict[int, list[str]] = {}
        for n, r in self.owners:
            per_rank.setdefault(r, []).append(n)
        for r in sorted(per_rank):
            lines.append(f"  rank {r}: {len(per_rank[r])} parameter(s): {', '.join(per_rank[r])}")
        return "\n".join(lines)


_placed = Plan()    # the placement context: the last place()'s plan (current_plan()), or using()'s


def current_plan() -> Plan:
    """The current plan: the innermost ``using(plan)``'s, else the last ``place()``'s (a
    single-rank plan before either)."""
    return _placed


@contextlib.contextmanager
def using(pl: Plan):
    """Make ``pl`` the current plan inside the block, the one before it after: how one script
    steps several models placed differently (``place()`` makes each new plan current, so
    without it a model placed earlier would run under the last model's layout -- e.g. a
    data-mode model's shards all on rank 0 under a later pipeline plan)::

        pa, pb = place(model_a, "data"), place(model_b, "pipeline")
        with using(pa):
            for d, xs, ys in shards(x, y): ...
    """
    global _placed
    if not isinstance(pl, Plan):
        raise TypeError(f"using() takes a Plan (place()'s result or plan()'s), got {type(pl).__name__}")
    if pl.world != world_size():
        raise ValueError(f"using(): the plan is for {pl.world} rank(s), the world has {world_size()}")
    old, _placed = _placed, _replica_of(pl, 0)
    try:
        yield pl
    finally:
        _placed = old


def _replica_of(pl: Plan, d: int) -> Plan:
    return pl if pl.replica == d else replace(pl, replica=d)


def rank_of(replica_index: int, stage: int) -> int:
    """The rank that runs ``stage`` of replica ``replica_index`` in the placed layout."""
    return replica_index * _placed.grid[0] + stage


class Stage:
    """Where a module's work runs: pipeline stage ``stage`` of the replica being submitted
    (``Module.placement``; resolved by ``Module.__call__`` at each call)."""

    __slots__ = ("stage",)

    def __init__(self, stage: int):
        self.stage = int(stage)

    def resolve(self) -> SingleRank:
        return SingleRank(rank_of(_placed.replica, self.stage))

    def __repr__(self):
        return f"Stage({self.stage})"


def n_replicas() -> int:
    """D, the number of data-parallel replicas of the placed layout (1 before place())."""
    return _placed.grid[1]


@contextlib.contextmanager
def replica(d: int):
    """Submit replica ``d``'s shard: modules run on that replica's ranks, and tensors made
    outside any module (the batch, the loss) default to its first stage's rank."""
    global _placed
    if not 0 <= int(d) < n_replicas():
        raise ValueError(f"replica({d}): the placed layout has {n_replicas()} replica(s)")
    old, old_default = _placed, _dist._default
    _placed = _replica_of(old, int(d))
    here = SingleRank(rank_of(_placed.replica, 0))
    _dist._default = here
    try:
        if _placed.grid[0] == 1:  # the replica is one rank: everything of its shard lives there
            with _dist.use(here):
                yield
        else:
            yield
    finally:
        _placed, _dist._default = old, old_default


def microbatch(k: int):
    """Submit micro-batch ``k`` inside: its tasks are tagged ``microbatch=k`` (the order of a
    pipelined step is its schedule's: tiletrain.pipeline.training)."""
    return submission(tags={"microbatch": int(k)})


def model_parts(model: CausalLM) -> tuple[tuple, tuple, tuple]:
    """(modules before the blocks, the blocks, modules after) of a model: the units a
    pipeline places (the embeddings first, the final norm and head last; CausalLM.parts)."""
    if not isinstance(model, CausalLM):
        raise TypeError(f"pipeline placement: expected a tiletrain.nn.CausalLM (a GPT, a Llama, ...), got "
                        f"{type(model).__name__}")
    return model.parts()


def blocks_of_stage(v: int, n_layer: int, n_stages: int) -> range:
    """The blocks of (virtual) stage ``v`` of ``n_stages``: an even, contiguous split."""
    return range(-(-v * n_layer // n_stages), -(-(v + 1) * n_layer // n_stages))


def stage_modules(first, blocks, last, S: int) -> list[list]:
    """Per virtual stage of ``S``, its modules in model order: an even, contiguous split of
    ``blocks`` (``blocks_of_stage``), ``first`` with stage 0 and ``last`` with stage S - 1 (a
    model's ``parts()``: the units a pipeline places)."""
    if not 1 <= S <= len(blocks):
        raise ValueError(f"{S} virtual stages but the model has {len(blocks)} blocks (at most one stage per block)")
    return [(list(first) if v == 0 else []) + [blocks[i] for i in blocks_of_stage(v, len(blocks), S)]
            + (list(last) if v == S - 1 else []) for v in range(S)]


def plan(model, mode: str, world: int | None = None, stages: int | None = None,
         stage_ranks=None, parts: tuple | None = None) -> Plan:
    """The :class:`Plan` of a GPT or Llama for ``mode`` on ``world`` ranks (default: the world
    size); of another model given its ``parts`` (the (first, blocks, last) modules a pipeline
    places, as ``CausalLM.parts`` gives them: a DeepGCN's ``parts()``).  ``stage_ranks`` (pipelined modes only): virtual stage v (an even split of the
    blocks into ``len(stage_ranks)`` chunks) runs on pipeline stage ``stage_ranks[v]`` (in
    ``pipeline`` mode the rank itself) -- a pipeline schedule's placement
    (``Schedule.placement()``: looped for interleaved 1F1B, a V for ZB-V); the embeddings go
    with the first virtual stage, the final norm and head with the last."""
    world = world_size() if world is None else int(world)
    S, D = layout(mode, world, stages)
    params = list(model.named_parameters())
    first_mods, blocks, last_mods = model_parts(model) if parts is None else parts
    L = len(blocks)
    if stage_ranks is not None:
        stage_ranks = [int(r) for r in stage_ranks]
        if mode not in PIPELINED:
            raise ValueError(f"plan(): stage_ranks is for the modes {' and '.join(PIPELINED)}, not {mode!r}")
        if not stage_ranks or len(stage_ranks) > L or any(r < 0 or (world > 1 and r >= S) for r in stage_ranks):
            raise ValueError(f"plan(): stage_ranks {stage_ranks} must name 1..{L} virtual stages (one per "
                             f"chunk of the {L} blocks), each on a stage in 0..{S - 1}")
        rank_of_block = [stage_ranks[v] for v in range(len(stage_ranks))
                         for _ in blocks_of_stage(v, L, len(stage_ranks))]
    else:
        rank_of_block = [stage_of_block(i, L, S) for i in range(L)]
    if world == 1 or mode == "single":
        return Plan(mode, world, S, D, tuple((n, 0) for n, _ in params), ())
    first = 0 if stage_ranks is None else stage_ranks[0]
    last = rank_of_block[-1]
    where: dict[int, int] = {}
    for mod in first_mods:
        where[id(mod)] = first
    for i, block in enumerate(blocks):
        where[id(block)] = rank_of_block[i]
    for mod in last_mods:
        where[id(mod)] = last
    stage_of: dict[int, int] = {}
    for mod in (*first_mods, *blocks, *last_mods):  # a tied lm_head weight is wte's: first stage
        for p in mod.parameters():
            stage_of.setdefault(id(p), where[id(mod)])
    # each stage's parameters spread whole over the D ranks running it: largest first, to
    # the rank holding the fewest bytes (stable order: the same on every rank)
    load = np.zeros((S, D), dtype=np.int64)
    owner: dict[int, int] = {}
    for _, p in sorted(params, key=lambda kv: -kv[1].numel() * kv[1].dtype.itemsize):
        if id(p) in owner:
            continue
        s = stage_of.get(id(p), first)
        d = int(np.argmin(load[s]))
        owner[id(p)] = d * S + s
        load[s, d] += p.numel() * p.dtype.itemsize
    modules = tuple((n, where[id(m)]) for n, m in model.named_modules() if id(m) in where)
    return Plan(mode, world, S, D, tuple((n, owner[id(p)]) for n, p in params), modules)


def place(model, mode: "str | Plan", stages: int | None = None) -> Plan:
    """Move ``model``'s parameters to their owners and set each module's ``placement`` for
    ``mode`` (a mode name, or a :class:`Plan` made by :func:`plan` for this model and world);
    the plan becomes the current one (collective under MPI: every rank calls it at the same
    point).  Call it before creating the optimizer (its state is created where the
    parameters live).  Returns the plan."""
    global _placed
    world = world_size()
    if isinstance(mode, Plan):
        if stages is not None:
            raise ValueError("place(model, plan): the plan already fixes the stages")
        pl = mode
        if pl.world != world:
            raise ValueError(f"place(): the plan is for {pl.world} rank(s), the world has {world}")
    else:
        pl = plan(model, mode, world, stages)
    owner = dict(pl.owners)
    where = dict(pl.modules)
    params = list(model.named_parameters())
    if set(owner) != {n for n, _ in params}:
        raise ValueError("place(): the plan was made for another model (its parameter names differ)")
    _placed = _replica_of(pl, 0)
    for name, mod in model.named_modules():
        stage = where.get(name) if pl.stages > 1 and pl.world > 1 else None  # one stage: replica() places it
        object.__setattr__(mod, "placement", None if stage is None else Stage(stage))
    if not mpi.enabled():
        return pl  # one process: every tile is already local
    for name, p in params:
        dist = SingleRank(owner[name])
        want = dist.owners(p.grid)
        if np.array_equal(p.owners().reshape(-1), want):  # already there (placed again: serving a trained model)
            p.traits = p.traits.with_dist(dist)
            continue
        if p.grad is not None:
            raise RuntimeError("place(): call it before the first backward (a parameter to move has a gradient)")
        moved = _copy_to(p, want)  # one copy task per tile, on the new owner
        moved.traits = p.traits.with_dist(dist)
        p.traits, p._ptr, p._base = moved.traits, moved._ptr, moved
    return pl


# Data mode under MPI: each rank submits its own replica's shard only (see shard_backward);
# False: every rank walks every replica (the tasks of the others skipped in C).
OWN_REPLICA_ONLY = True


def shard_backward(model, x: np.ndarray, y: np.ndarray, k: int = 0, micro_batches: int = 1) -> list:
    """Micro-batch ``k`` of ``micro_batches`` of a step: (x, y) split into one shard per
    replica of the current plan (:func:`shards`), each shard's loss and its backward
    submitted there, scaled by 1 / (micro_batches * replicas) so that the gradients add up
    to the batch mean's -- the loop of this module's docstring, with every shard's forward
    submitted before the first backward.  Returns the shards' losses (unscaled Tensors;
    nothing is read).  With several replicas, each replica's dropout draws from a
    generator of its own, seeded from the default one (the same masks whichever rank
    submits it).

    Under MPI in ``data`` mode (with StarPU-MPI's communication cache on), rank d submits
    replica d's shard only: the parameters (and tensor buffers) are first sent to every
    rank that lacks them, each replica's partial gradients stay on its rank, and then
    every rank submits their reduction on each parameter's owner -- the other replicas'
    partials named by tag (their graphs are the same as this rank's: tags from a stream per
    replica, ``tt_mpi_set_stream``).  A shard whose tasks need anything else from another
    rank stops with an error naming the task; ``OWN_REPLICA_ONLY = False`` makes every rank
    walk every replica instead (the other replicas' tasks skipped in C; the same results,
    at 5-8 ms more of each rank's submitting thread per step of a 4x256 GPT on 2 ranks)."""
    n = int(micro_batches) * n_replicas()
    parts = shards(x, y)
    seeds = [None] if len(parts) == 1 else [default_generator.next_seed() for _ in parts]
    if _own_replica_only():
        return _own_shard_backward(model, parts, seeds, k, n)
    losses = []
    for (d, xs, ys), seed in zip(parts, seeds):   # every forward first: see the docstring
        with replica(d), microbatch(k), _seeded(seed):
            losses.append(model.loss(xs, ys))
    for d, loss in enumerate(losses):
        with replica(d), microbatch(k):
            (loss if n == 1 else scale(loss, 1.0 / n)).backward()
    return losses


@contextlib.contextmanager
def _seeded(seed):
    """Inside, the default generator draws from a generator seeded with ``seed`` (None: as is)."""
    if seed is None:
        yield
        return
    g = default_generator
    old = g.get_state()
    g.manual_seed(seed)
    try:
        yield
    finally:
        g.set_state(old)


def _own_replica_only() -> bool:
    pl = _placed
    return OWN_REPLICA_ONLY and pl.world > 1 and pl.stages == 1 and pl.replicas > 1 and mpi.cache_enabled()


def _shadow(t, delta: int, owner: int):
    """The tensor of replica (this one + delta), on rank ``owner``, that corresponds to this
    replica's ``t`` (nothing registered until a task of this rank needs it)."""
    ptr = mpi.shadow(t._ptr, delta, owner)
    return Tensor._of_ptr(ptr, t.traits.with_dist(SingleRank(owner)), t.dtype, t._session)


def _own_shard_backward(model, parts, seeds, k: int, n: int) -> list:
    D, me = len(parts), mpi.rank()
    params = list({id(p): p for p in model.parameters()}.values())
    ranks = [rank_of(e, 0) for e in range(D)]
    for t in params + [b for _, b in model.named_buffers() if isinstance(b, Tensor)]:
        mpi.push(t._ptr, ranks)   # what the shard reads of other ranks
    d = ranks.index(me)
    _, xs, ys = parts[d]
    old = mpi.set_stream(d + 1)
    try:
        with replica(d), microbatch(k), _seeded(seeds[d]), collect_leaf_grads() as grads:
            loss = model.loss(xs, ys)
            (loss if n == 1 else scale(loss, 1.0 / n)).backward()
            # what the other ranks name by tag must carry this replica's stream's tags (a
            # tensor made before the shard, written in it, has tags of the global counter)
            for i, (leaf, g) in grads.items():
                if not mpi.in_stream(g._ptr, d + 1):
                    grads[i] = (leaf, copy(g))
            if not mpi.in_stream(loss._ptr, d + 1):
                loss = copy(loss)
    finally:
        mpi.set_stream(old)
    known = {id(p) for p in params}
    if any(i not in known for i in grads):
        raise RuntimeError("shard_backward: a tensor that is not one of the model's parameters received a "
                           "gradient; set tiletrain.parallel.OWN_REPLICA_ONLY = False to walk every replica")

    def piece(e, g):
        return g if e == d else _shadow(g, e - d, ranks[e])

    for p in params:   # the same order on every rank: the reduction is collective
        if id(p) not in grads:
            continue
        mine = grads[id(p)][1]
        order = range(D)
        if p.grad is None:   # the owner's own partial becomes .grad (data mode: params whole on a rank)
            dist = p.traits.dist
            e = ranks.index(dist.rank) if isinstance(dist, SingleRank) and dist.rank in ranks else None
            if e is None:
                p.grad = _migrate(piece(0, mine), p.owners().reshape(-1))
                order = range(1, D)
            else:
                p.grad = piece(e, mine)
                order = [f for f in range(D) if f != e]
        for e in order:
            axpy_(p.grad, piece(e, mine), 1.0, 1.0)
    return [piece(e, loss) for e in range(D)]


def shards(x: np.ndarray, y: np.ndarray, n: int | None = None):
    """The batch (x, y) split into ``n`` equal shards along axis 0 (default: the placed
    layout's replica count), as ``(replica, x_d, y_d)``."""
    n = n_replicas() if n is None else int(n)
    if x.shape[0] % n:
        raise ValueError(f"shards(): a batch of {x.shape[0]} cannot be split evenly into {n} shards")
    k = x.shape[0] // n
    return [(d, x[d * k:(d + 1) * k], y[d * k:(d + 1) * k]) for d in range(n)]
