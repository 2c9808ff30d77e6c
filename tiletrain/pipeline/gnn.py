"""A deep GCN (``tiletrain.geometric.nn.DeepGCN``) in a pipeline, the GNNPipe paper's idea:
chunks of nodes as micro-batches, the residual blocks split into stages, run by
:class:`~tiletrain.pipeline.model.ModelPipeline` (the one executor) with ``DeepGCNStages``,
its stage program, chosen from the model: ``ModelPipeline(model, schedule).step(chunks)``.

Micro-batch j is the subgraph induced by chunk j of the nodes (:func:`node_chunks`): its
features, its edges with both ends in the chunk (edges between chunks are dropped, as
Cluster-GCN does; the GNNPipe paper's historical embeddings for them are not implemented),
its training nodes and their classes.  The step's loss is the mean cross-entropy over the
training nodes of all chunks: micro-batch j contributes its sum divided by the step's count
of training nodes, so the micro-batches' losses add up to it and the gradients are those of
:func:`reference_step`, the plain loop in one process.

Stage v holds an even, contiguous split of the residual blocks (``parallel.blocks_of_stage``);
``lin_in`` goes with the first virtual stage, ``lin_out`` and the loss with the last.  In
one process schedule rank r is a group of workers; under ``mpirun`` it is MPI rank r, with
the model placed first: ``place(model, pipeline_plan(model, schedule))``."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..functional import cross_entropy
from ..geometric.nn import DeepGCN
from ..geometric.utils import edge_index_array
from ..ops import scale
from ..ops.autograd import no_grad
from ..ops.index import index_select
from ..parallel import Plan, blocks_of_stage, plan, stage_modules
from ..tensors import Tensor, from_numpy
from .schedule import Schedule


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
        raise TypeError(f"expected a tiletrain.geometric.nn.DeepGCN, got {type(model).__name__}")


def gcn_plan(model: DeepGCN, schedule: Schedule, world: int) -> Plan:
    """The ``parallel.Plan`` placing a DeepGCN's virtual stages on the schedule's ranks
    (``pipeline.model.pipeline_plan`` calls it: one plan function)."""
    _check_model(model)
    if world != schedule.ranks:
        raise ValueError(f"a DeepGCN pipeline runs one schedule rank per MPI rank: schedule {schedule.name!r} has "
                         f"{schedule.ranks} ranks, the world {world}")
    pl = schedule.placement()
    return plan(model, "pipeline", world, stage_ranks=[pl[v] for v in range(schedule.stages)], parts=model.parts())


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


class DeepGCNStages:
    """The stage program of a DeepGCN (``ModelPipeline`` picks it): micro-batches are
    :class:`NodeChunk` s (``step(chunks)``, no targets: they are in the chunks); the loss of a
    chunk is its share of the step's mean (``_chunk_loss``), as the plain loop's."""

    chunked = False     # no sequence chunks
    shares = True       # a chunk's loss is its share of the step's mean already
    needs_targets = False   # the classes are the chunks'
    stride = 1

    def __init__(self, model: DeepGCN, S: int):
        _check_model(model)
        self.model = model
        first, blocks, last = model.parts()
        self.stage = stage_modules(first, blocks, last, S)
        self.S = S
        self.blocks = [[blocks[i] for i in blocks_of_stage(v, len(blocks), S)] for v in range(S)]
        self.dtype = model.lin_in.weight.dtype
        self.total = 0

    def modules(self, v: int) -> list:
        return self.stage[v]

    def begin(self, chunks) -> None:
        for c in chunks:
            if not isinstance(c, NodeChunk):
                raise TypeError(f"a DeepGCN pipeline steps NodeChunks (node_chunks), got {type(c).__name__}")
        self.total = sum(len(c.train) for c in chunks)

    def input(self, chunk: NodeChunk) -> Tensor:
        return from_numpy(chunk.x.astype(self.dtype))

    def forward(self, v: int, h: Tensor, chunk: NodeChunk) -> Tensor:
        if v == 0:
            h = self.model.lin_in(h)
        for block in self.blocks[v]:
            h = block(h, chunk.edge_index)
        return self.model.lin_out(h) if v == self.S - 1 else h

    def loss(self, y: Tensor, chunk: NodeChunk, target, head=None) -> Tensor:
        return _chunk_loss(y if head is None else head(y), chunk, self.total)

    def default_heads(self, schedule: Schedule, on):
        return None

    def predict(self, chunk: NodeChunk, on) -> np.ndarray:
        with no_grad():
            return self.model(self.input(chunk), chunk.edge_index).numpy(force=True)


__all__ = ["DeepGCNStages", "NodeChunk", "gcn_plan", "node_chunks", "reference_step"]
