"""Pipelines without a flush in miniature: an MLP split into stages trained on a small
classification task with ``tiletrain.pipeline.ModelPipeline`` on stage modules and a
per-stage optimizer (what examples/async_pipelines.py and benchmarks/async_pipelines.py run).

Methods (one micro-batch = one SGD step of the same size in every method but ``1f1b``):
  sync        one micro-batch at a time through every stage, update, next (plain SGD: the
              reference; schedule gpipe with m = 1, idle (p-1)/p)
  pb          pipelined backpropagation: schedule pb, stage s's gradients 2(p-1-s) updates late
  pb-sc, pb-lwp, pb-sc-lwp   the same with Spike Compensation, Linear Weight Prediction, both
  local       schedule local: every stage learns from its own auxiliary head (LocalHeads)
  1f1b        1F1B with a flush: gradients of ``flush_every`` micro-batches accumulate, one
              update (a larger batch: throughput reference, not an accuracy one)

Data: scikit-learn's digits when scikit-learn is installed, else a synthetic digits-like task
drawn with NumPy (``synthetic_digits``: ten 8x8 prototypes, per-sample shifts and noise).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .. import functional as F
from ..nn import Linear, LocalHeads, ReLU, Sequential
from ..optim import SGD
from ..pipeline import schedules
from ..pipeline.model import ModelPipeline
from ..runtime import context, wait
from ..tensors import from_numpy
from ..trace.metrics import idle_fractions
from ..trace.records import recording

METHODS = ("sync", "pb", "pb-sc", "pb-lwp", "pb-sc-lwp", "local", "1f1b")
COMPENSATION = {"pb": None, "pb-sc": "sc", "pb-lwp": "lwp", "pb-sc-lwp": "sc+lwp"}


def synthetic_digits(n: int = 1797, seed: int = 0, noise: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
    """A digits-like task: 10 classes of 8x8 images (64 features in [0, 16]), each a smooth
    random prototype shifted by up to one pixel, scaled, with Gaussian noise."""
    rng = np.random.default_rng(1234)          # the prototypes are the task: fixed
    protos = rng.random((10, 10, 10))
    protos = (protos + np.roll(protos, 1, 1) + np.roll(protos, 1, 2)) / 3
    r = np.random.default_rng(seed)
    y = r.integers(0, 10, n)
    dx, dy = r.integers(0, 3, n), r.integers(0, 3, n)
    X = np.stack([protos[c, a:a + 8, b:b + 8] for c, a, b in zip(y, dx, dy)]).reshape(n, 64)
    X = X * r.uniform(0.8, 1.2, (n, 1)) + noise * r.normal(size=(n, 64)) * X.std()
    return np.clip(16 * (X - X.min()) / (X.max() - X.min()), 0, 16), y


def load_digits(seed: int = 0) -> tuple[np.ndarray, np.ndarray, str]:
    try:
        from sklearn.datasets import load_digits as sk
    except ImportError:
        X, y = synthetic_digits(seed=0)
        return X, y, "synthetic digits (NumPy; scikit-learn is not installed)"
    d = sk()
    return d.data.astype(np.float64), d.target, "scikit-learn digits"


def mlp_stages(stages: int, width: int = 64, classes: int = 10, seed: int = 0, dtype=np.float32) -> list:
    """An MLP 64 -> width x (stages-1) -> classes, one Linear (+ ReLU) per stage."""
    rng = np.random.default_rng(seed)
    out = []
    for s in range(stages):
        fin = 64 if s == 0 else width
        if s < stages - 1:
            out.append(Sequential(Linear(fin, width, dtype=dtype, rng=rng), ReLU()))
        else:
            out.append(Linear(fin, classes, dtype=dtype, rng=rng))
    return out


def _loss(logits, y):
    return F.cross_entropy(logits, from_numpy(np.asarray(y, dtype=np.int64)))


@dataclass
class Result:
    method: str
    accuracy: list = field(default_factory=list)     # per epoch, on the held-out split
    idle: float = float("nan")                       # measured from the trace, mean over stage workers
    samples_per_s: float = float("nan")
    weight_memory: list = field(default_factory=list)   # per stage, bytes (peak)
    data: str = ""


class _WarmupSGD(SGD):
    """SGD whose learning rate rises linearly over its first ``warmup`` updates (update k of
    this optimizer, 1-based: lr * min(1, k / warmup)); the same rule for every method, counted
    in the stage's own updates (one per micro-batch in every method but ``1f1b``)."""

    def __init__(self, params, warmup: int, **kw):
        super().__init__(params, **kw)
        self._warmup, self._updates = warmup, 0
        self._base = [g["lr"] for g in self.param_groups]

    def step(self):
        self._updates += 1
        for g, lr in zip(self.param_groups, self._base):
            g["lr"] = lr * min(1.0, self._updates / self._warmup)
        return super().step()


def run(method: str, stages: int = 4, epochs: int = 3, seed: int = 0, microbatch: int = 16, lr: float = 0.05,
        momentum: float = 0.9, weights: str = "stored", flush_every: int = 8, samples: int | None = None,
        width: int = 64, dtype=np.float32, log=None, warmup: int = 0) -> Result:
    """Train with ``method`` on a runtime that was started with profile=True and at least
    ``stages`` workers (stage s on worker s); evaluate after each epoch.  ``samples``: stop
    after that many training samples (a fixed budget) instead of whole epochs.  ``warmup``
    > 0: every stage's learning rate rises linearly over its first ``warmup`` updates (the
    same for every method; Kosson et al. warm up pipelined backpropagation's learning rate)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0 (updates; 0: none), got {warmup!r}")
    if context.nworkers() < stages:
        raise ValueError(f"{stages} stages need {stages} workers (tiletrain.init(ncpu={stages}))")
    X, y, what = load_digits()
    mu, sd = X.mean(0), X.std(0) + 1e-6
    X = ((X - mu) / sd).astype(dtype)
    order = np.random.default_rng(0).permutation(len(X))
    test, train = order[:len(X) // 5], order[len(X) // 5:]
    st = mlp_stages(stages, width, seed=seed, dtype=dtype)
    comp = COMPENSATION.get(method)
    name = {"sync": "gpipe", "local": "local", "1f1b": "1f1b"}.get(method, "pb")
    heads = LocalHeads([width] * (stages - 1), 10, dtype=dtype, rng=np.random.default_rng(seed + 1)) \
        if method == "local" else None

    def opt(ps, d):
        if warmup:
            return _WarmupSGD(ps, warmup, lr=lr, momentum=momentum, compensation=comp, delay=d)
        return SGD(ps, lr=lr, momentum=momentum, compensation=comp, delay=d)

    pp = ModelPipeline(st, schedules.get(name, stages, 1), optimizer=opt, loss_fn=_loss, heads=heads,
                       weights=weights if name == "pb" else "stored", workers=[[s] for s in range(stages)])

    def step(x, t):   # the schedule for this step's micro-batches
        pp.step(x, t, schedules.get(name, stages, len(x)))
    res = Result(method, data=what)
    rng = np.random.default_rng(seed)
    busy = span = 0.0
    idles = []
    seen = 0
    budget = samples if samples is not None else epochs * len(train)
    for epoch in range(epochs if samples is None else 10 ** 9):
        if seen >= budget:
            break
        perm = rng.permutation(train)[:budget - seen]
        n = len(perm) // microbatch * microbatch
        if n == 0:
            break
        xs = X[perm[:n]].reshape(-1, microbatch, X.shape[1])
        ys = y[perm[:n]].reshape(-1, microbatch)
        wait()
        t0 = time.perf_counter()
        with recording() as rec:
            if name == "gpipe":
                for j in range(len(xs)):
                    step(xs[j:j + 1], ys[j:j + 1])
            elif name == "1f1b":
                for j in range(0, len(xs), flush_every):
                    step(xs[j:j + flush_every], ys[j:j + flush_every])
            else:
                step(xs, ys)
        span += time.perf_counter() - t0
        seen += n
        idle = idle_fractions(rec.trace)
        idles.append(float(np.mean([idle.get(s, 1.0) for s in range(stages)])))
        busy += n
        acc = float((pp.predict(X[test]).argmax(1) == y[test]).mean())
        res.accuracy.append(acc)
        if log:
            log(f"epoch {epoch} accuracy {acc:.4f}")
    res.idle = float(np.mean(idles))
    res.samples_per_s = busy / span if span else float("nan")
    res.weight_memory = pp.weight_memory()
    return res


__all__ = ["METHODS", "Result", "run", "synthetic_digits", "load_digits", "mlp_stages"]
