"""Pipelines without a flush: pipelined backpropagation (``pb``: a weight update after every
micro-batch on every stage, Kosson et al. 2020) and local learning (``local``: every stage
learns from its own auxiliary loss, PPLL, Guo et al. 2024), next to the schedules with a
flush (``gpipe``, ``1f1b``: gradients accumulate, one update per stage after the step).

The executor is :class:`~tiletrain.pipeline.model.ModelPipeline` (one way to run a schedule);
this module holds what it needs for them, enabled by its ``optimizer=`` (a factory
``optimizer(params, delay)``, e.g. ``lambda ps, d: SGD(ps, lr=0.05, momentum=0.9,
compensation="sc", delay=d)``: the schedule supplies each stage's delay,
``Schedule.delays()``):

  :class:`StageUpdates`  per stage an optimizer over the stage's parameters (and its local
      head's; ``grad_clip`` > 0 clips the stage's gradient norm before each update), and the
      weight versions in flight:
        F(s, j)  reads the version the schedule says (``Schedule.weight_versions``): the
                 newest, or with Linear Weight Prediction the optimizer's prediction D updates
                 ahead (``optimizer.predict()``)
        B(s, j)  differentiates the weights its forward read, then -- without a flush -- the
                 stage's optimizer step (SC changes it) and a new version; with a flush every
                 stage steps once after the step
      Weights an in-flight backward needs (``weights=``):
        "stored"  every version a forward read is kept until its last backward (weight
                  stashing: ``Schedule.kept_versions()`` copies on stage s)
        "ema"     only the current weights and a moving average u of the per-update change
                  (u <- beta u + (1 - beta)(w_t - w_{t-1}), n changes folded in); the backward
                  reconstructs the version d updates old as w_t - d u / (1 - beta^n) and
                  recomputes the stage's forward from its kept input with it (LayerPipe2's
                  idea: O(|W|) instead of O(|W| x delay); the division is Adam's bias
                  correction, which makes the reconstruction exact while the weights move by
                  the same change every update, from the first update on)
      Stages whose delay is 0 (the last stage of ``pb``, every stage of ``local``) read the
      current weights directly: no copies.  ``weight_memory()``: the peak bytes of weight
      copies per stage the run held.
  :class:`StageOptimizers`  the per-stage optimizers seen as one (``param_groups`` for the
      learning-rate schedule, ``state_dict``/``load_state_dict`` for checkpoints).
  :class:`StageModules`  the stage program of a model given as a list of stage modules and
      a ``loss_fn(logits, target)`` (a micro-batch's mean loss).
"""
from __future__ import annotations

import contextlib
from typing import Callable, Sequence

import numpy as np

from ..nn import Module
from ..ops import add
from ..ops.autograd import no_grad
from ..ops.basic import axpy_, copy, scale
from ..optim import clip_grad_norm_
from ..tensors import Tensor, from_numpy
from .schedule import Schedule

WEIGHTS = ("stored", "ema")


def stage_entries(stage_modules: list[list]) -> list[list[tuple]]:
    """Per stage, its parameters as (owning module, attribute, parameter), in model order; a
    parameter shared by several stages (a head tied to the embeddings) is the first stage's."""
    seen: set[int] = set()
    out = []
    for mods in stage_modules:
        entries = []
        for mod in mods:
            for sub in mod.modules():
                for attr, p in sub._parameters.items():
                    if p is not None and id(p) not in seen:
                        seen.add(id(p))
                        entries.append((sub, attr, p))
        out.append(entries)
    return out


@contextlib.contextmanager
def _with_weights(entries: list[tuple], tensors: Sequence[Tensor] | None):
    """Run with ``tensors`` as the parameters of ``entries`` (leaves of their own, sharing the
    tensors' tiles); None: the parameters themselves.  Yields what the forward reads."""
    if tensors is None:
        yield [p for _, _, p in entries]
        return
    leaves = []
    try:
        for (owner, attr, _), t in zip(entries, tensors):
            leaf = t.detach().requires_grad_()
            owner._parameters[attr] = leaf
            object.__setattr__(owner, attr, leaf)
            leaves.append(leaf)
        yield leaves
    finally:
        for owner, attr, p in entries:
            owner._parameters[attr] = p
            object.__setattr__(owner, attr, p)


class StageOptimizers:
    """The per-stage optimizers as one: ``param_groups`` (every stage's groups, the same
    dicts: setting ``lr`` reaches them all), ``step``/``zero_grad`` of all, and one
    ``state_dict`` numbering the parameters stage after stage (a checkpoint's layout)."""

    def __init__(self, opts: list):
        self.opts = list(opts)

    @property
    def param_groups(self) -> list[dict]:
        return [g for o in self.opts for g in o.param_groups]

    def step(self) -> None:
        for o in self.opts:
            o.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.opts:
            o.zero_grad(set_to_none)

    def _counts(self) -> list[int]:
        return [sum(len(g["params"]) for g in o.param_groups) for o in self.opts]

    def state_dict(self, copy: bool = False) -> dict:
        state, groups, base = {}, [], 0
        for o, n in zip(self.opts, self._counts()):
            sd = o.state_dict(copy=copy)
            state.update({base + int(i): st for i, st in sd["state"].items()})
            groups += [{**g, "params": [base + i for i in g["params"]]} for g in sd["param_groups"]]
            base += n
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, sd: dict) -> None:
        groups = sd.get("param_groups")
        want = sum(len(o.param_groups) for o in self.opts)
        if not isinstance(groups, list) or len(groups) != want:
            raise ValueError(f"optimizer state has {len(groups) if isinstance(groups, list) else 'no'} parameter "
                             f"groups, these per-stage optimizers have {want}")
        base = g0 = 0
        state = {int(k): v for k, v in sd.get("state", {}).items()}
        for o, n in zip(self.opts, self._counts()):
            k = len(o.param_groups)
            mine = [{**g, "params": [i - base for i in g["params"]]} for g in groups[g0:g0 + k]]
            o.load_state_dict({"state": {i - base: st for i, st in state.items() if base <= i < base + n},
                               "param_groups": mine})
            base, g0 = base + n, g0 + k


class StageUpdates:
    """The per-stage optimizers and weight versions of a pipeline run (see the module
    docstring).  ``entries``: per stage its parameters (``stage_entries``); ``heads``: per
    stage the parameters of its local head (trained by the stage's optimizer) or []; ``on(s)``:
    the context new tensors of stage s are made in (under mpirun: its rank)."""

    def __init__(self, entries: list[list[tuple]], heads: list[list], optimizer: Callable, weights: str = "stored",
                 ema_beta: float = 0.9, max_versions: int = 64, on: Callable | None = None, grad_clip: float = 0.0,
                 delays: Sequence[int] | None = None):
        if weights not in WEIGHTS:
            raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}, got {weights!r}")
        if not 0.0 <= ema_beta < 1.0:
            raise ValueError(f"ema_beta must be in [0, 1), got {ema_beta}")
        if not isinstance(max_versions, int) or isinstance(max_versions, bool) or max_versions < 1:
            raise ValueError(f"max_versions must be an int >= 1, got {max_versions!r}")
        if not grad_clip >= 0:
            raise ValueError(f"grad_clip must be >= 0 (0: no clipping), got {grad_clip}")
        if any(not e for e in entries):
            raise ValueError("every pipeline stage needs parameters (its optimizer updates them)")
        self.entries, self.weights, self.beta, self.max_versions = entries, weights, ema_beta, max_versions
        self.on = on or (lambda s: contextlib.nullcontext())
        self.S = len(entries)
        self.masters = [[p for _, _, p in e] for e in entries]
        self.trained = [self.masters[s] + list(heads[s]) for s in range(self.S)]   # what stage s's optimizer updates
        self.grad_clip = float(grad_clip)
        self.opts = []
        self.delays = list(delays) if delays is not None else [0] * self.S
        if len(self.delays) != self.S:
            raise ValueError(f"delays: one per stage ({self.S}), got {len(self.delays)}")
        for s in range(self.S):
            with self.on(s):   # the first schedule's delay (begin() sets each step's on every group)
                self.opts.append(optimizer(self.trained[s], self.delays[s]))
        self.optimizer = StageOptimizers(self.opts)
        self.lwp = [any(g.get("compensation") in ("lwp", "sc+lwp") for g in o.param_groups) for o in self.opts]
        if weights == "ema" and any(self.lwp):
            raise NotImplementedError("weights='ema' with Linear Weight Prediction: the reconstruction is of the "
                                      "stored weights, not of predicted ones; use weights='stored'")
        self.count = [0] * self.S                                   # updates so far, per stage
        self.versions: list[dict] = [dict() for _ in range(self.S)]  # stage -> {version: tensors or None}
        self.live: list[dict] = [dict() for _ in range(self.S)]      # stage -> {version: backwards to come}
        self.ema: list = [None] * self.S
        self.folds = [0] * self.S                                    # changes folded into ema, per stage
        self.peak_copies = [1] * self.S                              # the weights themselves included
        self.flush = True

    # ------------------------------------------------------------------ a step
    def begin(self, schedule: Schedule) -> None:
        """Before a step of ``schedule``: each stage's delay on its optimizer, the versions the
        first forwards read."""
        self.flush, self.delays = schedule.flush, schedule.delays()
        for s, o in enumerate(self.opts):
            for g in o.param_groups:     # every group of a stage: the stage's delay (LayerPipe2's
                g["delay"] = self.delays[s]   # grouped layers share their group's assignment)
        kept = max(schedule.kept_versions())
        if self.weights == "stored" and kept > self.max_versions:
            raise ValueError(f"schedule {schedule.name!r} with {schedule.stages} stages and {schedule.microbatches} "
                             f"micro-batches keeps up to {kept} weight versions per stage (a delay of "
                             f"{max(self.delays)} updates), over max_versions={self.max_versions}; use weights='ema' "
                             "or fewer stages")
        for s in range(self.S):
            self.versions[s], self.live[s] = {}, {}
            with self.on(s):
                self._new_version(s)

    def end(self) -> None:
        """After a step: with a flush, one optimizer step per stage (the step's gradients)."""
        if self.flush:
            for s in range(self.S):
                with self.on(s):
                    self._step(s)

    def _step(self, s: int) -> None:
        """Stage s's optimizer step (its gradient clipped to ``grad_clip`` first)."""
        if self.grad_clip > 0:
            clip_grad_norm_(self.trained[s], self.grad_clip)
        self.opts[s].step()
        self.opts[s].zero_grad()

    def direct(self, s: int) -> bool:
        """Stage s reads and differentiates its current weights (no copy): with a flush, or a
        delay of 0 (LWP predicts the weights themselves)."""
        return self.flush or self.delays[s] == 0

    def recomputes(self, s: int) -> bool:
        """Stage s's backward recomputes its forward with reconstructed weights (``ema``)."""
        return self.weights == "ema" and not self.direct(s)

    def read(self, s: int) -> int:
        """A forward of stage s: the version it reads (counted until its backward)."""
        k = self.count[s]
        self.live[s][k] = self.live[s].get(k, 0) + 1
        return k

    def weights_of(self, s: int, k: int):
        """The context a forward of stage s runs in, reading version k; yields the leaves."""
        return _with_weights(self.entries[s], self.versions[s][k])

    def rebuilt(self, s: int, k: int):
        """``ema``: version k reconstructed as w_t - d u / (1 - beta^n) (d = updates since, n =
        changes folded into u), as a context."""
        d, n = self.count[s] - k, self.folds[s]
        w = []
        for i, p in enumerate(self.masters[s]):
            t = copy(p)
            if self.ema[s] is not None and d and n:
                axpy_(t, self.ema[s][i], alpha=-float(d) / (1.0 - self.beta ** n))
            w.append(t)
        return _with_weights(self.entries[s], w)

    def done(self, s: int, k: int, leaves: list) -> None:
        """After a backward of stage s that read version k through ``leaves``: the version
        released after its last backward and, without a flush, the stage's update."""
        self.live[s][k] -= 1
        if not self.live[s][k]:
            del self.live[s][k]
            if k != self.count[s]:
                self.versions[s].pop(k, None)
        if not self.flush:
            self._update(s, leaves)

    # ------------------------------------------------------------------ bookkeeping
    def _stage_bytes(self, s: int) -> int:
        return sum(int(np.prod(p.shape)) * np.dtype(p.dtype).itemsize for p in self.masters[s])

    def weight_memory(self) -> list[int]:
        return [c * self._stage_bytes(s) for s, c in enumerate(self.peak_copies)]

    def _note_copies(self, s: int) -> None:
        n = 1 + sum(1 for t in self.versions[s].values() if t is not None) + (self.ema[s] is not None)
        self.peak_copies[s] = max(self.peak_copies[s], n)

    def _new_version(self, s: int) -> None:
        """After an update (or at the start): the weights the next forwards of stage s read."""
        if self.direct(s) or self.weights == "ema":
            self.versions[s][self.count[s]] = None
        elif self.lwp[s]:
            self.versions[s][self.count[s]] = self.opts[s].predict()[:len(self.masters[s])]
        else:
            self.versions[s][self.count[s]] = [copy(p) for p in self.masters[s]]
        self._note_copies(s)

    def _update(self, s: int, leaves: list) -> None:
        direct = self.direct(s)
        old = [copy(p) for p in self.masters[s]] if self.weights == "ema" and not direct else None
        if not direct:   # the gradient of the version read, onto the weights (plus what a tied use added)
            for p, leaf in zip(self.masters[s], leaves):
                p.grad = leaf.grad if p.grad is None or leaf.grad is None else add(p.grad, leaf.grad)
        self._step(s)
        if old is not None:     # u <- beta u + (1 - beta)(w_t - w_{t-1})
            if self.ema[s] is None:
                self.ema[s] = [scale(p, 0.0) for p in self.masters[s]]
            for u, p, o in zip(self.ema[s], self.masters[s], old):
                axpy_(u, p, alpha=1.0 - self.beta, beta=self.beta)
                axpy_(u, o, alpha=-(1.0 - self.beta))
            self.folds[s] += 1
        prev = self.count[s]
        self.count[s] += 1
        if prev not in self.live[s]:
            self.versions[s].pop(prev, None)
        self._new_version(s)


def _as_tensor(x, dtype) -> Tensor:
    return x if isinstance(x, Tensor) else from_numpy(np.ascontiguousarray(x, dtype=dtype))


class StageModules:
    """The stage program of a model given as stage modules: stage v is ``stages[v]`` (a list,
    tuple or ``Sequential`` of modules, one per stage), its input the previous stage's output
    (stage 0: ``xs[j]`` as a tensor of the parameters' dtype); the loss ``loss_fn(logits,
    target)``, a micro-batch's mean.  Under mpirun stage v must be built on rank v (inside
    ``distribution.use(SingleRank(v))``): no ``parallel.place``."""

    chunked = False     # no sequence chunks
    shares = False      # the loss is a micro-batch's mean (the executor scales it)
    needs_targets = True
    stride = 1

    def __init__(self, stages: Sequence[Module], loss_fn: Callable, S: int):
        self.units = list(stages)
        if not self.units or any(not isinstance(m, Module) for m in self.units):
            raise TypeError("stage modules: give a list (or Sequential) of tiletrain.nn Modules, one per stage")
        if loss_fn is None:
            raise ValueError("stage modules need loss_fn(logits, target), a micro-batch's mean loss")
        if S != len(self.units):
            raise ValueError(f"the schedule has {S} virtual stages but there are {len(self.units)} stage modules "
                             "(one per stage)")
        self.loss_fn = loss_fn
        params = [p for m in self.units for p in m.parameters()]
        if not params:
            raise ValueError("stage modules: the model has no parameters")
        self.dtype = params[0].dtype

    def modules(self, v: int) -> list:
        return [self.units[v]]

    def begin(self, xs) -> None:
        pass

    def input(self, x):
        return _as_tensor(x, self.dtype)

    def forward(self, v: int, h, x):
        return self.units[v](h)

    def loss(self, y, x, target, head=None):
        return self.loss_fn(y if head is None else head(y), target)

    def default_heads(self, schedule: Schedule, on):
        return None

    def predict(self, x, on) -> np.ndarray:
        """The model's logits on ``x`` with the current weights (waits)."""
        with no_grad():
            with on(0):
                y = self.input(x)
            for v, st in enumerate(self.units):
                with on(v):
                    y = st(y)
            return y.numpy(force=True)


__all__ = ["StageModules", "StageOptimizers", "StageUpdates", "WEIGHTS", "stage_entries"]
