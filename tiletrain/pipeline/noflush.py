"""Pipelines without a flush on a model split into stage modules: pipelined backpropagation
(``pb``: a weight update after every micro-batch on every stage, Kosson et al. 2020) and
local learning (``local``: every stage learns from its own auxiliary loss, PPLL, Guo et al.
2024), next to the schedules with a flush (``gpipe``, ``1f1b``: gradients accumulate, one
update per stage after the step).

``StagePipeline(stages, schedule, optimizer, loss_fn, heads=None, weights="stored")`` runs a
schedule's actions as the stages' own work, each action on its rank's worker (affinity) -- under ``mpirun``
on MPI rank s, stage s built inside ``distribution.use(SingleRank(s))`` --, ordered as
``enforce`` orders it:

  F(s, j)  stage s on micro-batch j with the weight version the schedule says it reads
           (``Schedule.weight_versions``): the newest, or with Linear Weight Prediction the
           optimizer's prediction D updates ahead (``optimizer.predict()``); under ``local``
           also stage s's auxiliary head and loss (``tiletrain.nn.LocalHeads``)
  B(s, j)  its backward -- from the loss (last stage, or every stage under ``local``) or
           from the next stage's input gradient -- with the weights its forward read, then,
           without a flush, the stage's optimizer step (SC changes it) and a new version

Weights an in-flight backward needs (``weights=``):
  "stored"  every version a forward read is kept until its last backward (weight stashing:
            ``Schedule.kept_versions()`` copies on stage s)
  "ema"     only the current weights and a moving average u of the per-update change
            (u <- beta u + (1 - beta)(w_t - w_{t-1})); the backward reconstructs the version
            d updates old as w_t - d u and recomputes the stage's forward from its kept input
            with it (LayerPipe2's idea: O(|W|) instead of O(|W| x delay))
Stages whose delay is 0 (the last stage of ``pb``, every stage of ``local``) read the current
weights directly: no copies.  ``weight_memory()`` reports the peak number of weight copies
per stage the run held.  The optimizer is a factory ``optimizer(params, delay)`` (e.g.
``lambda ps, d: SGD(ps, lr=0.05, momentum=0.9, compensation="sc", delay=d)``): the schedule
supplies each stage's delay.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Sequence

import numpy as np

from ..ops.autograd import no_grad
from ..ops.basic import axpy_, copy, scale
from ..distribution import SingleRank, use
from ..runtime import context, mpi
from ..tensors import Tensor, from_numpy
from . import schedules
from .enforce import MECHANISMS, enforce
from .schedule import Action, Schedule

WEIGHTS = ("stored", "ema")


def _owner(module, name: str):
    parts = name.split(".")
    for part in parts[:-1]:
        module = module._modules[part]
    return module, parts[-1]


@contextlib.contextmanager
def _with_weights(module, tensors: Sequence[Tensor] | None):
    """Run ``module`` with ``tensors`` as its parameters (leaves of their own; None: its own)."""
    if tensors is None:
        yield list(module.parameters())
        return
    names = [n for n, _ in module.named_parameters()]
    saved = []
    leaves = []
    try:
        for name, t in zip(names, tensors):
            owner, attr = _owner(module, name)
            saved.append((owner, attr, owner._parameters[attr]))
            leaf = t.detach().requires_grad_()   # shares t's tiles: a leaf of its own
            owner._parameters[attr] = leaf
            object.__setattr__(owner, attr, leaf)
            leaves.append(leaf)
        yield leaves
    finally:
        for owner, attr, p in saved:
            owner._parameters[attr] = p
            object.__setattr__(owner, attr, p)


def _as_tensor(x, dtype) -> Tensor:
    return x if isinstance(x, Tensor) else from_numpy(np.ascontiguousarray(x, dtype=dtype))


class StagePipeline:
    """A model as a list of stage modules run with a schedule (``schedule``: a built-in name,
    built per step for the step's micro-batches, with ``queue`` for ``local``).
    ``loss_fn(logits, target)`` gives a micro-batch's mean loss; ``heads`` (a LocalHeads or
    a list of modules, one per stage but the last) is required by ``local`` and refused
    otherwise."""

    def __init__(self, stages: Sequence, schedule: str, optimizer: Callable, loss_fn: Callable, heads=None,
                 weights: str = "stored", mechanism: str = "deps", workers: list[list[int]] | None = None,
                 queue: int | None = None, ema_beta: float = 0.9, max_versions: int = 64):
        if schedule not in schedules.NAMES:
            raise ValueError(f"unknown schedule {schedule!r}; built in: {', '.join(schedules.NAMES)}")
        if not schedules.SCHEDULES[schedule][2]:
            raise ValueError(f"schedule {schedule!r} has no order; StagePipeline runs written schedules")
        if schedule in ("interleaved-1f1b", "zb-v", "dualpipe-v", "emergent-v", "seq1f1b"):
            raise NotImplementedError(f"StagePipeline runs one stage per rank and whole micro-batches; "
                                      f"{schedule!r} is not supported (ModelPipeline runs it on GPT and Llama)")
        if weights not in WEIGHTS:
            raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}, got {weights!r}")
        if mechanism not in MECHANISMS:
            raise ValueError(f"mechanism must be one of {', '.join(MECHANISMS)}, got {mechanism!r}")
        if not 0.0 <= ema_beta < 1.0:
            raise ValueError(f"ema_beta must be in [0, 1), got {ema_beta}")
        self.stages = list(stages)
        if not self.stages:
            raise ValueError("StagePipeline needs at least one stage")
        self.p = len(self.stages)
        self.name, self.mechanism, self.weights, self.queue, self.beta = schedule, mechanism, weights, queue, ema_beta
        self.local = schedule in schedules.LOCAL
        self.flush = schedule not in schedules.NO_FLUSH
        if self.local:
            if heads is None and len(stages) > 1:
                raise ValueError("schedule 'local' needs heads: one auxiliary classifier per stage boundary "
                                 "(tiletrain.nn.LocalHeads)")
            heads = list(heads or [])
            if len(heads) != self.p - 1:
                raise ValueError(f"schedule 'local' with {self.p} stages needs {self.p - 1} heads (one per stage "
                                 f"boundary), got {len(heads)}")
        elif heads is not None:
            raise ValueError(f"heads are for schedule 'local' (stage-local losses), not {schedule!r}")
        elif queue is not None:
            raise ValueError(f"queue= is for schedule 'local', not {schedule!r}")
        self.heads = heads
        self.loss_fn = loss_fn
        self.masters = [list(st.parameters()) for st in self.stages]
        if any(not ps for ps in self.masters):
            raise ValueError("every stage needs parameters")
        self.dtype = self.masters[0][0].dtype
        self.make_optimizer = optimizer
        # the stage's delay is set per step from the schedule (it depends on m)
        self.opts = [optimizer(ps + (list(heads[s].parameters()) if self.local and s < self.p - 1 else []), 0)
                     for s, ps in enumerate(self.masters)]
        self.lwp = [any(g.get("compensation") in ("lwp", "sc+lwp") for g in o.param_groups) for o in self.opts]
        if weights == "ema" and any(self.lwp):
            raise NotImplementedError("weights='ema' with Linear Weight Prediction: the reconstruction is of the "
                                      "stored weights, not of predicted ones; use weights='stored'")
        if not isinstance(max_versions, int) or isinstance(max_versions, bool) or max_versions < 1:
            raise ValueError(f"max_versions must be an int >= 1, got {max_versions!r}")
        self.workers, self.max_versions = workers, max_versions
        self.mpi = mpi.enabled()
        if self.mpi:
            if mpi.world_size() != self.p:
                raise ValueError(f"under mpirun StagePipeline runs one stage per rank: {self.p} stages on "
                                 f"{mpi.world_size()} ranks")
            for s_, ps in enumerate(self.masters + ([] if not heads else [])):
                for q in ps:
                    if set(np.asarray(q.owners()).ravel().tolist()) != {s_}:
                        raise ValueError(f"under mpirun stage {s_}'s parameters must live on rank {s_}: build it "
                                         f"inside tiletrain.distribution.use(SingleRank({s_}))")
        self.count = [0] * self.p               # updates so far, per stage
        self.versions: list[dict] = [dict() for _ in range(self.p)]   # stage -> {version: tensors}
        self.live: list[dict] = [dict() for _ in range(self.p)]       # stage -> {version: backwards to come}
        self.ema: list = [None] * self.p
        self.peak_copies = [1] * self.p         # the master included
        self.schedule: Schedule | None = None

    # ------------------------------------------------------------------ bookkeeping
    def _stage_bytes(self, s: int) -> int:
        return sum(int(np.prod(p.shape)) * np.dtype(p.dtype).itemsize for p in self.masters[s])

    def weight_memory(self) -> list[int]:
        """Per stage: the peak bytes of its weight copies held during the run (the current
        weights, stored versions or the moving average, LWP predictions)."""
        return [c * self._stage_bytes(s) for s, c in enumerate(self.peak_copies)]

    def _note_copies(self, s: int) -> None:
        n = 1 + sum(1 for k, t in self.versions[s].items() if t is not None) + (self.ema[s] is not None)
        self.peak_copies[s] = max(self.peak_copies[s], n)

    def _direct(self, s: int) -> bool:
        """Stage s reads and differentiates its current weights (no copy): with a flush, or
        delay of 0 (LWP predicts the weights themselves)."""
        return self.flush or self.delays[s] == 0

    def _new_version(self, s: int) -> None:
        """After an update (or at the start): the weights the next forwards of stage s read."""
        if self._direct(s) or self.weights == "ema":
            self.versions[s][self.count[s]] = None
        elif self.lwp[s]:
            self.versions[s][self.count[s]] = self.opts[s].predict()[:len(self.masters[s])]
        else:
            self.versions[s][self.count[s]] = [copy(p) for p in self.masters[s]]
        self._note_copies(s)

    # ------------------------------------------------------------------ a step
    def step(self, xs, ys) -> list:
        """Submit the schedule over the micro-batches ``xs[j]``, ``ys[j]`` (inputs and integer
        targets); returns the last stage's losses per micro-batch (Tensors, no waiting).  With
        a flush, one optimizer step per stage after the step (gradients of the mean loss)."""
        m = len(xs)
        if m < 1 or len(ys) != m:
            raise ValueError(f"step: {m} inputs and {len(ys)} targets; give one target per input, at least one")
        sch = schedules.get(self.name, self.p, m, queue=self.queue if self.local else None)
        self.schedule = sch
        self.delays = sch.delays()
        for s, o in enumerate(self.opts):
            for g in o.param_groups:
                g["delay"] = self.delays[s]
        kept = max(sch.kept_versions())
        if self.weights == "stored" and kept > self.max_versions:
            raise ValueError(f"schedule {self.name!r} with {self.p} stages and {m} micro-batches keeps up to {kept} "
                             f"weight versions per stage (a delay of {max(self.delays)} updates), over "
                             f"max_versions={self.max_versions}; use weights='ema' or fewer stages")
        self.xs = [np.asarray(x) for x in xs]
        self.ys = [np.asarray(y) for y in ys]
        self.outs: dict = {}
        self.ins: dict = {}
        self.graph: dict = {}
        self.read: dict = {}
        self.grad_in: dict = {}
        self.losses: list = [None] * m
        for s in range(self.p):
            self.versions[s] = {}
            self.live[s] = {}
            with self._on(s):
                self._new_version(s)
        if self.mpi:
            workers = [list(range(context.nworkers()))] * self.p
            tokens = [from_numpy(np.zeros(1, np.float32), dist=SingleRank(q)) for q in range(self.p)]
        else:
            workers = self.workers or [[r % context.nworkers()] for r in range(self.p)]
            tokens = [from_numpy(np.zeros(1, np.float32)) for _ in range(self.p)]
        enforce(sch, self._submit, self.mechanism, workers=workers, tokens=tokens)
        if self.flush:
            for s, o in enumerate(self.opts):
                with self._on(s):
                    o.step()
                    o.zero_grad()
        return self.losses

    def _on(self, s: int):
        """Under mpirun: new tensors of stage s's work live on rank s (its tasks run there)."""
        return use(SingleRank(s)) if self.mpi else contextlib.nullcontext()

    def _submit(self, a: Action, r: int, token) -> None:
        if self.mpi and r != mpi.rank():
            token = None            # the order token orders this rank's own actions only
        with self._on(r):
            if token is None:
                self._run(a)
                return
            with context.submission(order=token._ptr):
                self._run(a)

    def _run(self, a: Action) -> None:
        if a.kind == "F":
            self._forward(a.stage, a.microbatch)
        elif a.kind == "B":
            self._backward(a.stage, a.microbatch)
        else:
            raise NotImplementedError(f"action {a}: StagePipeline runs F and B actions (no split backward)")

    def _input(self, s: int, j: int):
        if s == 0:
            return _as_tensor(self.xs[j], self.dtype)
        x = self.outs.pop((s - 1, j)).detach()
        return x if self.local else x.requires_grad_()

    def _loss(self, s: int, j: int, y):
        target = self.ys[j]
        if s == self.p - 1:
            loss = self.loss_fn(y, target)
            self.losses[j] = loss
        else:
            loss = self.loss_fn(self.heads[s](y), target)
        m = self.schedule.microbatches
        return scale(loss, 1.0 / m) if self.flush and m > 1 else loss

    def _forward(self, s: int, j: int) -> None:
        x = self._input(s, j)
        k = self.count[s]
        self.read[(s, j)] = k
        self.live[s][k] = self.live[s].get(k, 0) + 1
        version = self.versions[s][k]
        if self.weights == "ema" and not self._direct(s):
            with no_grad():
                y = self.stages[s](x)
            self.ins[(s, j)] = x
        else:
            with _with_weights(self.stages[s], version) as leaves:
                y = self.stages[s](x)
            self.graph[(s, j)] = (x, y, leaves)
        if s < self.p - 1:
            self.outs[(s, j)] = y
        if s == self.p - 1 or self.local:
            if (s, j) in self.graph:   # the loss joins the graph the backward starts from
                x_, _, leaves = self.graph[(s, j)]
                self.graph[(s, j)] = (x_, self._loss(s, j, y), leaves)
            else:
                self.ins[(s, j)] = x

    def _backward(self, s: int, j: int) -> None:
        k = self.read.pop((s, j))
        if (s, j) in self.graph:
            x, y, leaves = self.graph.pop((s, j))
        else:   # ema: reconstruct the version d updates old and recompute the forward with it
            x = self.ins.pop((s, j))
            d = self.count[s] - k
            w = []
            for i, p in enumerate(self.masters[s]):
                t = copy(p)
                if self.ema[s] is not None and d:
                    axpy_(t, self.ema[s][i], alpha=-float(d))
                w.append(t)
            with _with_weights(self.stages[s], w) as leaves:
                y = self.stages[s](x)
            if s == self.p - 1 or self.local:
                y = self._loss(s, j, y)
        if not self.local and s < self.p - 1:
            y.backward(self.grad_in.pop((s + 1, j)))
        else:
            y.backward()
        if not self.local and s > 0:
            self.grad_in[(s, j)] = x.grad
        self.live[s][k] -= 1
        if not self.live[s][k]:
            del self.live[s][k]
            if k != self.count[s]:
                self.versions[s].pop(k, None)
        if not self.flush:
            self._update(s, leaves)

    def _update(self, s: int, leaves) -> None:
        direct = self._direct(s)
        old = [copy(p) for p in self.masters[s]] if self.weights == "ema" and not direct else None
        if not direct:
            for p, leaf in zip(self.masters[s], leaves):
                p.grad = leaf.grad
        self.opts[s].step()
        self.opts[s].zero_grad()
        if old is not None:     # u <- beta u + (1 - beta)(w_t - w_{t-1})
            if self.ema[s] is None:
                self.ema[s] = [scale(p, 0.0) for p in self.masters[s]]
            for u, p, o in zip(self.ema[s], self.masters[s], old):
                axpy_(u, p, alpha=1.0 - self.beta, beta=self.beta)
                axpy_(u, o, alpha=-(1.0 - self.beta))
        prev = self.count[s]
        self.count[s] += 1
        if prev not in self.live[s]:
            self.versions[s].pop(prev, None)
        self._new_version(s)

    # ------------------------------------------------------------------ evaluation
    def predict(self, x) -> np.ndarray:
        """The model's logits on ``x`` with the current weights (waits)."""
        with no_grad():
            with self._on(0):
                y = _as_tensor(x, self.dtype)
            for s, st in enumerate(self.stages):
                with self._on(s):
                    y = st(y)
            return y.numpy()


__all__ = ["StagePipeline", "WEIGHTS"]
