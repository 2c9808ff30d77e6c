"""GNNPipe: a deep GCN (``tiletrain.geometric.nn.DeepGCN``) split into pipeline stages, with
chunks of nodes as micro-batches, run by a :class:`Schedule` through ``enforce.enforce`` (the
same order mechanisms, tags and priorities as ``ModelPipeline``).

Micro-batch j is the subgraph induced by chunk j of the nodes (:func:`node_chunks`): its
features, its edges with both ends in the chunk (edges between chunks are dropped, as
Cluster-GCN does; GNNPipe's historical embeddings for them are not implemented), its
training nodes and their classes.  The step's loss is the mean cross-entropy over the
training nodes of all chunks: micro-batch j contributes its sum divided by the step's count
of training nodes, so the micro-batches' losses add up to it and the gradients are those of
:func:`reference_step`, the plain loop in one process.

Stage v holds an even, contiguous split of the residual blocks (``parallel.blocks_of_stage``);
``lin_in`` goes with the first virtual stage, ``lin_out`` and the loss with the last.  A
stage's input is the previous stage's output detached (a leaf that requires grad), so each
action's backward stops at its stage and the input gradient crosses as data.  In one process
schedule rank r is a group of workers; under ``mpirun`` it is MPI rank r, with the model
placed first: ``place(model, gnn_plan(model, schedule))``."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from ..distribution import SingleRank, use, world_size
from ..functional import cross_entropy
from ..geometric.nn import DeepGCN
from ..geometric.utils import edge_index_array
from ..ops import scale
from ..ops.index import index_select
from ..parallel import Plan, blocks_of_stage, using
from ..runtime import context, mpi
from ..runtime.context import submission
from ..tensors import Tensor, from_numpy
from .enforce import MECHANISMS, enforce
from .model import worker_groups
from .schedule import Action, Schedule


@dataclass
class NodeChunk:
    """One micro-batch: ``nodes`` (global ids), ``x`` (len(nodes), F), ``edge_index`` (2, k) in
    local ids (the induced edges), ``train`` (local ids of its training nodes), ``y`` their
    classes."""
    nodes: np.ndarray
    x: np.ndarray
    edge_index: np.ndarray
    train: np.ndarray
    y: np.ndarray


def node_chunks(x, edge_index, y, train_mask, chunks: int) -> list[NodeChunk]:
    """The nodes split into ``chunks`` contiguous ranges (an even split), each with its induced
    subgraph; every chunk needs at least one training node."""
    x = np.asarray(x)
    N = x.shape[0]
    ei = edge_index_array(edge_index, "node_chunks", N)
    y, train_mask = np.asarray(y), np.asarray(train_mask, bool)
    if y.shape != (N,) or train_mask.shape != (N,):
        raise ValueError(f"node_chunks: y and train_mask must be ({N},), got {y.shape} and {train_mask.shape}")
    if not 1 <= int(chunks) <= N:
        raise ValueError(f"node_chunks: chunks must be in 1..{N} (the number of nodes), got {chunks}")
    bounds = [c * N // chunks for c in range(chunks + 1)]
    out = []
    for c in range(chunks):
        lo, hi = bounds[c], bounds[c + 1]
        keep = (ei[0] >= lo) & (ei[0] < hi) & (ei[1] >= lo) & (ei[1] < hi)
        train = np.flatnonzero(train_mask[lo:hi])
        if not len(train):
            raise ValueError(f"node_chunks: chunk {c} (nodes {lo}..{hi - 1}) has no training node")
        out.append(NodeChunk(np.arange(lo, hi), x[lo:hi], ei[:, keep] - lo, train, y[lo:hi][train]))
    return out


def _check_model(model) -> None:
    if not isinstance(model, DeepGCN):
        raise TypeError(f"GNNPipe: expected a tiletrain.geometric.nn.DeepGCN, got {type(model).__name__}")


def gnn_plan(model: DeepGCN, schedule: Schedule, world: int | None = None) -> Plan:
    """The ``parallel.Plan`` that places ``model``'s virtual stages on the schedule's ranks
    (``Schedule.placement()``); give it to ``parallel.place`` under MPI."""
    _check_model(model)
    world = world_size() if world is None else int(world)
    if world != schedule.ranks:
        raise ValueError(f"gnn_plan: schedule {schedule.name!r} has {schedule.ranks} ranks, the world {world}")
    first, blocks, last = model.parts()
    S, L = schedule.stages, len(blocks)
    pl = schedule.placement()
    where = {id(m): pl[0] for m in first}
    for v in range(S):
        for i in blocks_of_stage(v, L, S):
            where[id(blocks[i])] = pl[v]
    where.update({id(m): pl[S - 1] for m in last})
    owners = []
    for mod_name, mod in model.named_modules():
        if id(mod) in where:
            owners += [(f"{mod_name}.{n}", where[id(mod)]) for n, _ in mod.named_parameters()]
    modules = tuple((n, where[id(m)]) for n, m in model.named_modules() if id(m) in where)
    return Plan("pipeline", world, schedule.ranks, 1, tuple(owners), modules)


def _chunk_loss(logits: Tensor, chunk: NodeChunk, total: int) -> Tensor:
    """The chunk's share of the step's mean cross-entropy over all training nodes."""
    picked = index_select(logits, 0, chunk.train)                       # (n_train, classes)
    return scale(cross_entropy(picked, from_numpy(chunk.y.astype(np.int64)), reduction="sum"), 1.0 / total)


def reference_step(model: DeepGCN, chunks: list[NodeChunk]) -> list[Tensor]:
    """The plain loop in one process: each chunk's forward, loss and backward in turn
    (gradients accumulate into ``.grad``); returns the chunks' losses."""
    _check_model(model)
    total = sum(len(c.train) for c in chunks)
    losses = []
    for c in chunks:
        loss = _chunk_loss(model(from_numpy(c.x.astype(model.lin_in.weight.dtype)), c.edge_index), c, total)
        loss.backward()
        losses.append(loss)
    return losses


class GNNPipe:
    """Runs training steps of a DeepGCN with ``schedule`` (actions F and B: gpipe, 1f1b,
    interleaved-1f1b): ``step(chunks)`` submits the forwards and backwards of the
    micro-batches (one per chunk, ``schedule.microbatches`` of them) in the schedule's order
    and returns their losses (no waiting); gradients accumulate into ``.grad``."""

    def __init__(self, model: DeepGCN, schedule: Schedule, mechanism: str = "deps",
                 workers: list[list[int]] | None = None):
        _check_model(model)
        if mechanism not in MECHANISMS:
            raise ValueError(f"mechanism must be one of {', '.join(MECHANISMS)}, got {mechanism!r}")
        schedule.validate()
        kinds = {a.kind for a in schedule.flat()}
        if not kinds <= {"F", "B"} or schedule.chunks > 1:
            raise ValueError(f"GNNPipe runs schedules of F and B actions without sequence chunks (gpipe, 1f1b, "
                             f"interleaved-1f1b); schedule {schedule.name!r} has {''.join(sorted(kinds))} actions and "
                             f"{schedule.chunks} chunk(s)")
        first, blocks, last = model.parts()
        if schedule.stages > len(blocks):
            raise ValueError(f"schedule {schedule.name!r} has {schedule.stages} virtual stages but the model has "
                             f"{len(blocks)} blocks (at most one stage per block)")
        self.model, self.schedule, self.mechanism = model, schedule, mechanism
        S = schedule.stages
        self.stage_blocks = [[blocks[i] for i in blocks_of_stage(v, len(blocks), S)] for v in range(S)]
        self.rank_of_stage = schedule.placement()
        self.mpi = mpi.enabled()
        self.me = mpi.rank() if self.mpi else 0
        self.plan = None
        if self.mpi:
            self.plan = gnn_plan(model, schedule)
            staged = dict(self.plan.modules)
            if any(m.__dict__.get("placement") is None for n, m in model.named_modules() if n in staged):
                raise ValueError("GNNPipe: the model is not placed for the schedule: call "
                                 "tiletrain.parallel.place(model, gnn_plan(model, schedule)) before the optimizer")
            self.workers = [list(range(context.nworkers()))] * schedule.ranks
        else:
            self.workers = workers or worker_groups(schedule.ranks)
        n = schedule.ranks
        self.tokens = [from_numpy(np.zeros(1, np.float32), dist=SingleRank(q if self.mpi else 0)) for q in range(n)]
        self.dtype = model.lin_in.weight.dtype

    def _stage(self, v: int, h: Tensor, chunk: NodeChunk) -> Tensor:
        if v == 0:
            h = self.model.lin_in(h)
        for block in self.stage_blocks[v]:
            h = block(h, chunk.edge_index)
        return self.model.lin_out(h) if v == self.schedule.stages - 1 else h

    def step(self, chunks: list[NodeChunk]) -> list[Tensor]:
        sch = self.schedule
        if len(chunks) != sch.microbatches:
            raise ValueError(f"schedule {sch.name!r} has {sch.microbatches} micro-batches, got {len(chunks)} chunks")
        total = sum(len(c.train) for c in chunks)
        ins, outs, losses = {}, {}, [None] * sch.microbatches
        last = sch.stages - 1

        def run(a: Action) -> None:
            v, j = a.stage, a.microbatch
            if a.kind == "F":
                if v == 0:
                    x = from_numpy(chunks[j].x.astype(self.dtype))
                else:
                    x = outs[(v - 1, j)].detach().requires_grad_()
                    ins[(v, j)] = x
                y = self._stage(v, x, chunks[j])
                if v == last:
                    y = losses[j] = _chunk_loss(y, chunks[j], total)
                outs[(v, j)] = y
            else:
                y = outs.pop((v, j))
                y.backward(None if v == last else ins.pop((v + 1, j)).grad)

        def submit(a: Action, r: int, token) -> None:
            """Action a of rank r; under MPI the glue outside modules (the chunk's features,
            the loss) on rank r too, the order token only on this rank's own actions."""
            mine = token if (not self.mpi or r == self.me) else None
            with use(SingleRank(r)) if self.mpi else contextlib.nullcontext():
                if mine is None:
                    run(a)
                else:
                    with submission(order=mine._ptr):
                        run(a)

        tokens = [self.tokens[r] for r in range(sch.ranks)]
        with using(self.plan) if self.mpi else contextlib.nullcontext():
            enforce(sch, submit, self.mechanism, workers=self.workers, tokens=tokens)
        return losses


__all__ = ["GNNPipe", "NodeChunk", "gnn_plan", "node_chunks", "reference_step"]
