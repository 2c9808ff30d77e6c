"""Pipelines in miniature: p stages x m micro-batches of synthetic tasks that busy-wait or
sleep for set times, so that schedules can be studied on 2 cores.

A ``PipelinePlan`` is plain data: every task with its kind, stage, micro-batch, duration,
priority, worker and the data it reads and writes.  Its dependencies are *derived* from
those accesses (sequential consistency: a reader depends on the last writer, a writer on the
readers since the last write, or on the last writer) -- the same rule StarPU applies and the
trace records -- so nothing is scheduled by hand: ``run`` submits the tasks in a fixed
order (all forwards, then all backwards) with only stage affinity and priorities, and
``simulate`` replays the same DAG with a zero-overhead greedy priority scheduler.

Tasks and their data (one-element tiles; act[s][j] is stage s's input for micro-batch j):
  F(s,j)   reads act[s][j], w[s]          writes act[s+1][j]                       phase fwd
  B(s,j)   reads g(s,j), act[s][j]        writes grad[s][j], accumulates dw[s]      phase bwd
  Bx(s,j)  reads g(s,j), w[s]             writes grad[s][j]           (split)       phase bwd
  Bw(s,j)  reads g(s,j), act[s][j]        accumulates dw[s]           (split)       phase wgrad
  O(s)     reads dw[s]                    writes w[s]                 (optimizer)   phase opt
with g(s,j) = grad[s+1][j], or act[p][j] (the loss gradient) on the last stage.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..runtime import context
from ..runtime.kernels import spin
from ..tensors import from_numpy
from .priorities import PHASE, PRIORITIES, action_priority
from .simulate import Timeline, simulate


@dataclass(frozen=True)
class PlanTask:
    id: int
    kind: str            # F, B, Bx, Bw, O
    stage: int
    microbatch: int      # -1 for O
    usec: float
    priority: int
    worker: int
    a: str               # data names (see the module docstring); "dummy" = an unused operand
    b: str
    c: str               # written when wmask & 1
    d: str               # accumulated when wmask & 2
    wmask: int
    deps: tuple[int, ...] = ()

    @property
    def phase(self) -> str:
        return PHASE[self.kind]

    def __str__(self) -> str:
        mb = "" if self.microbatch < 0 else f",{self.microbatch}"
        return (f"{self.id:4d} {self.kind}({self.stage}{mb}) {self.usec:g}us prio {self.priority} "
                f"worker {self.worker} <- {list(self.deps)}")


def dataflow_deps(accesses: list[tuple[list[str], list[str], list[str]]]) -> list[tuple[int, ...]]:
    """Dependencies implied by (reads, writes, read-writes) per task, in submission order."""
    writer: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    out = []
    for i, (reads, writes, rws) in enumerate(accesses):
        deps: set[int] = set()
        for name in reads:
            if name in writer:
                deps.add(writer[name])
            readers.setdefault(name, []).append(i)
        for name in list(writes) + list(rws):
            rs = [r for r in readers.get(name, []) if r != i]
            if rs:
                deps.update(rs)
            elif name in writer and writer[name] != i:
                deps.add(writer[name])
            writer[name] = i
            readers[name] = []
        deps.discard(i)
        out.append(tuple(sorted(deps)))
    return out


@dataclass(frozen=True)
class PipelinePlan:
    p: int
    m: int
    F: float                 # µs per forward task
    B: float                 # µs per input-gradient task (the whole backward is B + W)
    W: float                 # µs per weight-gradient task
    split: bool              # backward as Bx + Bw tasks
    priorities: str          # a mode of the priority table (priorities.PRIORITIES): none | 1f1b | zb
    optimizer_us: float      # 0: no optimizer tasks
    nworkers: int
    tasks: tuple[PlanTask, ...] = field(default=(), repr=False)

    def __str__(self) -> str:
        head = (f"pipeline p={self.p} m={self.m} F={self.F:g}us B={self.B:g}us W={self.W:g}us "
                f"split={self.split} "
                f"priorities={self.priorities} workers={self.nworkers}")
        return "\n".join([head] + [str(t) for t in self.tasks])

    @property
    def deps(self) -> list[tuple[int, ...]]:
        return [t.deps for t in self.tasks]

    def simulate(self) -> Timeline:
        return simulate([t.usec for t in self.tasks], self.deps, self.nworkers,
                        allowed=[[t.worker] for t in self.tasks], priorities=[t.priority for t in self.tasks])


def build_plan(p: int, m: int, F: float, B: float, W: float = 0.0, split: bool = False,
               priorities: str = "none", optimizer_us: float = 0.0,
               nworkers: int | None = None) -> PipelinePlan:
    """The task list of one training step of a p-stage pipeline over m micro-batches."""
    for name, v in (("p", p), ("m", m)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    for name, v in (("F", F), ("B", B), ("W", W), ("optimizer_us", optimizer_us)):
        if not v >= 0:
            raise ValueError(f"{name} must be >= 0 microseconds, got {v!r}")
    if priorities not in PRIORITIES:
        raise ValueError(f"priorities must be one of {sorted(PRIORITIES)}, got {priorities!r}")
    nworkers = p if nworkers is None else nworkers
    if nworkers < 1:
        raise ValueError(f"nworkers must be >= 1, got {nworkers}")
    raw: list[dict] = []

    def add(kind, s, j, usec, a, b, c, d, wmask):
        raw.append(dict(kind=kind, stage=s, microbatch=j, usec=float(usec), priority=action_priority(kind, priorities),
                        worker=s % nworkers, a=a, b=b, c=c, d=d, wmask=wmask))

    def gin(s, j):
        return f"act{p}.{j}" if s == p - 1 else f"grad{s + 1}.{j}"

    for j in range(m):
        for s in range(p):
            add("F", s, j, F, f"act{s}.{j}", f"w{s}", f"act{s + 1}.{j}", "dummy", 1)
    for j in range(m):
        for s in reversed(range(p)):
            if split:
                add("Bx", s, j, B, gin(s, j), f"w{s}", f"grad{s}.{j}", "dummy", 1)
                add("Bw", s, j, W, gin(s, j), f"act{s}.{j}", "dummy", f"dw{s}", 2)
            else:
                add("B", s, j, B + W, gin(s, j), f"act{s}.{j}", f"grad{s}.{j}", f"dw{s}", 3)
    if optimizer_us > 0:
        for s in range(p):
            add("O", s, -1, optimizer_us, f"dw{s}", "dummy", f"w{s}", "dummy", 1)
    accesses = []
    for t in raw:
        reads = [t["a"], t["b"]] + ([] if t["wmask"] & 1 else [t["c"]]) + ([] if t["wmask"] & 2 else [t["d"]])
        accesses.append((reads, [t["c"]] if t["wmask"] & 1 else [], [t["d"]] if t["wmask"] & 2 else []))
    deps = dataflow_deps(accesses)
    tasks = tuple(PlanTask(id=i, deps=deps[i], **t) for i, t in enumerate(raw))
    return PipelinePlan(p, m, float(F), float(B), float(W), split, priorities, float(optimizer_us), nworkers,
                        tasks)


def data_names(plan: PipelinePlan) -> list[str]:
    names = {"dummy"}
    for t in plan.tasks:
        names.update((t.a, t.b, t.c, t.d))
    return sorted(names)


def submit(plan: PipelinePlan, sleep: bool = True, dtype=np.float64, data: dict | None = None,
           priorities: np.ndarray | None = None) -> dict:
    """Submit the plan's tasks in order (no waiting) with their tags, affinity and priority
    (``priorities`` overrides the plan's, e.g. bottom levels).  Returns the data tensors."""
    if context.nworkers() < plan.nworkers:
        raise ValueError(f"the plan places stages on {plan.nworkers} workers; the runtime has "
                         f"{context.nworkers()} "
                         f"(tiletrain.init(ncpu={plan.nworkers}))")
    if data is None:
        # host writes, not tasks: the step's trace holds the plan's tasks only
        data = {name: from_numpy(np.zeros(1, dtype=dtype)) for name in data_names(plan)}
    prios = [t.priority for t in plan.tasks] if priorities is None else [int(x) for x in priorities]
    if len(prios) != len(plan.tasks):
        raise ValueError(f"{len(prios)} priorities for {len(plan.tasks)} tasks")
    for pr in set(prios):
        context.check_priority(pr)
    for t, pr in zip(plan.tasks, prios):
        with context.submission(tags={"phase": t.phase, "layer": -1, "microbatch": t.microbatch, "stage": t.stage},
                                priority=pr, affinity=(t.worker,)):
            spin(data[t.a], data[t.b], data[t.c], data[t.d], int(round(t.usec)), sleep, t.wmask)
    return data


__all__ = ["PlanTask", "PipelinePlan", "build_plan", "dataflow_deps", "submit", "data_names"]
