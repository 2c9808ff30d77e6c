"""F.pad's non-constant modes ("reflect", "replicate", "circular"): each padded dim is an
index selection of the input's, so the gradient is the selection's (summed where an input
element is read more than once)."""
from __future__ import annotations

import numpy as np

from ..ops.index import index_select
from ..tensors import Tensor, from_numpy

_PAD_DIMS = {2: (2, 3), 4: (3, 4), 6: (4, 5)}


def _pad_index(n: int, lo: int, hi: int, mode: str, d: int, shape) -> np.ndarray:
    j = np.arange(-lo, n + hi, dtype=np.int64)
    if mode == "reflect":
        if lo >= n or hi >= n:
            raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding input dimension, "
                               f"but got: padding ({lo}, {hi}) at dimension {d} of input {list(shape)}")
        j = np.abs(j)
        j = np.where(j >= n, 2 * (n - 1) - j, j)
    elif mode == "replicate":
        j = np.clip(j, 0, n - 1)
    else:
        if lo > n or hi > n:
            raise RuntimeError("Padding value causes wrapping around more than once.")
        j = np.mod(j, n)
    if j.size <= 0:
        raise RuntimeError(f"pad: the padded size of dimension {d} would be <= 0")
    return np.ascontiguousarray(j)


def pad_modes(input: Tensor, pad, mode: str) -> Tensor:  # noqa: A002
    """F.pad's "reflect" (mirror, the edge not repeated), "replicate" (the edge repeated) and
    "circular" (wrap around): each padded dim is an index selection of the input's."""
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if len(pad) not in _PAD_DIMS or input.ndim not in _PAD_DIMS[len(pad)]:
        raise NotImplementedError(f"Only 2D, 3D, 4D, 5D padding with non-constant padding are supported for now "
                                  f"(padding length {len(pad)}, input of dimension {input.ndim})")
    x = input
    for i in range(len(pad) // 2):
        d = x.ndim - 1 - i
        idx = _pad_index(input.shape[d], int(pad[2 * i]), int(pad[2 * i + 1]), mode, d, input.shape)
        x = index_select(x, d, from_numpy(idx))
    return x
