"""A list-scheduling simulator for task DAGs (pure functions, no runtime).

Given task durations, predecessors, the workers each task may run on and priorities, it
replays what a greedy priority scheduler does: whenever a worker is free it starts the
ready task of highest priority (oldest first on ties) that it may run.  That is what
StarPU's ``prio`` and tiletrain's ``tt-cp`` do with zero overhead, so the simulated
makespan is what dataflow + affinity + priorities can reach; measurements are compared
with it and with the closed-form formulas (tiletrain.pipeline.formulas).  The one simulator:
written schedules (tiletrain.pipeline.schedule.Schedule.simulate) run through it too, their
order given as dependencies between a rank's consecutive actions.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class Timeline:
    start: np.ndarray    # per task
    end: np.ndarray
    worker: np.ndarray

    @property
    def makespan(self) -> float:
        return float(self.end.max() - self.start.min()) if len(self.end) else 0.0


def simulate(durations: Sequence[float], deps: Sequence[Sequence[int]], nworkers: int,
             allowed: Sequence[Sequence[int] | None] | None = None,
             priorities: Sequence[int] | None = None) -> Timeline:
    """Greedy list scheduling.  ``deps[i]``: predecessors of task i (any order); ``allowed[i]``:
    the workers task i may run on (None: any); higher priority first, then lower id."""
    n = len(durations)
    if len(deps) != n:
        raise ValueError(f"{n} durations but {len(deps)} dependency lists")
    if nworkers < 1:
        raise ValueError(f"nworkers must be >= 1, got {nworkers}")
    dur = np.asarray(durations, dtype=float)
    if (dur < 0).any():
        raise ValueError("durations must be >= 0")
    prio = np.zeros(n, dtype=np.int64) if priorities is None else np.asarray(priorities, dtype=np.int64)
    allow = [None] * n if allowed is None else list(allowed)
    for i, a in enumerate(allow):
        if a is not None and (not a or any(not 0 <= w < nworkers for w in a)):
            raise ValueError(f"task {i}: allowed workers {a} not within 0..{nworkers - 1}")
    succ: list[list[int]] = [[] for _ in range(n)]
    missing = np.zeros(n, dtype=np.int64)
    for i, ds in enumerate(deps):
        for d in set(ds):
            if not 0 <= d < n or d == i:
                raise ValueError(f"task {i}: bad predecessor {d}")
            succ[d].append(i)
            missing[i] += 1
    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    worker = np.full(n, -1, dtype=np.int64)
    ready: list[int] = [i for i in range(n) if missing[i] == 0]
    running: list[tuple[float, int]] = []  # (end time, task)
    free = list(range(nworkers))
    t = 0.0
    done = 0
    while done < n:
        # start what can start now: free workers in id order take their best ready task
        started = True
        while started and free and ready:
            started = False
            for w in sorted(free):
                best = None
                for i in ready:
                    if allow[i] is not None and w not in allow[i]:
                        continue
                    if best is None or (prio[i], -i) > (prio[best], -best):
                        best = i
                if best is not None:
                    ready.remove(best)
                    free.remove(w)
                    start[best], end[best], worker[best] = t, t + dur[best], w
                    heapq.heappush(running, (t + dur[best], best))
                    started = True
                    break
        if not running:
            raise ValueError("the DAG has a cycle or a task no worker may run")
        t, i = heapq.heappop(running)
        finished = [i]
        while running and running[0][0] <= t:
            finished.append(heapq.heappop(running)[1])
        for i in finished:
            done += 1
            free.append(int(worker[i]))
            for s in succ[i]:
                missing[s] -= 1
                if missing[s] == 0:
                    ready.append(s)
    return Timeline(start, end, worker)


__all__ = ["Timeline", "simulate"]
