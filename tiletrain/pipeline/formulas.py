"""The pipeline-schedule formulas tiletrain's measurements are compared with.

Notation (shared/PIPELINE-NOTES.md): p stages, m micro-batches, v chunks per worker; F, B,
W a stage's forward, input-gradient (dX) and weight-gradient (dW) time for one micro-batch;
uniform stages, communication ignored.  When backward is one task, its time is B + W.

Two bubble definitions circulate; both are given, named:
  idle_over_total  = idle time / (idle + busy time) of a stage   (GPipe's (p-1)/(m+p-1))
  bubble_over_ideal = idle time / busy time                      ((p-1)/m for GPipe and 1F1B)
"""
from __future__ import annotations

from typing import Sequence


def _check(p: int, m: int) -> None:
    if not (isinstance(p, int) and isinstance(m, int)) or p < 1 or m < 1:
        raise ValueError(f"p and m must be positive ints, got p={p!r}, m={m!r}")


def gpipe_idle_fraction(p: int, m: int) -> float:
    """GPipe fill-drain: idle / total time of a stage = (p-1)/(m+p-1)."""
    _check(p, m)
    return (p - 1) / (m + p - 1)


def gpipe_bubble_over_ideal(p: int, m: int) -> float:
    """GPipe fill-drain: bubble / ideal time = (p-1)/m."""
    _check(p, m)
    return (p - 1) / m


def one_f_one_b_makespan(p: int, m: int, F: float, B: float, W: float = 0.0) -> float:
    """1F1B (PipeDream-Flush) makespan (m+p-1)(F+B+W): B+W is the whole backward."""
    _check(p, m)
    return (m + p - 1) * (F + B + W)


def one_f_one_b_bubble(p: int, F: float, B: float, W: float = 0.0) -> float:
    """1F1B idle time of a stage: (p-1)(F+B+W)."""
    _check(p, 1)
    return (p - 1) * (F + B + W)


def zb_h1_bubble(p: int, F: float, B: float, W: float) -> float:
    """ZB-H1 (Qi et al., Zero Bubble, ICLR 2024) idle time of a stage: (p-1)(F+B-W), B the
    input-gradient time, W the weight-gradient time: 1/3 of 1F1B's (p-1)(F+B+W) when
    F = B = W, with 1F1B's peak memory.  (shared/PIPELINE-NOTES.md writes (p-1)(F+B-2W) for
    ZB-H1, which is 0 when F = B = W and contradicts its own "1/3 of 1F1B's"; (F+B-2W) is
    ZB-H2's figure, zb_h2_bubble.)"""
    _check(p, 1)
    return max(0.0, (p - 1) * (F + B - W))


def zb_h2_bubble(p: int, F: float, B: float, W: float) -> float:
    """ZB-H2 idle time of a stage: (p-1)(F+B-2W), 0 when F = B = W (peak memory 2p-1)."""
    _check(p, 1)
    return max(0.0, (p - 1) * (F + B - 2 * W))


def zb_h1_makespan(p: int, m: int, F: float, B: float, W: float) -> float:
    """ZB-H1 makespan: the busy time m(F+B+W) plus its bubble."""
    _check(p, m)
    return m * (F + B + W) + zb_h1_bubble(p, F, B, W)


def interleaved_bubble_over_ideal(p: int, m: int, v: int) -> float:
    """Interleaved 1F1B (v model chunks per worker): bubble / ideal = (p-1)/(v m)."""
    _check(p, m)
    if v < 1:
        raise ValueError(f"v must be >= 1, got {v}")
    return (p - 1) / (v * m)


# --- written schedules (tiletrain.pipeline.schedules) -----------------------------------------
# Times per action: for interleaved, V-shaped and sequence-chunked schedules an action is one
# chunk, so F, B, W below are a chunk's times (a v-th, half or k-th of a whole stage's).

def zb_v_bubble(p: int, F: float, B: float, W: float) -> float:
    """ZB-V (two chunks per rank in a V, Qi et al. 2024) idle time of a rank in chunk times:
    (p-1)(F+B-W) -- ZB-H1's expression, but a chunk is half a stage, so half ZB-H1's bubble
    at 1F1B's memory; with F = B = W it is the (p-1) chunk forwards that fill the V."""
    _check(p, 1)
    return max(0.0, (p - 1) * (F + B - W))


def dualpipe_v_bubble(p: int, FB: float, B: float, W: float) -> float:
    """DualPipeV (DeepSeek-V3 report's DualPipe table, PP = 2p stages on p ranks) idle time of a
    rank: (PP/2-1)(F&B + B' - 3W) with B' = B + W the full backward, i.e. (p-1)(FB + B - 2W);
    FB the time of an overlapped forward + backward pair (max(F, B+W) when fully overlapped)."""
    _check(p, 1)
    return max(0.0, (p - 1) * (FB + B - 2 * W))


def schedule_bubble(name: str, p: int, m: int, F: float = 1.0, B: float = 1.0, W: float = 1.0,
                    virtual: int = 2, chunks: int = 2) -> tuple[float, float]:
    """(idle time, busy time) of a rank for the built-in schedule ``name`` (F, B = dX, W = dW
    per action; a full backward takes B + W), from each schedule's paper:
      gpipe, 1f1b, emergent (p-1)(F+B+W)          busy m(F+B+W)
      interleaved-1f1b      (p-1)(F+B+W)          busy v m(F+B+W)    ((p-1)/v of a stage's time)
      seq1f1b               (p-1)(F+B+W)          busy k m(F+B+W)    ((p-1)/k of a micro-batch's)
      zb-h1, emergent-zb    (p-1)(F+B-W)          busy m(F+B+W)
      zb-v                  (p-1)(F+B-W)          busy 2m(F+B+W)
      dualpipe-v            (p-1)(F&B+B-2W)       busy 2m(F+B+W), F&B = max(F, B+W)
      pb                    (p-1)(F+B+W) over one run: the fill (p-1)F at the start, the
                            drain (p-1)(B+W) at the end of training; steady state 0
      local                 (p-1)F                busy m(F+B+W)
      emergent-v            (p-1)F                busy 2m(F+B+W) (the greedy priority simulation:
                            ZB-V's bubble at F = B = W, at GPipe's memory; some other
                            durations give more, depending on m)"""
    _check(p, m)
    full = F + B + W
    table = {
        "gpipe": (one_f_one_b_bubble(p, F, B, W), m * full),
        "1f1b": (one_f_one_b_bubble(p, F, B, W), m * full),
        "emergent": (one_f_one_b_bubble(p, F, B, W), m * full),
        "interleaved-1f1b": (one_f_one_b_bubble(p, F, B, W), virtual * m * full),
        "seq1f1b": (one_f_one_b_bubble(p, F, B, W), chunks * m * full),
        "zb-h1": (zb_h1_bubble(p, F, B, W), m * full),
        "emergent-zb": (zb_h1_bubble(p, F, B, W), m * full),
        "zb-v": (zb_v_bubble(p, F, B, W), 2 * m * full),
        "dualpipe-v": (dualpipe_v_bubble(p, max(F, B + W), B, W), 2 * m * full),
        "emergent-v": ((p - 1) * F, 2 * m * full),
        # no flush: over a run of m micro-batches, the fill (p-1)F at the start and the drain
        # (p-1)(B+W) at the end, as 1F1B; but the drain is paid once per training, not per step
        "pb": (one_f_one_b_bubble(p, F, B, W), m * full),
        # local losses: no backward waits for a later stage; the forward chain's (p-1)F only
        "local": ((p - 1) * F, m * full),
    }
    if name not in table:
        raise ValueError(f"no formula for schedule {name!r}; known: {', '.join(table)}")
    return table[name]


def pb_fill(p: int, F: float = 1.0) -> float:
    """Pipelined backpropagation (``pb``): a rank's idle time before its first backward, the
    fill (p-1)F paid once at the start of training; the steady state has no bubble."""
    _check(p, 1)
    return (p - 1) * F


def pb_delays(p: int, m: int | None = None) -> list[int]:
    """Pipelined backpropagation (``pb``): per stage s (0-based) the weight delay D_s, the
    updates between the version a forward reads and the update its gradient lands in:
    2(p-1-s) -- LayerPipe2's Delay(l) = 2 S(l), S(l) = p-1-s the stages downstream -- and
    with m micro-batches per run at most m-1 (a stage's first m-1 updates are all a run
    has): D_s = min(2(p-1-s), m-1).  ``Schedule.delays()`` of ``pb`` gives the same."""
    _check(p, 1 if m is None else m)
    return [2 * (p - 1 - s) if m is None else min(2 * (p - 1 - s), m - 1) for s in range(p)]


def layerpipe2_delays(layers: Sequence[int]) -> list[int]:
    """LayerPipe2 (Unnikrishnan and Parhi 2025): per layer, in model order, Delay(l) = 2 S(l)
    with S(l) the pipeline stages downstream of layer l's stage, for a model whose stage s
    holds ``layers[s]`` layers (every layer a stage: ``[1] * L``; layers pipelined in groups
    share their group's delay)."""
    if not layers or any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in layers):
        raise ValueError(f"layers must list, per stage, its number of layers (ints >= 1), got {list(layers)!r}")
    p = len(layers)
    return [2 * (p - 1 - s) for s, n in enumerate(layers) for _ in range(n)]


def schedule_idle_fraction(name: str, p: int, m: int, F: float = 1.0, B: float = 1.0, W: float = 1.0,
                           virtual: int = 2, chunks: int = 2) -> float:
    """Idle / total time of a rank for the built-in schedule ``name`` (schedule_bubble):
    (p-1)/(m+p-1) for GPipe and 1F1B, (p-1)/(vm+p-1) interleaved, (p-1)/(3m+p-1) ZB-H1 with
    F = B = W, (p-1)/(6m+p-1) ZB-V and DualPipeV, (p-1)/(km+p-1) Seq1F1B."""
    idle, busy = schedule_bubble(name, p, m, F, B, W, virtual, chunks)
    return idle / (idle + busy)


__all__ = ["gpipe_idle_fraction", "gpipe_bubble_over_ideal", "one_f_one_b_makespan", "one_f_one_b_bubble",
           "zb_h1_bubble", "zb_h2_bubble", "zb_h1_makespan", "interleaved_bubble_over_ideal",
           "zb_v_bubble", "dualpipe_v_bubble", "pb_fill", "pb_delays", "layerpipe2_delays", "schedule_bubble",
           "schedule_idle_fraction"]
