"""Running a written schedule on the runtime: enforce its order with what StarPU offers, and
measure how much of the order each mechanism achieved.

Mechanisms (cumulative, weakest first):
  submit     the actions are submitted in a topological order of the schedule (by start time
             in its unit-time simulation), each on its rank's worker (affinity); the policy
             picks among ready tasks as it likes
  priority   + each action's priority is minus its position in its rank's list, so a
             priority policy (prio, tt-cp, dm*) runs a rank's ready actions in list order
  deps       + an ordering dependency between a rank's consecutive actions: every action
             also accesses its rank's token handle read-write (StarPU's sequential
             consistency chains them in submission order): the order is exact
The ``emergent`` schedules have no order: submitted forward first, then backward, with the
phase priorities (the priority table's "zb" mode, priorities.PRIORITIES: backward and input
gradient before forward, weight gradients after both, as ``emergent-zb`` splits them) and
affinity; dataflow decides.

``enforce(schedule, submit_action, mechanism)`` is the runtime-independent part (what a
real-model pipeline uses); ``run_synthetic`` runs a schedule on sleeping synthetic tasks
(csrc/expand_pipeline.c: tt_spin) and returns a ``ScheduleRun``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..runtime import context, wait
from ..runtime.kernels import spin
from ..tensors import from_numpy
from ..trace.metrics import compact
from ..trace.records import recording
from . import formulas
from .schedule import PHASE, Action, Schedule, peak_activations
from .schedules import NAMES, get

MECHANISMS = ("submit", "priority", "deps")


def submission_order(schedule: Schedule) -> list[int]:
    """Indices into ``schedule.flat()`` in a valid submission (topological) order."""
    flat = schedule.flat()
    if not schedule.ordered:   # every forward (micro-batch, stage order), then every backward
        return sorted(range(len(flat)), key=lambda i: (flat[i].kind != "F", flat[i].microbatch, flat[i].chunk,
                                                       flat[i].stage if flat[i].kind == "F" else -flat[i].stage,
                                                       "BIW".find(flat[i].kind)))
    sim = schedule.simulate()
    return sorted(range(len(flat)), key=lambda i: (sim.start[i], sim.rank[i], i))


def action_priorities(schedule: Schedule, mechanism: str) -> list[int]:
    """Per action (flat order): the priority each mechanism gives it."""
    if schedule.ordered and mechanism == "submit":
        return [0] * len(schedule.flat())
    return schedule.priorities()


def _check_mechanism(mechanism: str) -> None:
    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism must be one of {', '.join(MECHANISMS)}, got {mechanism!r}")


def enforce(schedule: Schedule, submit_action: Callable[[Action, int, object], None], mechanism: str = "deps",
            workers: list[list[int]] | None = None, tokens: list | None = None, stride: int = 1) -> list[int]:
    """Submit every action of ``schedule`` by calling ``submit_action(action, rank, token)``
    in a topological order, each call inside the rank's affinity (``workers[rank]``, default
    worker rank), with the mechanism's priority and the tags phase/microbatch/stage (layer =
    sequence chunk).  ``token`` is ``tokens[rank]`` under ``deps`` for ordered schedules (the
    callee makes its task access it read-write), else None.  Returns the submission order
    (indices into ``schedule.flat()``); no waiting.  ``stride``: the priorities are multiplied
    by it, leaving room for the offsets an action's own tasks take below its priority (a
    checkpoint's recompute and its backward: utils.checkpoint) without reaching the next one."""
    _check_mechanism(mechanism)
    schedule.validate()
    flat = schedule.flat()
    rank = schedule.rank_of()
    workers = workers or [[r] for r in range(schedule.ranks)]
    if len(workers) != schedule.ranks:
        raise ValueError(f"workers: {len(workers)} worker lists for {schedule.ranks} ranks")
    for ws in workers:
        for w in ws:
            if not 0 <= w < context.nworkers():
                raise ValueError(f"worker {w} does not exist: the runtime has {context.nworkers()} workers "
                                 f"(tiletrain.init(ncpu={schedule.ranks}) for one worker per rank)")
    chain = mechanism == "deps" and schedule.ordered
    if chain and (tokens is None or len(tokens) != schedule.ranks):
        raise ValueError("mechanism 'deps' needs one token per rank")
    if not isinstance(stride, int) or stride < 1:
        raise ValueError(f"stride must be an int >= 1, got {stride!r}")
    prios = [p * stride for p in action_priorities(schedule, mechanism)]
    for pr in set(prios):
        context.check_priority(pr)
    order = submission_order(schedule)
    for i in order:
        a, r = flat[i], int(rank[i])
        tags = {"phase": PHASE[a.kind], "layer": a.chunk, "microbatch": a.microbatch, "stage": a.stage}
        with context.submission(tags=tags, priority=prios[i], affinity=workers[r]):
            submit_action(a, r, tokens[r] if chain else None)
    return order


def _operands(schedule: Schedule, a: Action) -> tuple[str, str, str]:
    """The synthetic task's (read, read, written) data names of an action."""
    s, j, c = a.unit
    S, K = schedule.stages, schedule.chunks
    act = lambda s_, c_: f"act{s_}.{j}.{c_}"  # noqa: E731
    grad = lambda s_, c_: f"grad{s_}.{j}.{c_}"  # noqa: E731
    if schedule.local:      # queue slots: F(s, j) overwrites the slot F(s+1, j - q) read (backpressure);
        slot = lambda s_: f"act{s_}.{j % schedule.queue if schedule.queue else j}.{c}"  # noqa: E731
        if a.kind == "F":   # the backward reads its own output (its local loss), no later stage's gradient
            return slot(s), "dummy", slot(s + 1)
        if a.kind == "W":
            return grad(s, c), "dummy", f"dw{s}.{j}.{c}"
        return slot(s + 1), "dummy", grad(s, c)
    if a.kind == "F":       # input, the previous chunk's output (causal), output
        return act(s, c), act(s + 1, c - 1) if c > 0 else "dummy", act(s + 1, c)
    if a.kind == "W":       # its I's output, the activation, the weight gradient
        return grad(s, c), act(s, c), f"dw{s}.{j}.{c}"
    g = act(S, c) if s == S - 1 else grad(s + 1, c)
    return g, grad(s, c + 1) if c + 1 < K else act(s, c), grad(s, c)


def formula_idle_fraction(schedule: Schedule) -> float:
    """Its paper's idle fraction when ``schedule`` is a built-in one (same actions as
    ``schedules.get``), else the idle fraction of its unit-time simulation."""
    s = schedule
    if s.name in NAMES:
        v = max(1, s.stages // s.ranks)
        try:
            b = get(s.name, s.ranks, s.microbatches, virtual=v if s.name == "interleaved-1f1b" else None,
                    chunks=s.chunks if s.name == "seq1f1b" else None)
            same = b.actions == s.actions and (b.flush, b.local, b.ordered) == (s.flush, s.local, s.ordered)
        except ValueError:
            same = False
        if same:
            return formulas.schedule_idle_fraction(s.name, s.ranks, s.microbatches, virtual=v, chunks=s.chunks)
    return s.simulate().idle_fraction


def order_fraction(schedule: Schedule, start: np.ndarray) -> float:
    """Fraction of adjacent action pairs of every rank's list that started in list order."""
    good = total = 0
    pos = 0
    for row in schedule.actions:
        st = start[pos:pos + len(row)]
        good += int((st[1:] >= st[:-1]).sum())
        total += len(row) - 1
        pos += len(row)
    return good / total if total else 1.0


@dataclass
class ScheduleRun:
    schedule: Schedule
    mechanism: str
    usec: float
    start: np.ndarray              # µs, per action (flat order), 0 = first start
    end: np.ndarray
    trace: object = field(repr=False)
    order: np.ndarray | None = field(default=None, repr=False)  # the action of each trace task

    @property
    def makespan_s(self) -> float:
        return float(self.end.max() - self.start.min()) / 1e6

    @property
    def stage_idle(self) -> list[float]:
        T = self.makespan_s * 1e6
        rank = self.schedule.rank_of()
        return [float(1 - (self.end - self.start)[rank == r].sum() / T) for r in range(self.schedule.ranks)]

    @property
    def idle_fraction(self) -> float:
        return float(np.mean(self.stage_idle))

    @property
    def peak_activations(self) -> float:
        return max(peak_activations(self.schedule, self.start, self.end))

    @property
    def order_fraction(self) -> float | None:
        return order_fraction(self.schedule, self.start) if self.schedule.ordered else None

    @property
    def formula_idle_fraction(self) -> float:
        """The paper's formula for a built-in schedule; for any other (a user's CSV), the
        idle fraction of its unit-time simulation."""
        return formula_idle_fraction(self.schedule)

    @property
    def simulated(self):
        return self.schedule.simulate()

    def to_dict(self) -> dict:
        s = self.schedule
        return {"schedule": s.name, "stages": s.ranks, "microbatches": s.microbatches,
                "virtual_stages": s.stages, "chunks": s.chunks,
                "mechanism": self.mechanism if s.ordered else "dataflow",
                "task_us": self.usec, "makespan_s": self.makespan_s, "idle_fraction": self.idle_fraction,
                "stage_idle": self.stage_idle, "formula_idle_fraction": self.formula_idle_fraction,
                "simulated_idle_fraction": self.simulated.idle_fraction,
                "peak_activations": self.peak_activations,
                "simulated_peak_activations": self.simulated.peak_activations,
                "order_fraction": self.order_fraction}


def run_synthetic(schedule: Schedule, usec: float = 10000.0, mechanism: str = "deps", sleep: bool = True
                  ) -> ScheduleRun:
    """Run ``schedule`` once on synthetic tasks (F = I = W = ``usec`` µs, B = 2 usec; sleeping
    by default, so ranks may exceed cores) on a runtime started with profile=True and at
    least ``schedule.ranks`` workers (rank r on worker r).  Waits and measures."""
    _check_mechanism(mechanism)
    if not usec > 0:
        raise ValueError(f"usec must be > 0 microseconds, got {usec!r}")
    schedule.validate()
    flat = schedule.flat()
    ops = {a: _operands(schedule, a) for a in flat}
    names = sorted({n for o in ops.values() for n in o} | {"dummy"})
    data = {n: from_numpy(np.zeros(1)) for n in names}
    tokens = [from_numpy(np.zeros(1)) for _ in range(schedule.ranks)]
    wait()
    dur = {"F": usec, "I": usec, "W": usec, "B": 2 * usec}

    def submit(a: Action, r: int, token) -> None:
        x, y, z = ops[a]
        d = data["dummy"] if token is None else token
        spin(data[x], data[y], data[z], d, int(round(dur[a.kind])), sleep, 1 if token is None else 3)

    with recording() as rec:
        order = enforce(schedule, submit, mechanism, tokens=tokens)
    tr = rec.trace
    if len(tr) != len(flat):
        raise RuntimeError(f"recorded {len(tr)} tasks for {len(flat)} actions")
    start = np.empty(len(flat))
    end = np.empty(len(flat))
    start[order] = tr.tasks["start"]
    end[order] = tr.tasks["end"]
    t0 = start.min()
    return ScheduleRun(schedule, mechanism, float(usec), start - t0, end - t0, tr, np.asarray(order))


def compacted(run: ScheduleRun) -> ScheduleRun:
    """The run's order alone (tiletrain.trace.metrics.compact): the same actions on the same
    workers in the same order with their recorded durations, without the gaps the runtime or
    the host added (a sleeping task's thread woken late)."""
    if run.order is None:
        raise ValueError("compacted: the run has no action order (a run_synthetic result has)")
    tr = compact(run.trace)
    start = np.empty(len(run.order))
    end = np.empty(len(run.order))
    start[run.order] = tr.tasks["start"]
    end[run.order] = tr.tasks["end"]
    t0 = start.min()
    return ScheduleRun(run.schedule, run.mechanism, run.usec, start - t0, end - t0, tr, run.order)


__all__ = ["MECHANISMS", "enforce", "submission_order", "action_priorities", "order_fraction",
           "formula_idle_fraction",
           "run_synthetic",
           "ScheduleRun"]
