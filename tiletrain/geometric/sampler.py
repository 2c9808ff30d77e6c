"""GraphSAINT samplers as tasks (Zeng et al., "GraphSAINT: Graph Sampling Based Inductive
Learning Method", and the seed paper of issue 33): node, edge and random-walk samplers whose
subgraphs are drawn by C tasks (kernel ``saint_sample``, csrc/kernels/cpu/sampler.c) in the same
task graph as training.  Iterating submits the samples of the next ``in_flight`` steps before it
reads the current one, so StarPU draws subgraph k+1 on one worker while step k trains on the
others; only reading a sample waits, and only for that sample.

Each sample is keyed by (seed, step): the same seed gives the same subgraphs whatever the
scheduling.  The normalisation follows PyG's GraphSAINTSampler: a pre-sampling pass (until
``sample_coverage`` x N nodes were drawn) counts how often each node (C_v) and edge (C_e) is
drawn; ``node_norm`` = samples / C_v / N weighs the loss (an unbiased estimate of the mean
over all nodes), ``edge_norm`` = C_source / C_e (clamped to 1e4, 0.1 where C_e = 0) weighs the
aggregation."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from ..runtime.kernels import run_tasks
from ..tensors import Tensor, TensorTraits, from_numpy
from ..tensors.tensor import read_rows
from .data import Data
from .utils import edge_index_array

KINDS = {"node": 0, "edge": 1, "random_walk": 2}
_PRESAMPLE_STEP = 1 << 40  # pre-sampling draws use steps from here: never a training step's


@dataclass
class Subgraph:
    """One sample: ``node_idx`` (sorted global ids), ``edge_index`` (2, k) in local ids,
    ``edge_idx`` (the global edge ids), and the normalisation of its nodes and edges."""
    node_idx: np.ndarray
    edge_index: np.ndarray
    edge_idx: np.ndarray
    node_norm: np.ndarray | None = None
    edge_norm: np.ndarray | None = None

    @property
    def num_nodes(self) -> int:
        return len(self.node_idx)


class GraphSAINTSampler:
    """Subgraphs of ``data`` (a Data record or an edge_index with ``num_nodes``), ``num_steps``
    per pass.  kind "node": ``batch_size`` nodes drawn with probability proportional to their
    degree; "edge": ``batch_size`` edges drawn with GraphSAINT's probabilities (p_e proportional
    to 1/deg(u) + 1/deg(v), out-degrees), both ends kept; "random_walk":
    ``batch_size`` walks of ``walk_length`` steps from uniform roots.  The induced subgraph of
    the drawn nodes is the sample."""

    def __init__(self, data, batch_size: int, kind: str = "random_walk", walk_length: int = 2, num_steps: int = 1,
                 sample_coverage: int = 0, in_flight: int = 2, seed: int = 0, num_nodes: int | None = None):
        what = "GraphSAINTSampler"
        if kind not in KINDS:
            raise ValueError(f"{what}: kind must be one of {sorted(KINDS)}, got {kind!r}")
        if isinstance(data, Data):
            ei, N = data.edge_index, data.num_nodes
        else:
            if num_nodes is None:
                raise ValueError(f"{what}: give num_nodes with a bare edge_index")
            ei, N = edge_index_array(data, what, num_nodes), int(num_nodes)
        for name, v in (("batch_size", batch_size), ("num_steps", num_steps), ("in_flight", in_flight)):
            if int(v) < 1:
                raise ValueError(f"{what}: {name} must be >= 1, got {v}")
        if N < 1:
            raise ValueError(f"{what}: the graph has no nodes")
        self.kind, self.batch_size, self.walk_length = kind, int(batch_size), int(walk_length)
        self.num_steps, self.in_flight, self.seed = int(num_steps), int(in_flight), int(seed)
        self.N, self.E = N, ei.shape[1]
        perm = np.lexsort((ei[1], ei[0]))  # CSR by source
        self._pos_edge = perm.astype(np.int64)  # CSR position -> edge id
        self._src = ei[0]
        rowptr = np.concatenate([[0], np.cumsum(np.bincount(ei[0], minlength=N))]).astype(np.int64)
        # the sampler task reads the whole graph: one tile each
        self._rowptr = from_numpy(rowptr, (N + 1,))
        self._col = from_numpy(ei[1][perm] if self.E else np.zeros(1, np.int64), (max(self.E, 1),))
        per = self.walk_length + 1 if kind == "random_walk" else 2 if kind == "edge" else 1
        # room for the nodes and their induced edges; the edges a walk or a drawn edge took (and
        # their reverses) are always induced.  Grows when a sample does not fit.
        walked = 2 * self.batch_size * (self.walk_length if kind == "random_walk" else 1 if kind == "edge" else 0)
        self._cap = 2 + 4 * min(N, self.batch_size * per) + 3 * min(walked, self.E) + 64
        self._step, self._buf = 0, None
        self.node_norm = self.edge_norm = None
        if sample_coverage > 0:
            self.node_norm, self.edge_norm = self._compute_norm(sample_coverage)

    # -- tasks ------------------------------------------------------------------------------
    def submit(self, step: int) -> tuple[int, Tensor]:
        """Submit the sample of ``step`` (one task); returns what ``read`` takes."""
        out = Tensor(TensorTraits((self._cap,), (self._cap,)), np.int64)
        run_tasks("saint_sample", [self._rowptr, self._col, out], np.zeros((1, 3), np.int64),
                  n=self.N, e=self.E, kind=KINDS[self.kind], roots=self.batch_size, length=self.walk_length,
                  seed=self.seed, step=step, cap=self._cap)
        return step, out

    def read(self, pending: tuple[int, Tensor]) -> Subgraph:
        """Wait for a submitted sample and decode it (resubmitting with room when it did not
        fit: the same (seed, step) gives the same sample)."""
        step, out = pending
        a = self._read(out)
        m, k = int(a[0]), int(a[1])
        while k < 0:
            if k == -2:
                raise MemoryError(f"GraphSAINTSampler: the saint_sample task of step {step} ran out of host memory "
                                  f"(batch_size {self.batch_size}, {self.N} nodes, {self.E} edges)")
            # did not fit: twice the room (at most 2 + N + 3 E is ever needed)
            self._cap = min(max(2 * self._cap, 2 + m + 64), 2 + self.N + 3 * self.E)
            a = self._read(self.submit(step)[1])
            m, k = int(a[0]), int(a[1])
        nodes = a[2:2 + m].copy()
        sub = Subgraph(nodes, a[2 + m:2 + m + 2 * k].reshape(2, k).copy(), self._pos_edge[a[2 + m + 2 * k:2 + m + 3 * k]])
        if self.node_norm is not None:
            sub.node_norm, sub.edge_norm = self.node_norm[nodes], self.edge_norm[sub.edge_idx]
        return sub

    def _read(self, out: Tensor) -> np.ndarray:
        """The task's output in a host buffer kept from step to step (a fresh array of up to a
        few MiB per step cost its page faults on the submitting thread); decode copies out."""
        if self._buf is None or len(self._buf) != out.shape[0]:  # a sample submitted before the room grew
            self._buf = np.empty(out.shape[0], np.int64)
        return read_rows(out, 0, 1, self._buf)

    def sample(self, step: int) -> Subgraph:
        return self.read(self.submit(step))

    def __len__(self) -> int:
        return self.num_steps

    def __iter__(self):
        """num_steps subgraphs; the next in_flight samples are always submitted ahead (a
        later pass continues with new steps)."""
        base, queue, nxt = self._step, deque(), 0
        for _ in range(self.num_steps):
            while nxt < self.num_steps and len(queue) < self.in_flight:
                queue.append(self.submit(base + nxt))
                nxt += 1
            yield self.read(queue.popleft())
        self._step = base + self.num_steps

    # -- normalisation (PyG's GraphSAINTSampler._compute_norm) --------------------------------
    def _compute_norm(self, coverage: int):
        node_count, edge_count = np.zeros(self.N), np.zeros(self.E)
        num_samples = total = 0
        step = _PRESAMPLE_STEP
        while total < self.N * coverage:
            pending = [self.submit(step + i) for i in range(self.num_steps)]  # all in flight at once
            step += self.num_steps
            for p in pending:
                sub = self.read(p)
                node_count[sub.node_idx] += 1
                np.add.at(edge_count, sub.edge_idx, 1)
                total += sub.num_nodes
            num_samples += self.num_steps
        with np.errstate(divide="ignore", invalid="ignore"):
            edge_norm = np.clip(node_count[self._src] / edge_count, 0, 1e4)
        edge_norm[np.isnan(edge_norm)] = 0.1
        node_count[node_count == 0] = 0.1
        return num_samples / node_count / self.N, edge_norm


__all__ = ["GraphSAINTSampler", "KINDS", "Subgraph"]
