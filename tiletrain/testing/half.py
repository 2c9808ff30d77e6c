"""float16/bfloat16 kernel cases for the registry and device tests: the kernel-table
references run on half tiles, expected values computed in float64 from the same rounded
inputs, and the tolerance of one final rounding."""
from __future__ import annotations

import numpy as np

from ..runtime.registry import KERNELS
from ..tensors import DTYPES, HALF_DTYPES
from .references import REFERENCES

# Unit roundoff u = 2^-(p) of each half type (p = significand bits incl. the implicit one):
# one round-to-nearest has a relative error of at most u.
UNIT_ROUNDOFF = {np.dtype(np.float16): 2.0 ** -11, HALF_DTYPES[1]: 2.0 ** -8}


def half_kernels() -> list[str]:
    """The kernels whose table line lists f16 or bf16 (both: the generator takes them together)."""
    return [name for name, info in KERNELS.items() if info.takes(DTYPES[HALF_DTYPES[0]])]


def half_case(name: str, rng, dtype):
    """(fields, buffers, expected) for kernel ``name`` on ``dtype`` tiles: the reference's
    case with its `acc` buffers in float32, expected values in float64 from those inputs."""
    acc = KERNELS[name].acc_buffers
    fields, buffers = REFERENCES[name].case(rng, dtype)
    buffers = [np.ascontiguousarray(b.astype(np.float32) if acc >> i & 1 else b) for i, b in enumerate(buffers)]
    expected = REFERENCES[name].ref(fields, *[b.astype(np.float64) for b in buffers])
    return fields, buffers, expected


def check_half_result(got: np.ndarray, exp, what: str) -> None:
    """A half buffer within one rounding of the float64 value (plus float32 arithmetic, far
    below it); a float32 accumulator (or cast target) within float32 accuracy, a float64 cast
    target exactly."""
    exp = np.asarray(exp, dtype=np.float64).reshape(got.shape)
    g = got.astype(np.float64)
    scale = max(1.0, float(np.abs(exp).max(initial=0.0)))
    if got.dtype == np.float64:
        np.testing.assert_array_equal(g, exp, err_msg=what)
        return
    if got.dtype == np.float32:
        np.testing.assert_allclose(g, exp, rtol=1e-5, atol=1e-6 * scale, err_msg=what)
        return
    u = UNIT_ROUNDOFF[got.dtype]
    err = np.abs(g - exp)
    bound = u * np.abs(exp) + 1e-6 * scale
    assert np.all(err <= bound), f"{what}: max error {err.max():.3g} beyond one rounding ({u:.3g} relative)"


def dtype_code(dtype) -> int:
    return DTYPES[np.dtype(dtype)]
