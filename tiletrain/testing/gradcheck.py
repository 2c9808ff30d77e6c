"""Vector-Jacobian product check by central finite differences (float64).

For f(x_1..x_n) -> y, a random output direction v and random input directions u_i:
analytic  sum_i <grad_i, u_i>  where grad_i = d<v, f>/dx_i from tiletrain's backward,
numeric   (<v, f(x + eps u)> - <v, f(x - eps u)>) / (2 eps), checked per input."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

import tiletrain as tt


def vjp_check(fn: Callable, inputs: Sequence[np.ndarray], tiles: Sequence, *, eps: float = 1e-6,
              rtol: float = 1e-6, seed: int = 0, out_tiles=None) -> list[tuple[float, float]]:
    """Raise AssertionError when an input's directional derivative disagrees.  ``fn`` takes
    tiletrain tensors (float64, tiled with ``tiles``) and returns one tensor.  Returns the
    (analytic, numeric) pairs."""
    rng = np.random.default_rng(seed)
    xs = [np.asarray(x, dtype=np.float64) for x in inputs]

    def run(arrays, grad=False):
        ts = [tt.from_numpy(a, t) for a, t in zip(arrays, tiles)]
        if grad:
            for t in ts:
                t.requires_grad_()
        return ts, fn(*ts)

    ts, y = run(xs, grad=True)
    v = rng.standard_normal(y.shape)
    y.backward(tt.from_numpy(v, y.tiles))
    grads = [t.grad.numpy(force=True) if t.grad is not None else np.zeros_like(x) for t, x in zip(ts, xs)]
    results = []
    for i, x in enumerate(xs):
        u = rng.standard_normal(x.shape)
        plus = [a + eps * u if j == i else a for j, a in enumerate(xs)]
        minus = [a - eps * u if j == i else a for j, a in enumerate(xs)]
        with tt.no_grad():
            fp = float(np.sum(run(plus)[1].numpy(force=True) * v))
            fm = float(np.sum(run(minus)[1].numpy(force=True) * v))
        numeric = (fp - fm) / (2 * eps)
        analytic = float(np.sum(grads[i] * u))
        scale = max(abs(numeric), abs(analytic), 1e-12)
        if abs(analytic - numeric) > rtol * scale + 1e-10:
            raise AssertionError(f"input {i}: analytic directional derivative {analytic!r} != numeric "
                                 f"{numeric!r} (relative error {abs(analytic - numeric) / scale:.2e})")
        results.append((analytic, numeric))
    return results
