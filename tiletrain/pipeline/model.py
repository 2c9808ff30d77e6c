"""Running a :class:`Schedule` on a model: every action is the model's own work.  This is the
one pipeline executor, ``ModelPipeline``: the executor (schedule checks, ``enforce``, order
tokens, worker groups, MPI and replica ranks, weight updates during the step) is the same for
every model; what a virtual stage's forward runs and its loss is the model's *stage program*,
chosen from the model (``stage_program``):

  a causal LM (GPT, Llama)  ``CausalLMStages`` (below): embeddings, blocks, head and loss;
                            sequence chunks, dropout seeds as the plain loop's
  a DeepGCN                 ``gnn.DeepGCNStages``: node chunks (``gnn.node_chunks``) as
                            micro-batches
  stage modules             ``noflush.StageModules``: a list of modules, one per stage, and a
                            ``loss_fn``

Schedules without a flush (``pb``) or with stage-local losses (``local``) update each
stage's weights during the step: ``optimizer=`` (tiletrain.pipeline.noflush.StageUpdates:
weight versions, LWP, SC).  For the causal LM:

  F(v, j)  virtual stage v's forward of micro-batch j: the embeddings (v = 0), v's blocks
           (an even split, ``parallel.blocks_of_stage``), and on the last stage the final
           norm, the head and the loss (scaled by 1/m, as gradient accumulation does)
  B(v, j)  its backward: from the loss, or from the next stage's input gradient
  I(v, j)  the same backward with the weight gradients deferred (``autograd.defer_grads``):
           only the input gradient (dX), what stage v-1 waits for
  W(v, j)  the deferred weight gradients (dW) of I(v, j), accumulated into ``.grad``

A stage's input is the previous stage's output detached (a leaf that requires grad), so
each action's backward stops at its stage boundary and the gradient crosses it as data.

Where stages run: in one process, rank r of the schedule is a group of workers
(``workers[r]``, StarPU's per-task worker mask); under ``mpirun`` rank r is MPI rank r (the
model placed with ``place(model, pipeline_plan(model, schedule))`` first: blocks, and so
activations and gradients, live on their virtual stage's rank).  With a world of D times the
schedule's ranks (``--dist pipeline+data``), D replicas each run the schedule on a shard of
every micro-batch: rank r of replica d is MPI rank d * ranks + r, and the replicas' partial
gradients add up on the parameters' owners. ``tiletrain train --dist
pipeline|pipeline+data`` steps through it (tiletrain.pipeline.training), and so do the
benchmarks. The order is enforced as ``enforce.enforce`` does (mechanisms submit / priority
/ deps); under ``deps`` every task an action runs on its rank also reads the rank's order
token, and a barrier task writes the token after the action
(``runtime.submission(order=...)``; csrc/submit.c: ``tt_order_set`` / ``tt_order_barrier``),
so a rank's actions start in list order. Under MPI the token is the local rank's: tasks of
an action that StarPU-MPI runs on another rank (a gradient reduced on its owner) are not
ordered.

Sequence chunks (seq1f1b, chunks k > 1): F(v, j, c) runs stage v on chunk c of micro-batch
j (positions c*T/k.. of the sequence, an even split along time).  Its attention reads the
keys and values of chunks < c of the same layer (``PrefixKV``, the key/value cache that the
blocks' forward takes; ``scaled_dot_product_attention`` with PyTorch's
``causal_lower_right`` mask over the prefix); chunk c' < c's keys and values enter chunk c's
graph as leaves of their own, so B(v, j, c) stops at its chunk and gathers their gradients
(dK, dV) there; B(v, j, c') then starts from its output's gradient and those (chunks run
their backwards in reverse order, the schedule's dependency).  The loss of a chunk is the
sum of its cross-entropies divided by the micro-batch's count of targets: the chunks' losses
add up to the micro-batch's mean.  With activation recomputation (recompute="block" or
"attention") a chunk's keys and values enter its graph when its backward recomputes them, and
the later chunks' dK/dV enter that recompute's backward (``PrefixKV``).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import functional as F
from ..distribution import SingleRank, use, world_size
from ..geometric.nn import DeepGCN
from ..nn import CausalLM, Dropout, LayerNorm, Linear, Sequential
from ..optim import AdamW
from ..ops import add, cat, scale
from ..ops.activations import dropout_positions
from ..ops.autograd import backward_from, defer_grads, no_grad
from ..ops.creation import full
from ..ops.softmax import cross_entropy_last
from ..parallel import (Plan, blocks_of_stage, current_plan, model_parts, plan, replica, shards, stage_modules,
                        using)
from ..runtime import context, mpi, wait
from ..runtime.context import submission
from ..tensors import Tensor, from_numpy
from ..tensors.creation import Generator, default_generator
from ..trace.records import recording
from ..utils.checkpoint import add_gradient, checkpoint, recomputing
from .enforce import MECHANISMS, ScheduleRun, enforce
from .gnn import DeepGCNStages, gcn_plan
from .noflush import StageModules, StageUpdates, stage_entries
from .schedule import PHASE, Action, Schedule


def pipeline_plan(model, schedule: Schedule, world: int | None = None) -> Plan:
    """The ``parallel.Plan`` that places ``model``'s virtual stages on the schedule's ranks
    (``Schedule.placement()``); give it to ``parallel.place`` under MPI.  A GPT or Llama:
    ``--dist pipeline`` on a world of ``schedule.ranks`` ranks, ``pipeline+data`` (world /
    ranks replicas, each running the schedule) on a multiple; a DeepGCN: one rank per
    schedule rank (``gnn.gcn_plan``).  Stage modules are placed by building stage v on its
    rank (no plan)."""
    world = world_size() if world is None else int(world)
    if isinstance(model, DeepGCN):
        return gcn_plan(model, schedule, world)
    pl = schedule.placement()
    stage_ranks = [pl[v] for v in range(schedule.stages)]
    if world > schedule.ranks:
        return plan(model, "pipeline+data", world, stages=schedule.ranks, stage_ranks=stage_ranks)
    return plan(model, "pipeline", world, stage_ranks=stage_ranks)


def worker_groups(ranks: int, nworkers: int | None = None) -> list[list[int]]:
    """The workers split into ``ranks`` contiguous groups (one process, worker groups as
    stages); needs at least one worker per group."""
    n = context.nworkers() if nworkers is None else int(nworkers)
    if n < ranks:
        raise ValueError(f"{ranks} pipeline ranks need at least {ranks} workers, the runtime has {n} "
                         f"(tiletrain.init(ncpu={ranks}) or more)")
    return [list(range(r * n // ranks, (r + 1) * n // ranks)) for r in range(ranks)]


def _default_workers(ranks: int) -> list[list[int]]:
    """``worker_groups`` when there is a worker per rank, else one worker each, round robin."""
    n = context.nworkers()
    return worker_groups(ranks, n) if n >= ranks else [[r % n] for r in range(ranks)]


def stage_program(model, schedule: Schedule, loss_fn=None):
    """The stage program of ``model`` (what F and B of a virtual stage run): a causal LM (GPT,
    Llama: ``CausalLMStages``), a DeepGCN (``gnn.DeepGCNStages``) or a list / Sequential of
    stage modules with ``loss_fn`` (``noflush.StageModules``)."""
    S = schedule.stages
    if isinstance(model, (list, tuple, Sequential)):
        return StageModules(list(model), loss_fn, S)
    if loss_fn is not None:
        raise ValueError("loss_fn is for a model given as stage modules; a GPT, Llama or DeepGCN has its own loss")
    if isinstance(model, CausalLM):
        return CausalLMStages(model, S)
    if isinstance(model, DeepGCN):
        return DeepGCNStages(model, S)
    raise TypeError(f"ModelPipeline runs a tiletrain.nn.CausalLM (GPT, Llama), a tiletrain.geometric.nn.DeepGCN or "
                    f"a list of stage modules with loss_fn; got {type(model).__name__}")


@dataclass
class StepResult:
    losses: list                  # per micro-batch (and, micro-batch-major, per replica): the unscaled loss Tensor
    order: list[int]              # submission order (indices into schedule.flat())


class ModelPipeline:
    """Runs training steps of ``model`` with ``schedule``: a GPT or Llama, a DeepGCN (node
    chunks as micro-batches) or a list of stage modules with ``loss_fn(logits, target)``.

    ``step(xs, ys)`` submits the schedule's actions on the m micro-batches (no waiting) and
    returns their losses.  Without ``optimizer`` gradients accumulate into ``.grad`` (the
    caller steps its optimizer); with ``optimizer`` (a factory ``optimizer(params, delay)``)
    every stage has its own over its parameters, stepped after each backward when the
    schedule has no flush (``pb``, ``local``: required there), else once after the step
    (tiletrain.pipeline.noflush: weight versions ``weights="stored"|"ema"``, LWP, SC;
    ``grad_clip``: each stage's gradient norm clipped before its update).
    ``heads`` (schedule ``local``): one module per stage boundary mapping a stage's output to
    the loss's input (``tiletrain.nn.LocalHeads``); a GPT or Llama gets default heads.
    ``workers``: per schedule rank, the worker ids it runs on (one process; default
    ``worker_groups``, or one worker each round robin when there are fewer workers than
    ranks); under MPI every rank uses its own workers, and the model must be placed for the
    schedule (``place(model, pipeline_plan(model, schedule))``; stage modules: stage v built
    on rank v): with D replicas (``pipeline+data``) each micro-batch is split into D shards,
    one per replica.
    """

    def __init__(self, model, schedule: Schedule, mechanism: str = "deps", workers: list[list[int]] | None = None,
                 *, optimizer: Callable | None = None, loss_fn: Callable | None = None, heads=None,
                 weights: str = "stored", ema_beta: float = 0.9, max_versions: int = 64, grad_clip: float = 0.0):
        if mechanism not in MECHANISMS:
            raise ValueError(f"mechanism must be one of {', '.join(MECHANISMS)}, got {mechanism!r}")
        schedule.validate()
        try:
            self.program = prog = stage_program(model, schedule, loss_fn)
        except ValueError as exc:
            raise ValueError(f"schedule {schedule.name!r}: {exc}") from None
        self.model, self.schedule, self.mechanism = model, schedule, mechanism
        S, name = schedule.stages, schedule.name
        if schedule.chunks > 1 and (not prog.chunked or schedule.local):
            raise ValueError(f"schedule {name!r} splits micro-batches into {schedule.chunks} sequence chunks: only a "
                             "causal LM's (GPT, Llama) with one loss are")
        updating = not schedule.flush or schedule.local
        if updating and optimizer is None:
            raise ValueError(f"schedule {name!r} has {'stage-local losses' if schedule.local else 'no flush'}: its "
                             "stages update their weights during the step; pass optimizer=, a factory "
                             "optimizer(params, delay) (e.g. lambda ps, d: SGD(ps, lr=0.05, momentum=0.9, delay=d))")
        if updating and {a.kind for a in schedule.flat()} & {"I", "W"}:
            raise NotImplementedError(f"schedule {name!r}: a split backward (I/W) without a flush (the update "
                                      "would follow W); write B actions")
        self.mpi = mpi.enabled()
        self.me = mpi.rank() if self.mpi else 0
        self.plan = None
        if self.mpi and isinstance(prog, StageModules):
            self._check_stage_ranks()
        elif self.mpi:
            self.plan = self._placed_plan()
        self.replicas = self.plan.replicas if self.plan is not None else 1
        if updating and self.replicas > 1:
            raise NotImplementedError(f"schedule {name!r} with {self.replicas} data-parallel replicas: per-stage "
                                      "updates during the step are for one replica (--dist pipeline)")
        if self.mpi:
            self.workers = [list(range(context.nworkers()))] * schedule.ranks
        else:
            self.workers = workers or _default_workers(schedule.ranks)
        if schedule.local:
            heads = prog.default_heads(schedule, self._on) if heads is None else heads
            if heads is None and S > 1:
                raise ValueError(f"schedule {name!r} has stage-local losses: it needs heads, one auxiliary "
                                 "classifier per stage boundary (tiletrain.nn.LocalHeads)")
            heads = list(heads or [])
            if len(heads) != S - 1:
                raise ValueError(f"schedule {name!r} with {S} stages needs {S - 1} heads (one per stage boundary), "
                                 f"got {len(heads)}")
        elif heads is not None:
            raise ValueError(f"heads are for schedule 'local' (stage-local losses), not {name!r}")
        self.heads = heads
        self.updates = None
        if optimizer is not None:
            entries = stage_entries([prog.modules(v) for v in range(S)])
            head_params = [list(heads[v].parameters()) if heads and v < S - 1 else [] for v in range(S)]
            self.updates = StageUpdates(entries, head_params, optimizer, weights, ema_beta, max_versions, self._on,
                                        grad_clip, schedule.delays())
        elif weights != "stored" or grad_clip:
            raise ValueError("weights= and grad_clip= are for pipelines with per-stage optimizers (optimizer=)")
        self.params = [p for v in range(S) for m in prog.modules(v) for p in m.parameters()]
        self.params = list({id(p): p for p in self.params}.values())
        # the order tokens (collective): under MPI one per rank of the job, each rank using its
        # own only; in one process one per schedule rank
        n = mpi.world_size() if self.mpi else schedule.ranks
        self.tokens = [from_numpy(np.zeros(1, np.float32), dist=SingleRank(q if self.mpi else 0)) for q in range(n)]

    @property
    def optimizer(self):
        """The per-stage optimizers as one (``noflush.StageOptimizers``), or None without
        ``optimizer=``."""
        return None if self.updates is None else self.updates.optimizer

    def weight_memory(self) -> list[int]:
        """Per stage: the peak bytes of its weight copies held so far (the current weights,
        stored versions or the moving average, LWP predictions)."""
        if self.updates is None:
            raise ValueError("weight_memory(): the pipeline holds no weight versions (no optimizer=)")
        return self.updates.weight_memory()

    def predict(self, x) -> np.ndarray:
        """The model's output on ``x`` with the current weights, stage after stage (waits)."""
        return self.program.predict(x, self._on)

    def _placed_plan(self) -> Plan:
        """Under MPI: the current plan, checked to place the model for the schedule."""
        sch, placed = self.schedule, current_plan()
        if placed.stages != sch.ranks or placed.world != sch.ranks * placed.replicas:
            raise ValueError(f"schedule {sch.name!r} has {sch.ranks} ranks; under MPI it needs one per pipeline "
                             f"stage of the placed layout ({placed.world} rank(s): {placed.stages} stage(s) x "
                             f"{placed.replicas} replica(s))")
        if placed.modules != pipeline_plan(self.model, sch, placed.world).modules:
            raise ValueError(f"the model is not placed for schedule {sch.name!r}: call "
                             "tiletrain.parallel.place(model, pipeline_plan(model, schedule)) before the optimizer")
        return placed

    def _check_stage_ranks(self) -> None:
        """Under MPI, stage modules: one rank per schedule rank, stage v's parameters on its rank."""
        sch = self.schedule
        if mpi.world_size() != sch.ranks:
            raise ValueError(f"under mpirun stage modules run one schedule rank per MPI rank: schedule {sch.name!r} "
                             f"has {sch.ranks} ranks, the world {mpi.world_size()}")
        pl = sch.placement()
        for v in range(sch.stages):
            for q in (p for m in self.program.modules(v) for p in m.parameters()):
                if set(np.asarray(q.owners()).ravel().tolist()) != {pl[v]}:
                    raise ValueError(f"under mpirun stage {v}'s parameters must live on rank {pl[v]}: build it "
                                     f"inside tiletrain.distribution.use(SingleRank({pl[v]}))")

    def rank(self, d: int, r: int) -> int:
        """The rank (MPI rank; in one process the worker group) of schedule rank r of replica d."""
        return self.plan.rank_of(d, r) if self.plan is not None else r

    def _on(self, v: int):
        """Virtual stage v's own work outside the schedule's actions (its optimizer's steps and
        weight versions, its heads): under mpirun its new tensors live on its rank (replica 0);
        in one process its tasks run on its rank's workers, as its actions' do (left
        unplaced, a policy such as dmdas put a flushing step's updates and pb's version copies
        on other devices, moving the stage's weights there and back)."""
        r = self.schedule.placement()[v]
        if self.mpi:
            return use(SingleRank(self.rank(0, r)))
        return submission(affinity=self.workers[r])

    def _schedule_for(self, schedule: Schedule | None) -> Schedule:
        """``step``'s schedule: the pipeline's, or one of the same layout for another count of
        micro-batches."""
        if schedule is None:
            return self.schedule
        schedule.validate()
        mine = self.schedule
        same = ("ranks", "stages", "flush", "local", "chunks")
        if any(getattr(schedule, k) != getattr(mine, k) for k in same) or schedule.placement() != mine.placement():
            raise ValueError(f"step(schedule={schedule.name!r}): a step's schedule must keep the pipeline's layout "
                             f"({', '.join(same)} and placement of {mine.name!r}); only the micro-batches may differ")
        return schedule

    def step(self, xs, ys=None, schedule: Schedule | None = None) -> StepResult:
        """Submit the actions of the micro-batches ``xs[j]``, ``ys[j]`` (a GPT's token ids and
        targets, (B, T) each; a DeepGCN's NodeChunks, no ``ys``; stage modules' inputs and
        targets) in the schedule's order -- ``schedule``: this step's, of the pipeline's layout
        for ``len(xs)`` micro-batches --; returns the losses (no waiting): per micro-batch,
        and with D replicas per micro-batch the D shards' (micro-batch-major)."""
        sch = self._schedule_for(schedule)
        m = sch.microbatches
        if ys is None and self.program.needs_targets:
            raise ValueError(f"step(xs, ys): {type(self.model).__name__} needs targets ys")
        if len(xs) != m or (ys is not None and len(ys) != m):
            raise ValueError(f"schedule {sch.name!r} has {m} micro-batches, got {len(xs)} inputs"
                             + ("" if ys is None else f" and {len(ys)} targets"))
        self.program.begin(xs)
        runs = self._replica_steps(sch, xs, [None] * m if ys is None else ys)
        here = 0 if self.plan is None else self.me // sch.ranks    # this rank's replica
        tokens = [self.tokens[self.rank(here, r)] for r in range(sch.ranks)]
        with using(self.plan) if self.plan is not None else contextlib.nullcontext():
            if self.updates is not None:
                self.updates.begin(sch)
            order = enforce(sch, lambda a, r, token: self._submit(runs, a, r, token), self.mechanism,
                            workers=self.workers, tokens=tokens, stride=self.program.stride)
            if self.updates is not None:
                self.updates.end()
        for run in runs:
            run.draws.done()
        return StepResult([run.losses[j] for j in range(m) for run in runs], order)

    def _replica_steps(self, sch: Schedule, xs, ys) -> list["_ReplicaStep"]:
        """The step's state per replica: its shard of each micro-batch and its dropout seeds
        (with D > 1, as parallel.shard_backward draws them: one seed per micro-batch and
        replica from the default generator, micro-batch-major)."""
        D, m = self.replicas, sch.microbatches
        if D == 1:
            return [_ReplicaStep(self, sch, 0, xs, ys, None)]
        parts = [shards(np.asarray(x), np.asarray(y), D) for x, y in zip(xs, ys)]
        seeds = [[default_generator.next_seed() for _ in range(D)] for _ in range(m)]
        return [_ReplicaStep(self, sch, d, [p[d][1] for p in parts], [p[d][2] for p in parts], [s[d] for s in seeds])
                for d in range(D)]

    def _submit(self, runs: list["_ReplicaStep"], a: Action, r: int, token) -> None:
        """Action ``a`` of schedule rank r, for every replica; under MPI the glue outside
        modules (the loss, its scaling) on the action's rank too, the order token only on
        this rank's own actions."""
        for run in runs:
            if not self.mpi:
                _ordered(run, a, token)
                continue
            q = self.rank(run.d, r)
            with replica(run.d) if self.replicas > 1 else contextlib.nullcontext(), use(SingleRank(q)):
                _ordered(run, a, token if q == self.me else None)


def _ordered(run: "_ReplicaStep", a: Action, token) -> None:
    """Run action a; with an order token, its tasks read the token and a barrier writes it after."""
    if token is None:
        run.run(a)
        return
    with submission(order=token._ptr):
        run.run(a)


class _ReplicaStep:
    """One replica's part of a step: its micro-batch shards (sequence chunks with K > 1), the
    actions' stage inputs and outputs, the weight versions the forwards read, deferred weight
    gradients, prefix keys and values, and the losses."""

    def __init__(self, pipe: ModelPipeline, sch: Schedule, d: int, xs, ys, seeds):
        self.pipe, self.prog, self.up, self.d = pipe, pipe.program, pipe.updates, d
        self.S, self.K, self.m, self.local = sch.stages, sch.chunks, sch.microbatches, sch.local
        # the losses' share of the step's mean: with a flush the gradients of the step's mean,
        # without one every micro-batch is an update of its own
        self.n = self.m * pipe.replicas if sch.flush else 1
        if self.K > 1:
            xs, ys, self.pos, self.counts = _sequence_chunks(xs, ys, self.K)
            self.T = self.pos[-1]
        self.xs, self.ys = xs, ys
        self.draws = _DropoutSeeds(pipe, self.m, seeds)   # each forward draws the plain loop's dropout seeds
        self.ins: dict = {}       # (v, j, c) -> the stage's input leaf (v > 0, not local)
        self.outs: dict = {}      # (v, j, c) -> the stage's output, for stage v + 1's forward
        self.back: dict = {}      # (v, j, c) -> what its backward starts from (the output, or a loss)
        self.kept: dict = {}      # (v, j, c) -> the stage's input, for a backward that recomputes ("ema")
        self.read: dict = {}      # (v, j, c) -> (the weight version its forward read, the tensors it read)
        self.dws: dict = {}       # (v, j, c) -> DeferredGrads of its I action
        self.kvs: dict = {}       # (v, j) -> PrefixKV of the micro-batch's chunks on stage v (K > 1)
        self.losses: list = [None] * self.m

    def run(self, a: Action) -> None:
        if a.kind == "F":
            self.forward(a)
        elif a.kind == "W":
            self.dws.pop(a.unit).run()
        else:
            self.backward(a)

    def _x(self, j: int, c: int):
        return self.xs[j] if self.K == 1 else self.xs[j][c]

    def _stage(self, v: int, h, j: int, c: int):
        """Stage v's forward of h (micro-batch j, chunk c), drawing the plain loop's dropout seeds."""
        x = self._x(j, c)
        with self.draws.at(v, j):
            if self.K == 1:
                return self.prog.forward(v, h, x)
            return self.prog.chunk_forward(v, h, x, self.kvs.setdefault((v, j), PrefixKV(self.K)).at(c),
                                           self.pos[c], self.T)

    def forward(self, a: Action) -> None:
        v, j, c = key = a.unit
        if v == 0:
            h = self.prog.input(self._x(j, c))
        else:
            h = self.outs.pop((v - 1, j, c)).detach()
            if not self.local:    # local: no gradient crosses the boundary
                h = self.ins[key] = h.requires_grad_()
        k = self.up.read(v) if self.up is not None else None
        if self.up is not None and self.up.recomputes(v):   # "ema": the backward recomputes with its weights
            with no_grad():
                y = self._stage(v, h, j, c)
            self.kept[key] = h
            self.read[key] = (k, None)
        else:
            with self.up.weights_of(v, k) if self.up is not None else contextlib.nullcontext([]) as leaves:
                y = self._stage(v, h, j, c)
            self.read[key] = (k, leaves)
            self.back[key] = self.loss(v, y, j, c) if v == self.S - 1 or self.local else y
        if v < self.S - 1:
            self.outs[key] = y

    def loss(self, v: int, y, j: int, c: int):
        """Stage v's output y of micro-batch j (chunk c) -> its loss, what the backward starts
        from: the last stage's (scaled by 1/n with a flush; the unscaled one, a chunk's share,
        kept in ``losses``), or under ``local`` stage v's own through its head."""
        head = None if v == self.S - 1 else self.pipe.heads[v]
        if self.K == 1:
            loss = self.prog.loss(y, self.xs[j], self.ys[j], head)
            if head is None:
                self.losses[j] = loss
            return loss if self.prog.shares or self.n == 1 else scale(loss, 1.0 / self.n)
        total = self.prog.loss(y, self.xs[j][c], self.ys[j][c], reduction="sum")   # the chunk's share of the mean
        count = self.counts[j]
        y = scale(total, 1.0 / (count * self.n) if count else float("nan"))
        with no_grad():
            share = scale(total.detach(), 1.0 / count if count else float("nan"))
            self.losses[j] = share if self.losses[j] is None else add(self.losses[j], share)
        return y

    def backward(self, a: Action) -> None:
        v, j, c = key = a.unit
        k, leaves = self.read.pop(key)
        if key in self.kept:   # "ema": version k reconstructed, the forward recomputed with it
            with self.up.rebuilt(v, k) as leaves:
                y = self._stage(v, self.kept.pop(key), j, c)
            if v == self.S - 1 or self.local:
                y = self.loss(v, y, j, c)
        else:
            y = self.back.pop(key)
        g = None if v == self.S - 1 or self.local else self.ins.pop((v + 1, j, c)).grad
        extra = self.kvs[(v, j)].gradients(c) if self.K > 1 else []
        if c == 0 and self.K > 1:
            del self.kvs[(v, j)]
        if a.kind == "B":
            _backward(y, g, extra)
        else:
            with defer_grads(self.pipe.params) as dw:
                _backward(y, g, extra)
            self.dws[key] = dw
        if self.up is not None:
            self.up.done(v, k, leaves)


class _DropoutSeeds:
    """The dropout seeds of a step as the plain loop draws them: micro-batch after micro-batch,
    each forward through the stages in model order, one seed per active dropout (p > 0,
    training) from the default generator -- or, with ``seeds`` (a replica's shards,
    parallel.shard_backward), from a generator seeded with ``seeds[j]`` for micro-batch j.
    ``at(v, j)`` sets the generator to its state before micro-batch j's stage-v draws (so a
    forward in any order, a sequence chunk's or a recomputation's, draws the plain loop's
    seeds: the masks follow layer, micro-batch and position) and checks afterwards that stage
    v drew what was counted; ``done()`` leaves the default generator where the plain loop
    would."""

    def __init__(self, pipe: ModelPipeline, m: int, seeds: list[int] | None = None):
        S = pipe.schedule.stages
        self.gen = gen = default_generator
        self.counts = [sum(_is_dropout(d) and d.training and d.p > 0 for mod in pipe.program.modules(v)
                           for d in mod.modules()) for v in range(S)]
        self.states: dict = {}   # (j, v) -> (the generator's state before stage v's draws, after)
        self.end = None          # the default generator's state after the step (no seeds)
        if sum(self.counts):
            for j in range(m):
                g = gen if seeds is None else Generator().manual_seed(seeds[j])
                for v, n in enumerate(self.counts):
                    before = g.get_state()
                    for _ in range(n):
                        g.next_seed()
                    self.states[(j, v)] = (before, g.get_state())
            self.end = gen.get_state() if seeds is None else None

    @contextlib.contextmanager
    def at(self, v: int, j: int):
        if not self.states:
            yield
            return
        before, after = self.states[(j, v)]
        saved = self.gen.get_state()
        self.gen.set_state(before)
        try:
            yield
            if self.gen.get_state() != after:
                raise RuntimeError(f"stage {v}'s forward drew other dropout seeds than its {self.counts[v]} "
                                   "active dropout modules (the plain loop's draws cannot be replayed)")
        finally:
            self.gen.set_state(saved)

    def done(self) -> None:
        if self.end is not None:
            self.gen.set_state(self.end)


def _is_dropout(module) -> bool:
    return isinstance(module, Dropout)


class CausalLMStages:
    """The stage program of a causal LM (GPT, Llama; the model contract, nn/causal_lm.py):
    virtual stage v runs the embeddings (v = 0: ``model.embed``), its blocks (an even split)
    and, on the last stage, ``model.head_loss``; with sequence chunks the chunk's positions
    and the prefix keys and values (``PrefixKV``).  Under ``local`` a stage boundary's
    default head is a LayerNorm (no bias) and a Linear to the vocabulary (no bias, torch's
    initialisation), fresh per boundary: the model's own final norm and head stay the last
    stage's, so no weight is shared between stages (docs/pipelines-noflush.md)."""

    chunked = True        # sequence chunks (seq1f1b)
    shares = False        # the loss is a micro-batch's mean (the executor scales it)
    needs_targets = True

    def __init__(self, model: CausalLM, S: int):
        first, blocks, last = model_parts(model)
        self.model, self.S = model, S
        self.stage = stage_modules(first, blocks, last, S)
        self.blocks = [[blocks[i] for i in blocks_of_stage(v, len(blocks), S)] for v in range(S)]
        # a backward recomputes up to one checkpoint per block, the k-th 2k+1 and 2k+2 below the
        # action's priority (utils.checkpoint): actions' priorities that far apart stay apart
        self.stride = 2 * max(len(b) for b in self.blocks) + 3

    def modules(self, v: int) -> list:
        return self.stage[v]

    def begin(self, xs) -> None:
        pass

    def input(self, x):
        return x      # token ids: stage 0's forward embeds them

    def forward(self, v: int, h, x, kv: "_ChunkKV | None" = None, pos: int = 0):
        """Stage v on h; with ``kv``, h is the sequence chunk at positions pos.."""
        model = self.model
        if v == 0:
            h = model.embed(model.token_ids(h, "idx"), pos)   # the model contract (CausalLM)
        recompute = model.config.recompute == "block"   # as the model's forward
        for i, block in enumerate(self.blocks[v]):
            args = () if kv is None else (kv, i, pos)
            h = checkpoint(block, h, *args) if recompute else block(h, *args)
        return h

    def chunk_forward(self, v: int, h, x, kv: "_ChunkKV", pos: int, T: int):
        with dropout_positions(pos, T, *self.model.tiling.rows(x.shape[0], T)):
            return self.forward(v, h, x, kv, pos)

    def loss(self, y, x, target, head=None, reduction: str = "mean"):
        if head is None:
            return self.model.head_loss(y, target, reduction=reduction)
        logits = head(y)
        return cross_entropy_last(logits, self.model.token_ids(target, "targets", logits.shape[:2]), reduction=reduction)

    def default_heads(self, schedule: Schedule, on) -> list:
        cfg, t, dtype = self.model.config, self.model.tiling, self.model.dtype
        rng = np.random.default_rng(0)
        heads = []
        for v in range(self.S - 1):
            with on(v):
                norm = LayerNorm(cfg.n_embd, bias=False, tile=t.width, dtype=dtype)
                heads.append(Sequential(norm, Linear(cfg.n_embd, cfg.vocab_size, bias=False, dtype=dtype,
                                                     tiles=(t.vocab, t.width), rng=rng)))
        return heads

    def predict(self, x, on) -> np.ndarray:
        with no_grad():
            return self.model(x).numpy(force=True)


class PrefixKV:
    """The keys and values of one micro-batch's sequence chunks on one stage, as the key/value
    cache that the blocks' forward takes (``at(c).attend(layer, q, k, v, pos)``).  Chunk c's
    queries attend to the keys of chunks < c (leaves of their own: chunk c's backward gathers
    their gradients there) and to their own, causally; ``gradients(c)`` is what chunk c's
    backward starts from besides its output: its keys and values with those gathered
    gradients.

    With activation recomputation the forward records no graph: chunk c's keys and values
    exist in a graph only when its backward recomputes the checkpointed block (or attention
    branch), which calls ``attend`` again; that call reads the same prefix leaves and hands
    the later chunks' gradients of its keys and values to the recompute's backward
    (``checkpoint.add_gradient``), and ``gradients(c)`` returns nothing."""

    def __init__(self, chunks: int):
        self.chunks = chunks
        self.leaves: dict = {}   # layer -> [(k, v) leaves of chunks 0, 1, ...]
        self.own: dict = {}      # (layer, chunk) -> (k, v) in the chunk's graph (read by later chunks)
        self.ran: set = set()    # (layer, chunk) whose forward ran
        self.later: dict = {}    # (layer, chunk) -> (dk, dv) for its recompute (recorded no graph)

    def at(self, chunk: int) -> "_ChunkKV":
        """The cache as chunk ``chunk``'s forward (and its recompute) sees it."""
        return _ChunkKV(self, chunk)

    def attend(self, c: int, layer: int, q, k, v, pos: int):
        prev = self.leaves.setdefault(layer, [])
        replay = (layer, c) in self.ran
        if replay and not recomputing():
            raise RuntimeError(f"sequence chunk {c} of layer {layer}: its forward ran twice")
        if not replay and len(prev) != c:
            raise RuntimeError(f"sequence chunk {c} of layer {layer} runs before chunk {len(prev)}'s forward")
        if c == 0:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            if any(p is None for p in prev[:c]):
                raise RuntimeError(f"sequence chunk {c} of layer {layer} recomputed after an earlier chunk's "
                                   "backward")
            keys, values = cat([lk for lk, _ in prev[:c]] + [k], 2), cat([lv for _, lv in prev[:c]] + [v], 2)
            y = F.scaled_dot_product_attention(q, keys, values, attn_mask=F.causal_lower_right(q.shape[2],
                                               keys.shape[2]), enable_gqa=True)
        if replay:   # the recompute in chunk c's backward: the later chunks' dK/dV enter here
            if c + 1 < self.chunks:
                if (layer, c) not in self.later:
                    raise RuntimeError(f"sequence chunk {c} of layer {layer} recomputed before the later chunks' "
                                       "backwards (gradients(c) first)")
                dk, dv = self.later.pop((layer, c))
                add_gradient(k, dk)
                add_gradient(v, dv)
            return y
        self.ran.add((layer, c))
        if c + 1 < self.chunks:   # later chunks read this chunk's keys and values
            if k.requires_grad:   # else a checkpoint's forward: its recompute brings them back
                self.own[(layer, c)] = (k, v)
            prev.append((k.detach().requires_grad_(), v.detach().requires_grad_()))
        return y

    def gradients(self, chunk: int) -> list:
        """(tensor, gradient) pairs: chunk ``chunk``'s keys and values with the gradients the
        later chunks' backwards gathered (after them); drops what the chunk held.  Under
        recomputation the pairs wait for the recompute instead (an empty list)."""
        out = []
        for layer, prev in self.leaves.items():
            if chunk + 1 >= self.chunks or chunk >= len(prev):
                continue
            lk, lv = prev[chunk]
            prev[chunk] = None
            if lk.grad is None or lv.grad is None:
                raise RuntimeError(f"sequence chunk {chunk}'s backward before the later chunks' backwards")
            own = self.own.pop((layer, chunk), None)
            if own is None:
                self.later[(layer, chunk)] = (lk.grad, lv.grad)
            else:
                out += [(own[0], lk.grad), (own[1], lv.grad)]
        return out


class _ChunkKV:
    """PrefixKV seen from one chunk (what a checkpoint keeps as its argument)."""

    recomputable = True   # a training cache: the blocks may recompute attention through it (recompute="attention")

    def __init__(self, kv: PrefixKV, chunk: int):
        self.kv, self.chunk = kv, chunk

    def attend(self, layer: int, q, k, v, pos: int):
        return self.kv.attend(self.chunk, layer, q, k, v, pos)


def _backward(y, g, extra: list) -> None:
    """y's backward from ``g`` (None: a scalar's 1), and from the gradients of ``extra``'s
    tensors (inside y's graph) in the same pass."""
    if not extra:
        y.backward(g)
        return
    if g is None:
        g = full(y.traits, 1.0, dtype=y.dtype)
    backward_from([y] + [t for t, _ in extra], [g] + [d for _, d in extra], 0)


def _sequence_chunks(xs, ys, k: int):
    """Micro-batches (B, T) split into k chunks along time (an even split): per micro-batch
    the id chunks and target chunks, the chunks' first positions followed by T, and the
    count of targets that are not ignored (-100)."""
    def arr(a):
        return np.asarray(a.numpy(force=True) if isinstance(a, Tensor) else a)
    xs, ys = [arr(x) for x in xs], [arr(y) for y in ys]
    for x in xs:
        if x.ndim != 2 or x.shape != xs[0].shape:
            raise ValueError(f"sequence chunks: the micro-batches must be (B, T) of one shape, got {x.shape} "
                             f"and {xs[0].shape}")
    T = xs[0].shape[1]
    if T < k:
        raise ValueError(f"sequence chunks: {k} chunks need at least {k} positions, the micro-batches have {T}")
    bounds = [c * T // k for c in range(k + 1)]

    def split(a):
        return [a[:, bounds[c]:bounds[c + 1]] for c in range(k)]
    return [split(x) for x in xs], [split(y) for y in ys], bounds, [int((y != -100).sum()) for y in ys]


def run_model(model, schedule: Schedule, xs, ys, mechanism: str = "deps", warmup: int = 1):
    """One process: ``warmup`` unrecorded steps, then one recorded step of ``schedule`` on
    ``model`` (gradients zeroed after each; a schedule that updates during the step, ``pb``
    or ``local``, with a per-stage AdamW, lr 1e-4, no compensation; needs a runtime with
    profile=True and at least one worker per rank).  Returns an ``enforce.ScheduleRun`` whose
    action times are the first start and last end of each action's tasks (µs, 0 = the first
    start)."""
    updating = not schedule.flush or schedule.local
    pp = ModelPipeline(model, schedule, mechanism,
                       optimizer=(lambda ps, d: AdamW(ps, lr=1e-4, delay=d)) if updating else None)

    def step():
        pp.step(xs, ys)
        for p in pp.params:
            p.grad = None
    for _ in range(warmup):
        step()
    wait()
    with recording() as rec:
        step()
    start, end = action_times(schedule, rec.trace)
    if np.isnan(start).any():
        raise RuntimeError("an action recorded no task (was the runtime started with profile=True?)")
    t0 = start.min()
    return ScheduleRun(schedule, mechanism, 0.0, start - t0, end - t0, rec.trace)


def action_times(schedule: Schedule, trace) -> tuple[np.ndarray, np.ndarray]:
    """Per action (``schedule.flat()`` order): the first start and last end (µs) of the
    recorded tasks tagged with its stage, micro-batch, phase and sequence chunk (the layer
    tag, as ``enforce`` sets it) (NaN when none ran here: under MPI, another rank's actions)."""
    t = trace.tasks
    flat = schedule.flat()
    start = np.full(len(flat), np.nan)
    end = np.full(len(flat), np.nan)
    for i, a in enumerate(flat):
        sel = ((t["stage"] == a.stage) & (t["microbatch"] == a.microbatch) & (t["phase"] == PHASE[a.kind])
               & (t["layer"] == a.chunk))
        if sel.any():
            start[i] = float(t["start"][sel].min())
            end[i] = float(t["end"][sel].max())
    return start, end


def rank_order_fraction(schedule: Schedule, start: np.ndarray, rank: int | None = None) -> float:
    """``order_fraction`` over every rank's list (or only ``rank``'s), skipping actions with
    no recorded start."""
    rows = range(schedule.ranks) if rank is None else [rank]
    pos = np.cumsum([0] + [len(r) for r in schedule.actions])
    good = total = 0
    for r in rows:
        st = start[pos[r]:pos[r + 1]]
        st = st[~np.isnan(st)]
        good += int((st[1:] >= st[:-1]).sum())
        total += max(0, len(st) - 1)
    return good / total if total else 1.0


__all__ = ["CausalLMStages", "ModelPipeline", "PrefixKV", "StepResult", "pipeline_plan", "stage_program",
           "worker_groups", "run_model", "action_times", "rank_order_fraction"]
