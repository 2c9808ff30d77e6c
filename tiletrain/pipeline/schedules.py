"""The published pipeline schedules, each built from its paper's definition, behind one
registry: ``get(name, stages=p, microbatches=m, virtual=v, chunks=k)``.

  gpipe             all forwards, then all backwards (Huang et al. 2019)
  1f1b              p-r-1 warm-up forwards on rank r, then one forward one backward
                    (PipeDream-Flush, Narayanan et al. 2021)
  interleaved-1f1b  v virtual stages per rank, looped placement (stage c*p + r on rank r),
                    Megatron's order: groups of p micro-batches per chunk, (p-r-1)*2 + (v-1)*p
                    warm-up forwards, m % p == 0 (Narayanan et al. 2021)
  zb-h1             backward split into I (dX) and W (dW); 1F1B's order of F and I, rank r
                    delays its W passes by r micro-batches so that they fill the tail
                    (Qi et al., Zero Bubble, ICLR 2024)
  zb-v              two chunks per rank in a V (stages r and 2p-1-r), split backward, the
                    zero-bubble rule (I, else F within 1F1B's memory, else W) (same authors)
  dualpipe-v        DeepSeek's DualPipeV (V placement, its eight phases; overlapped F&B pairs
                    run back to back here), m >= 2p
  seq1f1b           each micro-batch split into k sequence chunks, 1F1B over chunks: forward
                    in chunk order, backward in reverse, k-1 more warm-up forwards
                    (Sun et al., Seq1F1B, 2024)
  pb                pipelined backpropagation (Kosson et al. 2020): no flush; rank r runs
                    2(p-1-r) warm-up forwards, then one forward one backward, and updates its
                    weights after every backward, so stage s's gradient lands 2(p-1-s) updates
                    after the weights its forward read (Schedule.delays: LayerPipe2's 2S(l), S
                    the stages downstream; 0 on the last stage, so one stage is plain SGD); the
                    steady state has no bubble, only the fill (p-1)F at the start
  local             local learning (PPLL, Guo et al. 2024): each stage runs its backward right
                    after its forward, from its own auxiliary loss (Schedule(local=True): no
                    gradient crosses stages); activations flow through queues of depth
                    ``queue`` (0: unbounded; default 2)
  emergent          no order: every forward, then every backward, in submission order; stage
                    affinity and priorities (backward before forward) decide at run time
  emergent-zb       the same with the backward split into I (dX) and W (dW) and the zero-bubble
                    priorities I > F > W: dataflow fills a stage's idle time with ready weight
                    gradients, as ZB-H1 writes down (its bubble, at GPipe's memory)
  emergent-v        emergent-zb on ZB-V's and DualPipeV's placement (stages r and 2p-1-r on
                    rank r, so each rank holds an end of the model: the embeddings' and the
                    head's stages share rank 0): no order, the zero-bubble priorities; the
                    written V schedules' placement without their order
"""
from __future__ import annotations

from collections import deque
from typing import Callable

from .schedule import Action, Schedule, ScheduleError


def _ints(**kw) -> None:
    for k, v in kw.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{k} must be an int >= 1, got {v!r}")


def _one_f_one_b(fwd: list, bwd: list, warmup: int) -> list:
    """Warm-up forwards, then (forward, backward) pairs, then the remaining backwards."""
    warmup = min(warmup, len(fwd))
    out = fwd[:warmup]
    for i in range(len(fwd) - warmup):
        out += [fwd[warmup + i], bwd[i]]
    return out + bwd[len(fwd) - warmup:]


def gpipe(p: int, m: int) -> list[list[Action]]:
    return [[Action(r, "F", j) for j in range(m)] + [Action(r, "B", j) for j in range(m)] for r in range(p)]


def one_f_one_b(p: int, m: int) -> list[list[Action]]:
    return [_one_f_one_b([Action(r, "F", j) for j in range(m)], [Action(r, "B", j) for j in range(m)], p - r - 1)
            for r in range(p)]


def interleaved_1f1b(p: int, m: int, v: int) -> list[list[Action]]:
    if m % p:
        raise ValueError(f"interleaved-1f1b needs microbatches divisible by stages (Megatron), got m={m}, p={p}")
    rows = []
    for r in range(p):
        def unit(k, backward):
            c = (k // p) % v
            return (v - 1 - c if backward else c) * p + r, (k // (p * v)) * p + k % p
        fwd = [Action(s, "F", j) for s, j in (unit(k, False) for k in range(m * v))]
        bwd = [Action(s, "B", j) for s, j in (unit(k, True) for k in range(m * v))]
        rows.append(_one_f_one_b(fwd, bwd, (p - r - 1) * 2 + (v - 1) * p))
    return rows


def seq1f1b(p: int, m: int, k: int) -> list[list[Action]]:
    rows = []
    for r in range(p):
        fwd = [Action(r, "F", j, c) for j in range(m) for c in range(k)]
        bwd = [Action(r, "B", j, c) for j in range(m) for c in reversed(range(k))]
        rows.append(_one_f_one_b(fwd, bwd, p - r - 1 + k - 1))
    return rows


def zb_h1(p: int, m: int) -> list[list[Action]]:
    """1F1B's order of forwards and input gradients; rank r runs the weight gradient of
    micro-batch j after the input gradient of j + r, the last r at the end (the W passes
    fill the tail that 1F1B leaves idle: ZB-H1, figure 3 of the paper)."""
    rows = []
    for r in range(p):
        out = []
        for a in _one_f_one_b([Action(r, "F", j) for j in range(m)], [Action(r, "I", j) for j in range(m)],
                              p - r - 1):
            out.append(a)
            if a.kind == "I" and a.microbatch >= r:
                out.append(Action(r, "W", a.microbatch - r))
        rows.append(out + [Action(r, "W", j) for j in range(max(0, m - r), m)])
    return rows


def zb_v(p: int, m: int) -> list[list[Action]]:
    """Two chunks per rank in a V (stages r and 2p-1-r), built by the zero-bubble rule at
    unit times: a free rank runs a ready I (oldest micro-batch, later stage first), else a
    ready F while fewer than 2p chunk activations (1F1B's memory) are alive (F started, W
    not done), else its oldest pending W, else waits."""
    S = 2 * p
    homes = [[r, S - 1 - r] for r in range(p)]
    never = 1 << 60
    fdone: dict = {}
    idone: dict = {}
    rows: list[list[Action]] = [[] for _ in range(p)]
    nf = [{s: 0 for s in h} for h in homes]
    ni = [{s: 0 for s in h} for h in homes]
    pending: list[deque] = [deque() for _ in range(p)]
    alive = [0] * p
    t = 0
    while sum(len(r) for r in rows) < 3 * S * m:
        for r in range(p):
            ready_i = [(j, -s) for s, j in ni[r].items()
                       if j < m and fdone.get((s, j), never) <= t
                       and (s == S - 1 or idone.get((s + 1, j), never) <= t)]
            ready_f = [(j, -s) for s, j in nf[r].items()
                       if j < m and (s == 0 or fdone.get((s - 1, j), never) <= t)]
            if ready_i:
                j, s = min(ready_i)
                a = Action(-s, "I", j)
                ni[r][-s] += 1
                idone[(-s, j)] = t + 1
                pending[r].append(Action(-s, "W", j))
            elif ready_f and alive[r] < 2 * p:
                j, s = min(ready_f)
                a = Action(-s, "F", j)
                nf[r][-s] += 1
                fdone[(-s, j)] = t + 1
                alive[r] += 1
            elif pending[r]:
                a = pending[r].popleft()
                alive[r] -= 1
            else:
                continue
            rows[r].append(a)
        t += 1
        if t > 100 * S * m:
            raise ScheduleError("zb-v construction did not finish (internal error)")
    return rows


def dualpipe_v(p: int, m: int) -> list[list[Action]]:
    """DeepSeek's DualPipeV step list (its phases 1-8 per rank): chunk 0 is stage r, chunk 1
    stage 2p-1-r; a zero-bubble backward is an I whose W is deferred (first in, first out)."""
    if m < 2 * p:
        raise ValueError(f"dualpipe-v needs microbatches >= 2 * stages, got m={m}, p={p}")
    rows = []
    for r in range(p):
        stage = (r, 2 * p - 1 - r)
        nf, nb = [0, 0], [0, 0]
        wq: deque = deque()
        out: list[Action] = []

        def f(c):
            out.append(Action(stage[c], "F", nf[c]))
            nf[c] += 1

        def b(c, zb=False):
            if zb:
                out.append(Action(stage[c], "I", nb[c]))
                wq.append(Action(stage[c], "W", nb[c]))
            else:
                out.append(Action(stage[c], "B", nb[c]))
            nb[c] += 1

        def w():
            out.append(wq.popleft())

        for _ in range((p - r - 1) * 2):          # 1: nF0
            f(0)
        for _ in range(r + 1):                    # 2: nF0F1
            f(0), f(1)
        for _ in range(p - r - 1):                # 3: nB1W1F1 (zero bubble)
            b(1, True), w(), f(1)
        for _ in range(m - 2 * p + r + 1):        # 4: nF0B1F1B0 (F&B pairs)
            f(0), b(1), f(1), b(0)
        for _ in range(p - r - 1):                # 5: nB1F1B0
            b(1), f(1), b(0)
        zb = False
        for i in range(r + 1):                    # 6: nB1B0, the second half zero bubble
            if i == (r + 1) // 2 and r % 2 == 1:
                zb = True
            b(1, zb)
            if i == (r + 1) // 2 and r % 2 == 0:
                zb = True
            b(0, zb)
        for _ in range(p - r - 1):                # 7: nWB0
            w(), b(0, True)
        while wq:                                 # 8: nW
            w()
        rows.append(out)
    return rows


def pb(p: int, m: int) -> list[list[Action]]:
    return [_one_f_one_b([Action(r, "F", j) for j in range(m)], [Action(r, "B", j) for j in range(m)],
                         2 * (p - 1 - r)) for r in range(p)]


def local(p: int, m: int, queue: int) -> list[list[Action]]:
    return [[Action(r, k, j) for j in range(m) for k in "FB"] for r in range(p)]


def emergent(p: int, m: int) -> list[list[Action]]:
    return gpipe(p, m)


def emergent_zb(p: int, m: int) -> list[list[Action]]:
    return [[Action(r, "F", j) for j in range(m)] + [Action(r, k, j) for j in range(m) for k in "IW"]
            for r in range(p)]


def emergent_v(p: int, m: int) -> list[list[Action]]:
    # listed in submission order (enforce.submission_order), which breaks priority ties
    return [[Action(s, "F", j) for j in range(m) for s in (r, 2 * p - 1 - r)]
            + [Action(s, k, j) for j in range(m) for s in (2 * p - 1 - r, r) for k in "IW"] for r in range(p)]


# name -> (builder, its extra option: "virtual" | "chunks" | None, ordered)
SCHEDULES: dict[str, tuple[Callable, str | None, bool]] = {
    "gpipe": (gpipe, None, True),
    "1f1b": (one_f_one_b, None, True),
    "interleaved-1f1b": (interleaved_1f1b, "virtual", True),
    "zb-h1": (zb_h1, None, True),
    "zb-v": (zb_v, None, True),
    "dualpipe-v": (dualpipe_v, None, True),
    "seq1f1b": (seq1f1b, "chunks", True),
    "pb": (pb, None, True),
    "local": (local, "queue", True),
    "emergent": (emergent, None, False),
    "emergent-zb": (emergent_zb, None, False),
    "emergent-v": (emergent_v, None, False),
}
NAMES = tuple(SCHEDULES)


NO_FLUSH = ("pb", "local")   # a weight update after every backward
LOCAL = ("local",)      # stage-local losses: a backward needs its own forward only


def get(name: str, stages: int, microbatches: int, virtual: int | None = None, chunks: int | None = None,
        queue: int | None = None) -> Schedule:
    """A built-in schedule for ``stages`` ranks and ``microbatches`` micro-batches (``virtual``:
    interleaved-1f1b's chunks per rank, default 2; ``chunks``: seq1f1b's sequence chunks,
    default 2; ``queue``: local's activation queue depth, default 2, 0 unbounded).  Validated."""
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; built in: {', '.join(NAMES)}")
    _ints(stages=stages, microbatches=microbatches)
    builder, extra, ordered = SCHEDULES[name]
    for opt, val in (("virtual", virtual), ("chunks", chunks)):
        if val is not None and opt != extra and val != 1:
            raise ValueError(f"schedule {name!r} takes no {opt}= (only interleaved-1f1b takes virtual=, "
                             "seq1f1b chunks=)")
    if queue is not None and extra != "queue":
        raise ValueError(f"schedule {name!r} takes no queue= (only local takes queue=)")
    args = [stages, microbatches]
    k = 1
    q = 0
    if extra == "queue":
        q = 2 if queue is None else queue
        if not isinstance(q, int) or isinstance(q, bool) or q < 0:
            raise ValueError(f"queue must be an int >= 0 (the activation queue depth, 0 unbounded), got {q!r}")
        args.append(q)
    elif extra:
        val = {"virtual": virtual, "chunks": chunks}[extra]
        val = 2 if val is None else val
        _ints(**{extra: val})
        args.append(val)
        k = val if extra == "chunks" else 1
    return Schedule(name, tuple(tuple(r) for r in builder(*args)), 0, microbatches, k, ordered,
                    flush=name not in NO_FLUSH, local=name in LOCAL, queue=q).validate()


__all__ = ["get", "NAMES", "SCHEDULES", "NO_FLUSH", "LOCAL", "pb", "local",
           "gpipe", "one_f_one_b", "interleaved_1f1b", "zb_h1", "zb_v",
           "dualpipe_v",
           "seq1f1b", "emergent", "emergent_zb", "emergent_v"]
