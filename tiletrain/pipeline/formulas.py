"""The pipeline-schedule formulas tiletrain's measurements are compared with.

Notation (shared/PIPELINE-NOTES.md): p stages, m micro-batches, v chunks per worker; F, B,
W a stage's forward, input-gradient (dX) and weight-gradient (dW) time for one micro-batch;
uniform stages, communication ignored.  When backward is one task, its time is B + W.

Two bubble definitions circulate; both are given, named:
  idle_over_total  = idle time / (idle + busy time) of a stage   (GPipe's (p-1)/(m+p-1))
  bubble_over_ideal = idle time / busy time                      ((p-1)/m for GPipe and 1F1B)
"""
from __future__ import annotations


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


__all__ = ["gpipe_idle_fraction", "gpipe_bubble_over_ideal", "one_f_one_b_makespan", "one_f_one_b_bubble",
           "zb_h1_bubble", "zb_h2_bubble", "zb_h1_makespan", "interleaved_bubble_over_ideal"]
