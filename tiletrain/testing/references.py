"""NumPy references for every kernel of csrc/kernels.def, at tile level.

Each entry gives ``case(rng, dtype) -> (args, buffers)``: kernel arguments (besides dtype)
and the tile buffers in the kernel's buffer order; and ``ref(args, *buffers) -> {index:
expected}`` for every buffer the kernel writes.  tests/kernels/test_registry.py runs every
kernel body on these cases, and fails for a kernel with no entry here."""
from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import numpy as np

from ..runtime.kernels import run_cpu_body as run_cpu_kernel  # noqa: F401  (the kernel tests call it from here)
from ..tensors import DTYPES, FLOAT_DTYPES
from ._refbase import Reference, _pos, _r, round_to  # noqa: F401  (family modules import these from _refbase)
from .references_activations import gelu_grad_ref, gelu_ref



def _gemm_case(rng, dt):
    batch, m, n, k = 2, 5, 3, 4
    ta, tb = int(rng.integers(2)), int(rng.integers(2))
    a = _r(rng, dt, batch, *((k, m) if ta else (m, k)))
    b = _r(rng, dt, batch, *((n, k) if tb else (k, n)))
    c = _r(rng, dt, batch, m, n)
    return dict(batch=batch, m=m, n=n, k=k, ta=ta, tb=tb, cacc=0, alpha=0.7, beta=0.3), [a, b, c]


def _gemm_ref(a, A, B, C):
    opa = np.swapaxes(A, 1, 2) if a["ta"] else A
    opb = np.swapaxes(B, 1, 2) if a["tb"] else B
    return {2: a["alpha"] * (opa @ opb) + a["beta"] * C}


def _gemm_bias_case(rng, dt):
    fields, (a, b, _) = _gemm_case(rng, dt)
    fields = {f: v for f, v in fields.items() if f not in ("cacc", "beta")}
    m, n = fields["m"], fields["n"]
    return fields, [a, b, _r(rng, dt, n), np.full((fields["batch"], m, n), np.nan, dt)]


def _gemm_bias_ref(a, A, B, bias, C):
    return {3: _gemm_ref(dict(a, beta=0.0), A, B, np.zeros_like(C))[2] + bias}


def _gemm_gelu_case(rng, dt):
    fields, (a, b, bias, c) = _gemm_bias_case(rng, dt)
    first = int(rng.integers(2))
    if not first:  # the end of a chain: c holds the partial sums
        c = _r(rng, dt, *c.shape)
    fields = dict(fields, first=first, approx=int(rng.integers(2)), deriv=int(rng.integers(2)))
    return fields, [a, b, bias, c, np.full_like(c, np.nan)]


def _gemm_gelu_ref(a, A, B, bias, C, Y):
    h = _gemm_ref(dict(a, beta=1.0), A, B, C if not a["first"] else np.zeros_like(C))[2]
    if a["first"]:
        h = h + bias
    return {3: gelu_grad_ref(h, a["approx"]) if a["deriv"] else h, 4: gelu_ref(h, a["approx"])}


_DTYPE_OF_CODE = {code: dt for dt, code in DTYPES.items()}


def _cast_case(rng, dt):
    targets = [t for t in FLOAT_DTYPES if t != np.dtype(dt)]
    to = targets[int(rng.integers(len(targets)))]
    x = (_r(rng, np.float64, 9) * 50.0).astype(dt)  # beyond float16's precision at that range
    return dict(n=9, to=DTYPES[to]), [x, np.zeros(9, to)]


REFERENCES: dict[str, Reference] = {
    "fill": Reference(lambda rng, dt: (dict(n=7, value=2.5), [np.zeros(7, dt)]),
                      lambda a, y: {0: np.full_like(y, a["value"])}),
    "copy": Reference(lambda rng, dt: (dict(n=7), [_r(rng, dt, 7), np.zeros(7, dt)]),
                      lambda a, x, y: {1: x.copy()}),
    "after": Reference(lambda rng, dt: (dict(n=7), [_r(rng, dt, 7), _r(rng, dt, 7)]),
                       lambda a, x, y: {1: y.copy()}),  # y untouched
    "scale": Reference(lambda rng, dt: (dict(n=7, alpha=-1.5), [_r(rng, dt, 7), np.zeros(7, dt)]),
                       lambda a, x, y: {1: a["alpha"] * x}),
    "add_scalar": Reference(lambda rng, dt: (dict(n=7, alpha=2.0, s=-0.25), [_r(rng, dt, 7), np.zeros(7, dt)]),
                            lambda a, x, y: {1: a["alpha"] * x + a["s"]}),
    "rdiv_scalar": Reference(lambda rng, dt: (dict(n=7, s=3.0), [_pos(rng, dt, 7), np.zeros(7, dt)]),
                             lambda a, x, y: {1: a["s"] / x}),
    "add": Reference(lambda rng, dt: (dict(n=7, alpha=0.5, beta=-2.0),
                                      [_r(rng, dt, 7), _r(rng, dt, 7), np.zeros(7, dt)]),
                     lambda a, x, b, c: {2: a["alpha"] * x + a["beta"] * b}),
    "mul": Reference(lambda rng, dt: (dict(n=7, alpha=1.5), [_r(rng, dt, 7), _r(rng, dt, 7), np.zeros(7, dt)]),
                     lambda a, x, b, c: {2: a["alpha"] * x * b}),
    "div": Reference(lambda rng, dt: (dict(n=7, alpha=1.5), [_r(rng, dt, 7), _pos(rng, dt, 7), np.zeros(7, dt)]),
                     lambda a, x, b, c: {2: a["alpha"] * x / b}),
    "add_bcast": Reference(
        lambda rng, dt: (dict(m=3, k=5, n=4, alpha=2.0, beta=-1.0),
                         [_r(rng, dt, 3, 5, 4), np.zeros((3, 5, 4), dt), _r(rng, dt, 3, 4)]),
        lambda a, x, y, b: {1: a["alpha"] * x + a["beta"] * b[:, None, :]}),
    "bcast": Reference(
        lambda rng, dt: (dict(m=3, k=5, n=4, alpha=-2.0), [np.zeros((3, 5, 4), dt), _r(rng, dt, 3, 4)]),
        lambda a, y, b: {0: a["alpha"] * np.broadcast_to(b[:, None, :], y.shape)}),
    "axpy": Reference(lambda rng, dt: (dict(n=7, alpha=0.5, beta=-2.0), [_r(rng, dt, 7), _r(rng, dt, 7)]),
                      lambda a, x, y: {1: a["alpha"] * x + a["beta"] * y}),
    "sum_axis": Reference(
        lambda rng, dt: (dict(m=3, k=5, n=4, first=int(rng.integers(2)), alpha=2.0),
                         [_r(rng, dt, 3, 5, 4), _r(rng, dt, 3, 4)]),
        lambda a, x, y: {1: (0 if a["first"] else y) + a["alpha"] * x.sum(axis=1)}),
    "max_axis": Reference(
        lambda rng, dt: (dict(m=3, k=5, n=4, first=int(rng.integers(2))), [_r(rng, dt, 3, 5, 4), _r(rng, dt, 3, 4)]),
        lambda a, x, y: {1: x.max(axis=1) if a["first"] else np.maximum(y, x.max(axis=1))}),
    "sum_all": Reference(
        lambda rng, dt: (dict(nx=9, alpha=0.5, beta=2.0), [_r(rng, dt, 9), _r(rng, dt, 1)]),
        lambda a, x, y: {1: a["beta"] * y + a["alpha"] * x.sum(dtype=np.float64)}),
    "gemm": Reference(_gemm_case, _gemm_ref),
    "gemm_bias": Reference(_gemm_bias_case, _gemm_bias_ref),
    "gemm_gelu": Reference(_gemm_gelu_case, _gemm_gelu_ref),
    "cast": Reference(_cast_case, lambda a, x, y: {1: round_to(x, _DTYPE_OF_CODE[a["to"]])}),
}


def _merge() -> None:
    """Add every family module's REFERENCES (tiletrain/testing/references_<family>.py)."""
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda m: m.name):
        if not info.name.startswith("references_"):
            continue
        mod = importlib.import_module(f"{__package__}.{info.name}")
        dup = set(mod.REFERENCES) & set(REFERENCES)
        if dup:
            raise RuntimeError(f"kernel references defined twice: {sorted(dup)}")
        REFERENCES.update(mod.REFERENCES)


_merge()
