"""The strong-Wolfe line search of torch.optim.LBFGS(line_search_fn="strong_wolfe"): a
bracketing phase that extrapolates by cubic interpolation, then a zoom phase (Nocedal and
Wright, algorithms 3.5 and 3.6) with torch's constants and safeguards.  Pure functions of
NumPy vectors and Python floats; the objective is a callable."""
from __future__ import annotations

import numpy as np


def cubic_interpolate(x1: float, f1: float, g1: float, x2: float, f2: float, g2: float, bounds=None) -> float:
    """The minimiser of the cubic through (x1, f1) and (x2, f2) with slopes g1, g2, clamped to
    ``bounds`` (default: between x1 and x2); the middle of the bounds when the cubic has none."""
    lo, hi = bounds if bounds is not None else ((x1, x2) if x1 <= x2 else (x2, x1))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 * d1 - g1 * g2
    if d2_square < 0:
        return (lo + hi) / 2.0
    d2 = d2_square ** 0.5
    if x1 <= x2:
        at = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        at = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(at, lo), hi)


def _bracket(evaluate, t: float, d: np.ndarray, f: float, g: np.ndarray, gtd: float, c1: float, c2: float,
             max_ls: int):
    """Phase one: step out from t until an interval holds a point with the strong Wolfe
    conditions.  Returns (bracket, its f, g, gtd lists, done, iterations, evaluations)."""
    f_new, g_new = evaluate(t)
    evals, gtd_new = 1, float(g_new @ d)
    t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
    it = 0
    while it < max_ls:
        armijo_fails = f_new > f + c1 * t * gtd or (it > 1 and f_new >= f_prev)
        if not armijo_fails and abs(gtd_new) <= -c2 * gtd:
            return [t], [f_new], [g_new], [gtd_new], True, it, evals
        if armijo_fails or gtd_new >= 0:
            return [t_prev, t], [f_prev, f_new], [g_prev, g_new], [gtd_prev, gtd_new], False, it, evals
        lo, hi = t + 0.01 * (t - t_prev), t * 10
        t, t_prev = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(lo, hi)), t
        f_prev, g_prev, gtd_prev = f_new, g_new, gtd_new
        f_new, g_new = evaluate(t)
        evals, gtd_new, it = evals + 1, float(g_new @ d), it + 1
    return [0.0, t], [f, f_new], [g, g_new], [gtd, gtd_new], False, it, evals


def _safeguard(t: float, bracket: list, insufficient: bool) -> tuple[float, bool]:
    """Keep the zoom's trial point away from the ends of the bracket (torch's 10% rule)."""
    hi, lo = max(bracket), min(bracket)
    eps = 0.1 * (hi - lo)
    if min(hi - t, t - lo) >= eps:
        return t, False
    if insufficient or t >= hi or t <= lo:
        return (hi - eps if abs(t - hi) < abs(t - lo) else lo + eps), False
    return t, True


def strong_wolfe(evaluate, t: float, d: np.ndarray, f: float, g: np.ndarray, gtd: float, c1: float = 1e-4,
                 c2: float = 0.9, tolerance_change: float = 1e-9, max_ls: int = 25):
    """A step length along ``d`` from the point with loss ``f``, gradient ``g`` and directional
    derivative ``gtd``; evaluate(t) -> (loss, flat gradient) at that step.  Returns (loss,
    gradient, t, evaluations)."""
    d_norm = float(np.abs(d).max())
    bracket, bf, bg, bgtd, done, it, evals = _bracket(evaluate, t, d, f, g.copy(), gtd, c1, c2, max_ls)
    if len(bracket) == 1:
        return bf[0], bg[0], bracket[0], evals
    insufficient = False
    low, high = (0, 1) if bf[0] <= bf[-1] else (1, 0)
    while not done and it < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = cubic_interpolate(bracket[0], bf[0], bgtd[0], bracket[1], bf[1], bgtd[1])
        t, insufficient = _safeguard(t, bracket, insufficient)
        f_new, g_new = evaluate(t)
        evals, gtd_new, it = evals + 1, float(g_new @ d), it + 1
        if f_new > f + c1 * t * gtd or f_new >= bf[low]:
            bracket[high], bf[high], bg[high], bgtd[high] = t, f_new, g_new, gtd_new
            low, high = (0, 1) if bf[0] <= bf[1] else (1, 0)
            continue
        if abs(gtd_new) <= -c2 * gtd:
            done = True
        elif gtd_new * (bracket[high] - bracket[low]) >= 0:
            bracket[high], bf[high], bg[high], bgtd[high] = bracket[low], bf[low], bg[low], bgtd[low]
        bracket[low], bf[low], bg[low], bgtd[low] = t, f_new, g_new, gtd_new
    return bf[low], bg[low], bracket[low], evals
