"""Pipeline schedules as data: ``Schedule``, a plain, printable, validated record.

A schedule lists, per rank (a worker or worker group, or an MPI rank), the ordered actions
that rank runs.  An action is (virtual stage, kind, micro-batch[, sequence chunk]) with kind
  F  forward                  B  full backward (input and weight gradient in one task)
  I  input gradient (dX)      W  weight gradient (dW)
written in PyTorch's notation ``{stage}{kind}{microbatch}`` ("2F0": stage 2 forward of
micro-batch 0), with ``.{chunk}`` appended for sequence chunks ("2F0.1").

Dependencies (what ``validate`` and ``simulate`` enforce; virtual stages 0..S-1 in model order):
  F(s,j,c)  after F(s-1,j,c) and, causal attention, F(s,j,c-1)
  B/I(s,j,c) after F(s,j,c), the backward (B or I) of (s+1,j,c) and of (s,j,c+1)
  W(s,j,c)  after I(s,j,c)
Every (s,j,c) has one F and either one B or one I and one W.  A virtual stage lives on one
rank.  ``ordered=False`` (the ``emergent`` schedule) lists the actions without an order:
dataflow + stage affinity + priorities decide (tiletrain.pipeline.priorities).

Schedules without a flush (``flush=False``: ``pb``, pipelined backpropagation) update a
stage's weights after every backward B(s,j) instead of once after the step; ``delays()``
gives each stage's weight delay (the updates between a forward and the update its gradient
lands in) and ``weight_versions()`` which weight version every action reads and writes.
Local-learning schedules (``local=True``: ``local``, PPLL) change the dependencies: B(s,j)
after F(s,j) only (each stage's backward starts from its own auxiliary loss, no gradient
crosses a stage boundary), and with a bounded activation queue of depth q >= 1
(``queue=q``; 0 unbounded) F(s,j) also waits for F(s+1,j-q): at most q outputs of stage s
wait for stage s+1.

Durations default to unit times F = I = W = 1, B = I + W = 2 per action (a chunk of a V or
interleaved schedule is one action: times are per action, so formulas are in those units).
"""
from __future__ import annotations

import csv
import io
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from .priorities import PHASE as _PHASE, action_priority
from .simulate import simulate as _list_schedule

KINDS = "FBIW"
PHASE = {k: _PHASE[k] for k in KINDS}   # an action kind's trace phase (the one table: priorities.PHASE)
UNIT = {"F": 1.0, "I": 1.0, "W": 1.0, "B": 2.0}
# schedules without an order (emergent, emergent-zb) run with the priority table's "zb" mode
# (priorities.PRIORITIES): input gradients (and full backwards) first, then forwards, weight
# gradients last -- F 1, B 2, I 2, W 0
EMERGENT_MODE = "zb"
_ACTION = re.compile(r"^\s*(\d+)([FBIW])(\d+)(?:\.(\d+))?\s*$")


class ScheduleError(ValueError):
    """An invalid schedule: the message names the offending action."""


# the CSV header row (Schedule.to_csv/from_csv): its tag and the fields it may set, with the
# values an ordinary schedule has (a field at its default is not written)
HEADER_TAG = "#schedule"
HEADER_DEFAULTS: dict[str, bool | int] = {"flush": True, "local": False, "queue": 0, "ordered": True}
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def _field_text(v: bool | int) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def _parse_header(row: list[str]) -> dict[str, bool | int]:
    """The fields of a ``#schedule,key=value,...`` header row; ScheduleError naming the bad cell."""
    tag = row[0].strip()
    if tag != HEADER_TAG:
        raise ScheduleError(f"header row: expected {HEADER_TAG!r} as its first cell, got {tag[:40]!r} "
                            f"(e.g. {HEADER_TAG},flush=false)")
    out: dict[str, bool | int] = {}
    for cell in row[1:]:
        cell = cell.strip()
        if not cell:
            continue
        key, eq, val = (x.strip() for x in cell.partition("="))
        if not eq or key not in HEADER_DEFAULTS:
            raise ScheduleError(f"header field {cell[:40]!r}: expected key=value with key one of "
                                f"{', '.join(HEADER_DEFAULTS)}")
        if key in out:
            raise ScheduleError(f"header field {key!r} given twice")
        if isinstance(HEADER_DEFAULTS[key], bool):
            if val.lower() not in _TRUE + _FALSE:
                raise ScheduleError(f"header field {key}={val[:40]!r}: expected true or false")
            out[key] = val.lower() in _TRUE
        else:
            if not re.fullmatch(r"\d{1,9}", val):
                raise ScheduleError(f"header field {key}={val[:40]!r}: expected an integer >= 0")
            out[key] = int(val)
    return out


@dataclass(frozen=True, order=True)
class Action:
    stage: int
    kind: str
    microbatch: int
    chunk: int = 0

    def __post_init__(self):
        if self.kind not in KINDS or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                             for v in (self.stage, self.microbatch, self.chunk)):
            raise ScheduleError(f"bad action ({self.stage!r}, {self.kind!r}, {self.microbatch!r}, {self.chunk!r}): "
                                "stage, micro-batch and chunk are ints >= 0, kind one of F, B, I, W")

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.microbatch}" + (f".{self.chunk}" if self.chunk else "")

    @classmethod
    def parse(cls, text: str) -> "Action":
        mt = _ACTION.match(text)
        if not mt:
            raise ScheduleError(f"bad action {text!r:.40}: expected e.g. '2F0', '1I3', '0W2' or '2F0.1' "
                                "(stage, F|B|I|W, micro-batch[, .chunk])")
        if max(len(mt[1]), len(mt[3]), len(mt[4] or "")) > 18:  # (int() refuses over 4300 digits)
            raise ScheduleError(f"bad action {text!r:.40}: stage, micro-batch and chunk have at most "
                                "18 digits")
        return cls(int(mt[1]), mt[2], int(mt[3]), int(mt[4] or 0))

    @property
    def unit(self) -> tuple[int, int, int]:
        return (self.stage, self.microbatch, self.chunk)


def _as_action(a) -> Action:
    return a if isinstance(a, Action) else Action.parse(a)


@dataclass(frozen=True)
class Schedule:
    name: str
    actions: tuple[tuple[Action, ...], ...]     # per rank, in execution order
    stages: int = 0                              # virtual stages (0: inferred)
    microbatches: int = 0                        # (0: inferred)
    chunks: int = 1                              # sequence chunks per micro-batch
    ordered: bool = True                         # False: dataflow + priorities (emergent)
    flush: bool = True                           # False: a weight update after every B (pb)
    local: bool = False                          # True: B(s,j) needs F(s,j) only (local losses)
    queue: int = 0                               # local: activation queue depth (0 unbounded)

    def __post_init__(self):
        if not isinstance(self.queue, int) or isinstance(self.queue, bool) or self.queue < 0:
            raise ScheduleError(f"schedule {self.name!r}: queue depth must be an int >= 0 (0: unbounded), "
                                f"got {self.queue!r}")
        if self.queue and not self.local:
            raise ScheduleError(f"schedule {self.name!r}: a queue depth is for local-learning schedules "
                                "(local=True)")
        acts = tuple(tuple(_as_action(a) for a in row) for row in self.actions)
        object.__setattr__(self, "actions", acts)
        flat = [a for row in acts for a in row]
        if not flat:
            raise ScheduleError(f"schedule {self.name!r} has no actions")
        if not self.stages:
            object.__setattr__(self, "stages", max(a.stage for a in flat) + 1)
        if not self.microbatches:
            object.__setattr__(self, "microbatches", max(a.microbatch for a in flat) + 1)
        if self.chunks == 1 and any(a.chunk for a in flat):
            object.__setattr__(self, "chunks", max(a.chunk for a in flat) + 1)

    def __repr__(self) -> str:
        return (f"<Schedule {self.name}: {self.ranks} ranks, {self.stages} stages, {self.microbatches} "
                f"micro-batches, {self.chunks} chunks{'' if self.ordered else ', no order'}>")

    # ----------------------------------------------------------------- shape
    @property
    def ranks(self) -> int:
        return len(self.actions)

    @property
    def virtual(self) -> float:
        """Virtual stages (model chunks) per rank."""
        return self.stages / self.ranks

    def flat(self) -> list[Action]:
        """All actions, rank by rank, each rank in order (the index every result array uses)."""
        return [a for row in self.actions for a in row]

    def rank_of(self) -> np.ndarray:
        return np.concatenate([np.full(len(row), r, dtype=np.int64) for r, row in enumerate(self.actions)])

    def placement(self) -> dict[int, int]:
        """Virtual stage -> rank."""
        return {a.stage: r for r, row in enumerate(self.actions) for a in row}

    # ----------------------------------------------------------------- text
    def __str__(self) -> str:
        return self.format()

    def format(self, width: int | None = None) -> str:
        """The action table in PyTorch's notation: one column per rank, one row per step
        (the position in the rank's list)."""
        head = (f"schedule {self.name}: {self.ranks} ranks, {self.stages} stages, {self.microbatches} "
                f"micro-batches" + (f", {self.chunks} chunks" if self.chunks > 1 else "")
                + ("" if self.ordered else " (no order: dataflow + priorities)"))
        n = max(len(row) for row in self.actions)
        cells = [[str(row[i]) if i < len(row) else "" for row in self.actions] for i in range(n)]
        w = width or max([len(f"Rank {self.ranks - 1}")] + [len(c) for r in cells for c in r])
        lines = [head, " " * 10 + " ".join(f"Rank {r}".ljust(w) for r in range(self.ranks)).rstrip()]
        lines += [f"Step {i:03d}: " + " ".join(c.ljust(w) for c in row).rstrip() for i, row in enumerate(cells)]
        return "\n".join(lines)

    def header(self) -> dict[str, bool | int]:
        """The fields PyTorch's CSV layout has no place for, where they differ from an
        ordinary schedule's (``flush``, ``local``, ``queue``, ``ordered``): what ``to_csv``
        writes in its ``#schedule`` header row.  Empty for a schedule with a flush, global
        losses and an order (its CSV is PyTorch's layout unchanged)."""
        return {k: getattr(self, k) for k, v in HEADER_DEFAULTS.items() if getattr(self, k) != v}

    def to_csv(self, path: str | os.PathLike | None = None) -> str:
        """PyTorch's CSV layout: one row per rank, one action per cell.  A schedule PyTorch
        cannot express (no flush, stage-local losses and their queue depth, no order) starts
        with one header row ``#schedule,flush=false,local=true,queue=2`` (``header()``: the
        fields that differ from an ordinary schedule), so that ``from_csv`` reads back the
        same weight versions, delays and dependencies.  Returns the text; writes it to
        ``path`` when given."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        head = self.header()
        if head:
            w.writerow([HEADER_TAG] + [f"{k}={_field_text(v)}" for k, v in head.items()])
        w.writerows([[str(a) for a in row] for row in self.actions])
        text = buf.getvalue()
        if path is not None:
            with open(path, "w", newline="") as f:
                f.write(text)
        return text

    @classmethod
    def from_csv(cls, source: str | os.PathLike, name: str | None = None, stages: int = 0,
                 microbatches: int = 0) -> "Schedule":
        """Read a schedule in PyTorch's CSV layout (a path, or the CSV text itself when it
        contains a newline).  Empty cells (idle steps) are skipped.  An optional first row
        ``#schedule,key=value,...`` sets ``flush``, ``local`` (true|false), ``queue`` (an
        int >= 0) and ``ordered`` (true|false); without it (PyTorch's files, and tiletrain's
        of ordinary schedules) they keep their defaults.  Not validated: call
        ``validate()``."""
        if isinstance(source, str) and "\n" in source:
            text, name = source, name or "csv"
        else:
            path = os.fspath(source)
            if not os.path.exists(path):
                raise FileNotFoundError(f"schedule file {path} does not exist")
            try:
                with open(path, newline="", encoding="utf-8") as f:
                    text = f.read()
            except UnicodeDecodeError as exc:
                raise ScheduleError(f"schedule file {path} is not UTF-8 text ({exc})") from None
            name = name or os.path.splitext(os.path.basename(path))[0]
        rows = []
        fields: dict[str, bool | int] = {}
        try:
            for line, row in enumerate(csv.reader(io.StringIO(text))):
                if row and row[0].strip().startswith("#"):
                    if line or rows:
                        raise ScheduleError(f"line {line + 1}: a {HEADER_TAG} header row is only allowed "
                                            "on the first line")
                    fields = _parse_header(row)
                    continue
                rows.append(tuple(Action.parse(c) for c in row if c.strip()))
        except csv.Error as exc:  # (e.g. a field over csv.field_size_limit())
            raise ScheduleError(f"row {len(rows)}: {exc}") from None
        except ScheduleError as exc:
            if str(exc).startswith(("line ", "header ")):
                raise
            raise ScheduleError(f"row {len(rows)}: {exc}") from None
        while rows and not rows[-1]:
            rows.pop()
        if not rows:
            raise ScheduleError(f"schedule {name!r}: the CSV has no actions")
        return cls(name, tuple(rows), stages, microbatches, **fields)

    # ----------------------------------------------------------------- rules
    def dependencies(self) -> list[list[int]]:
        """Per action (``flat()`` order): the indices of the actions it waits for (data only)."""
        flat = self.flat()
        where = {a: i for i, a in enumerate(flat)}

        def back(s, j, c):
            return where.get(Action(s, "B", j, c), where.get(Action(s, "I", j, c)))

        deps: list[list[int]] = []
        for a in flat:
            s, j, c = a.unit
            if a.kind == "F":
                want = [where.get(Action(s - 1, "F", j, c)) if s > 0 else None,
                        where.get(Action(s, "F", j, c - 1)) if c > 0 else None]
                if self.local and self.queue and j >= self.queue and s + 1 < self.stages:
                    want.append(where.get(Action(s + 1, "F", j - self.queue, c)))   # the queue is full
            elif a.kind in "BI" and self.local:
                want = [where.get(Action(s, "F", j, c))]
            elif a.kind in "BI":
                want = [where.get(Action(s, "F", j, c)),
                        back(s + 1, j, c) if s + 1 < self.stages else None,
                        back(s, j, c + 1) if c + 1 < self.chunks else None]
            else:
                want = [where.get(Action(s, "I", j, c))]
            deps.append([d for d in want if d is not None])
        return deps

    def validate(self) -> "Schedule":
        """Every action exactly once and in range, each virtual stage on one rank, every
        dependency present and, for ordered schedules, satisfiable in the ranks' orders
        (no deadlock).  Raises ScheduleError naming the offending action; returns self."""
        S, M, K = self.stages, self.microbatches, self.chunks
        if self.ranks < 1 or S < 1 or M < 1 or K < 1:
            raise ScheduleError(f"schedule {self.name!r}: ranks, stages, microbatches, chunks must be >= 1")
        seen: dict[Action, int] = {}
        count: dict[tuple[int, int], int] = {}
        for r, row in enumerate(self.actions):      # a stage's home: the rank holding most of it
            for a in row:
                count[(a.stage, r)] = count.get((a.stage, r), 0) + 1
        home = {s: r for (s, r), _ in sorted(count.items(), key=lambda kv: (kv[1], -kv[0][1]))}
        for r, row in enumerate(self.actions):
            for a in row:
                if not (0 <= a.stage < S and 0 <= a.microbatch < M and 0 <= a.chunk < K):
                    raise ScheduleError(f"action {a} on rank {r} is out of range ({S} stages, "
                                        f"{M} micro-batches, "
                                        f"{K} chunks)")
                if a in seen:
                    raise ScheduleError(f"action {a} appears twice (ranks {seen[a]} and {r})")
                seen[a] = r
                if home[a.stage] != r:
                    raise ScheduleError(f"action {a} on rank {r}: stage {a.stage} is on rank {home[a.stage]}")
        for s in range(S):
            for j in range(M):
                for c in range(K):
                    f, b, i, w = (Action(s, k, j, c) for k in "FBIW")
                    if f not in seen:
                        raise ScheduleError(f"missing action {f}")
                    if b in seen and (i in seen or w in seen):
                        raise ScheduleError(f"action {b} (full backward) and {i if i in seen else w} (split) "
                                            "both present")
                    if b not in seen and i not in seen and w not in seen:
                        raise ScheduleError(f"missing action {b} (or {i} and {w})")
                    for need in ([] if b in seen else [i, w]):
                        if need not in seen:
                            raise ScheduleError(f"missing action {need}")
        if self.ordered:
            self._check_deadlock()
        return self

    def _check_deadlock(self) -> None:
        flat, deps = self.flat(), self.dependencies()
        rank = self.rank_of()
        starts = np.cumsum([0] + [len(row) for row in self.actions])
        head = list(starts[:-1])
        done = np.zeros(len(flat), dtype=bool)
        progress = True
        while progress:
            progress = False
            for r in range(self.ranks):
                while head[r] < starts[r + 1] and all(done[d] for d in deps[head[r]]):
                    done[head[r]] = True
                    head[r] += 1
                    progress = True
        if not done.all():
            stuck = []
            for r in range(self.ranks):
                if head[r] < starts[r + 1]:
                    i = head[r]
                    waits = ", ".join(str(flat[d]) + (f" (behind it on rank {r})" if rank[d] == r else "")
                                      for d in deps[i] if not done[d])
                    stuck.append(f"action {flat[i]} on rank {r} waits for {waits}")
            raise ScheduleError("deadlock: " + "; ".join(stuck))

    # ----------------------------------------------------------------- weight versions
    def weight_versions(self) -> dict[Action, tuple[int, int | None]]:
        """Per action: (the version of its stage's weights it reads, the version it writes or
        None).  Version k of stage s is its weights after k updates.  With a flush every
        action reads version 0 and nothing is written during the step.  Without one
        (``flush=False``) every B(s,j) (or W(s,j) with a split backward) writes an update, in
        its rank's order: F(s,j) reads the newest version when it runs, and the backward reads
        the version its forward read (weight stashing: the gradient is that version's) and
        writes the next one."""
        if self.flush:
            return {a: (0, None) for a in self.flat()}
        out: dict[Action, tuple[int, int | None]] = {}
        for row in self.actions:
            done: dict[int, int] = {}     # stage -> updates so far
            for a in row:
                k = done.get(a.stage, 0)
                if a.kind == "F":
                    out[a] = (k, None)
                elif a.kind == "I":
                    out[a] = (out[Action(a.stage, "F", a.microbatch, a.chunk)][0], None)
                else:
                    fwd = out.get(Action(a.stage, "F", a.microbatch, a.chunk))
                    if fwd is None:
                        raise ScheduleError(f"action {a} runs before its forward on the same rank")
                    done[a.stage] = k + 1
                    out[a] = (fwd[0], k + 1)
        return out

    def delays(self) -> list[int]:
        """Per virtual stage: the largest weight delay of its micro-batches, the number of
        updates between the version a forward reads and the update its gradient lands in
        (0 with a flush: every gradient is of the weights it updates).  Pipelined
        backpropagation (``pb``) has 2(p-1-s) on stage s (fewer when m is smaller)."""
        if self.flush:
            return [0] * self.stages
        v = self.weight_versions()
        out = [0] * self.stages
        for a, (read, wrote) in v.items():
            if wrote is not None:
                out[a.stage] = max(out[a.stage], wrote - 1 - read)
        return out

    def update_delays(self) -> dict[Action, int]:
        """Per action that writes a weight update (B, or W with a split backward; none with a
        flush): its delay, the updates between the version its forward read and the one it
        writes (written - 1 - read).  ``delays()`` is the largest per stage: in a run's
        first updates (the fill) the delays are smaller."""
        return {a: wrote - 1 - read for a, (read, wrote) in self.weight_versions().items() if wrote is not None}

    def layer_delays(self, layers: Sequence[int]) -> list[int]:
        """Per layer, in model order, the weight delay of its stage when virtual stage s holds
        ``layers[s]`` layers (or layer groups): all layers of a stage share its delay
        (``delays()``), as LayerPipe2's grouped pipelining assigns them.  For ``pb`` with
        m > 2(p-1) micro-batches this is LayerPipe2's Delay(l) = 2 S(l)
        (``formulas.layerpipe2_delays``)."""
        if len(layers) != self.stages or any(not isinstance(n, int) or isinstance(n, bool) or n < 1
                                             for n in layers):
            raise ScheduleError(f"schedule {self.name!r}: layers must list, per virtual stage ({self.stages}), "
                                f"its number of layers (ints >= 1), got {list(layers)!r}")
        d = self.delays()
        return [d[s] for s, n in enumerate(layers) for _ in range(n)]

    def kept_versions(self) -> list[int]:
        """Per virtual stage: the most weight versions alive at once when every version is
        stored until the last backward that reads it (the newest one included)."""
        if self.flush:
            return [1] * self.stages
        v = self.weight_versions()
        out = []
        for s in range(self.stages):
            row = [a for r in self.actions for a in r if a.stage == s]
            live: dict[int, int] = {}           # version -> backwards still to read it
            newest, peak = 0, 1
            for a in row:
                read, wrote = v[a]
                if a.kind == "F":
                    live[read] = live.get(read, 0) + 1
                elif wrote is not None:
                    live[read] -= 1
                    if not live[read]:
                        del live[read]
                    newest = wrote
                peak = max(peak, len(set(live) | {newest}))
            out.append(peak)
        return out

    # ----------------------------------------------------------------- simulation
    def durations(self, durations: Mapping[str, float] | Callable[[Action], float] | None = None) -> np.ndarray:
        if durations is None or isinstance(durations, Mapping):
            table = dict(UNIT, **(durations or {}))
            if durations is not None and "B" not in durations:
                table["B"] = table["I"] + table["W"]
            return np.array([table[a.kind] for a in self.flat()], dtype=float)
        return np.array([float(durations(a)) for a in self.flat()], dtype=float)

    def priorities(self) -> list[int]:
        """Per action: emergent schedules the phase priorities, ordered ones the negated
        position in the rank's list (earlier first)."""
        if not self.ordered:
            return [action_priority(a.kind, EMERGENT_MODE) for a in self.flat()]
        return [-i for row in self.actions for i in range(len(row))]

    def simulate(self, durations: Mapping[str, float] | Callable[[Action], float] | None = None
                 ) -> "Simulation":
        """Event simulation (tiletrain.pipeline.simulate): each rank one worker; ordered
        schedules run each rank's list in order, emergent ones greedily by priority."""
        self.validate()
        dur = self.durations(durations)
        deps = self.dependencies()
        rank = self.rank_of()
        if self.ordered:
            pos = 0
            for row in self.actions:
                for k in range(1, len(row)):
                    deps[pos + k] = deps[pos + k] + [pos + k - 1]
                pos += len(row)
        tl = _list_schedule(dur, deps, self.ranks, allowed=[[int(r)] for r in rank],
                            priorities=self.priorities())
        return Simulation(self, tl.start, tl.end, rank)


def activation_units(schedule: Schedule) -> float:
    """Weight of one (stage, micro-batch, chunk) activation in micro-batch activations of a
    rank's whole share of the model (1 for 1F1B; 1/v interleaved; 1/k sequence chunks)."""
    return schedule.ranks / (schedule.stages * schedule.chunks)


def peak_activations(schedule: Schedule, start: Sequence[float], end: Sequence[float]) -> list[float]:
    """Per rank: the most activations alive at once, an activation (s, j, c) living from the
    start of its forward to the end of its last backward action (B, or I and W)."""
    flat = schedule.flat()
    born: dict[tuple, float] = {}
    dies: dict[tuple, float] = {}
    for a, s, e in zip(flat, start, end):
        if a.kind == "F":
            born[a.unit] = float(s)
        else:
            dies[a.unit] = max(dies.get(a.unit, -np.inf), float(e))
    home = schedule.placement()
    w = activation_units(schedule)
    out = []
    for r in range(schedule.ranks):
        ev = sorted([(born[u], 1) for u in born if home[u[0]] == r and u in dies]
                    + [(dies[u], -1) for u in born if home[u[0]] == r and u in dies])
        live = peak = 0
        for _, d in ev:
            live += d
            peak = max(peak, live)
        out.append(peak * w)
    return out


@dataclass
class Simulation:
    """Start and end time of every action (``schedule.flat()`` order) and what follows."""
    schedule: Schedule
    start: np.ndarray
    end: np.ndarray
    rank: np.ndarray
    makespan: float = field(init=False)

    def __post_init__(self):
        self.makespan = float(self.end.max() - self.start.min())

    @property
    def busy(self) -> np.ndarray:
        return np.array([(self.end - self.start)[self.rank == r].sum() for r in range(self.schedule.ranks)])

    @property
    def stage_idle(self) -> list[float]:
        """Per rank: idle / makespan."""
        return [float(1 - b / self.makespan) for b in self.busy]

    @property
    def idle_fraction(self) -> float:
        return float(np.mean(self.stage_idle))

    @property
    def bubble(self) -> float:
        """Mean idle time of a rank."""
        return float(np.mean(self.makespan - self.busy))

    @property
    def stage_peak_activations(self) -> list[float]:
        return peak_activations(self.schedule, self.start, self.end)

    @property
    def peak_activations(self) -> float:
        return max(self.stage_peak_activations)

    def summary(self) -> dict:
        out = {"schedule": self.schedule.name, "stages": self.schedule.ranks,
               "virtual_stages": self.schedule.stages, "microbatches": self.schedule.microbatches,
               "chunks": self.schedule.chunks, "makespan": self.makespan, "idle_fraction": self.idle_fraction,
               "stage_idle": self.stage_idle, "peak_activations": self.peak_activations}
        if not self.schedule.flush:
            out.update(delays=self.schedule.delays(), kept_versions=self.schedule.kept_versions(),
                       fill=self.fill, steady_idle_fraction=self.steady_idle_fraction)
        return out

    @property
    def fill(self) -> float:
        """The mean time a rank waits before its first backward starts, less the time it
        runs forwards meanwhile (the pipeline's fill; a schedule without a flush pays it
        once, at the start of training)."""
        flat = self.schedule.flat()
        out = []
        for r in range(self.schedule.ranks):
            idx = [i for i in range(len(flat)) if self.rank[i] == r]
            first_b = min((self.start[i] for i in idx if flat[i].kind in "BI"), default=self.makespan)
            busy = sum(min(self.end[i], first_b) - self.start[i] for i in idx if self.start[i] < first_b)
            out.append(float(first_b - self.start.min() - busy))
        return float(np.mean(out))

    @property
    def steady_idle_fraction(self) -> float:
        """Idle fraction between the moment every rank has started its first backward and the
        moment the first rank has run out of forwards (the steady state: no fill, no drain)."""
        flat = self.schedule.flat()
        t0 = max(min(self.start[i] for i in range(len(flat)) if self.rank[i] == r and flat[i].kind in "BI")
                 for r in range(self.schedule.ranks))
        t1 = min(max(self.end[i] for i in range(len(flat)) if self.rank[i] == r and flat[i].kind == "F")
                 for r in range(self.schedule.ranks))
        if t1 <= t0:
            return float("nan")
        busy = 0.0
        for r in range(self.schedule.ranks):
            sel = self.rank == r
            busy += float(np.clip(np.minimum(self.end[sel], t1) - np.maximum(self.start[sel], t0), 0, None).sum())
        return float(1 - busy / (self.schedule.ranks * (t1 - t0)))

    def to_trace(self, time_unit_us: float = 1000.0):
        """A tiletrain Trace of the simulation (one worker per rank), for trace.save/gantt."""
        from ..trace.records import TASK_DTYPE, Trace
        flat = self.schedule.flat()
        order = np.lexsort((self.rank, self.start))
        new = np.empty(len(order), dtype=np.int64)
        new[order] = np.arange(len(order))
        deps = self.schedule.dependencies()
        tasks = np.zeros(len(order), dtype=TASK_DTYPE)
        dl: list[int] = []
        for k, i in enumerate(order):
            a = flat[i]
            d = sorted(int(new[x]) for x in deps[i])
            tasks[k] = (k, a.kind, PHASE[a.kind], int(self.rank[i]), 0, 0, 0, a.chunk, a.microbatch, a.stage,
                        self.start[i] * time_unit_us, self.start[i] * time_unit_us, self.end[i] * time_unit_us,
                        0.0, len(dl), len(d), (0,) * 8, -1.0)  # no kernel arguments, no CPU time
            dl += d
        workers = [{"id": r, "name": f"rank {r}", "rank": 0} for r in range(self.schedule.ranks)]
        return Trace(tasks, np.asarray(dl, dtype=np.int64), workers,
                     {"sched": f"simulated {self.schedule.name}", "schedule": self.schedule.name})

    def save_chrome(self, path, time_unit_us: float = 1000.0):
        """Chrome trace-event JSON of the simulation (one unit of time = ``time_unit_us``)."""
        from ..trace.chrome import save
        return save(self.to_trace(time_unit_us), path)


__all__ = ["Action", "Schedule", "ScheduleError", "HEADER_TAG", "HEADER_DEFAULTS", "Simulation", "peak_activations",
           "activation_units",
           "KINDS", "UNIT", "PHASE"]
