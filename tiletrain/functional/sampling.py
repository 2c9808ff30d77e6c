"""torch.nn.functional.affine_grid and grid_sample (2-D: spatial transformers, warping),
composed of recorded ops: the sampling positions are read on the host to choose the pixels
(index tensors), the interpolation weights are ops of the grid, so gradients flow to the
input and to the grid (and through affine_grid to theta), as torch's."""
from __future__ import annotations

import numpy as np

from ..ops.elementwise import add, mul, sub, where
from ..ops.index import gather, index_get
from ..ops.linalg import matmul
from ..ops.shape import reshape, transpose
from ..tensors import Tensor, from_numpy

__all__ = ["affine_grid", "grid_sample"]


def _base(n: int, align_corners: bool) -> np.ndarray:
    """The n normalised pixel-centre coordinates in [-1, 1] (align_corners: the corner pixels' centres)."""
    if n <= 1:
        return np.zeros(max(n, 1))
    lin = np.linspace(-1.0, 1.0, n)
    return lin if align_corners else lin * (n - 1) / n


def affine_grid(theta: Tensor, size, align_corners=None) -> Tensor:
    """The (N, H, W, 2) sampling grid of the (N, 2, 3) affine matrices theta for an output of
    size (N, C, H, W): grid[n, h, w] = theta[n] @ (x_w, y_h, 1)."""
    if align_corners is None:
        align_corners = False
    size = tuple(size)
    if len(size) != 4:
        raise NotImplementedError(f"affine_grid: only 4-D sizes (N, C, H, W) are supported, got {size}")
    N, _, H, W = size
    if not isinstance(theta, Tensor) or theta.ndim != 3 or tuple(theta.shape) != (N, 2, 3):
        raise ValueError(f"Expected a batch of 2D affine matrices of shape Nx2x3 for size {list(size)}. Got "
                         f"{list(theta.shape) if isinstance(theta, Tensor) else type(theta).__name__}.")
    xs, ys = _base(W, align_corners), _base(H, align_corners)
    base = np.stack([np.tile(xs, H), np.repeat(ys, W), np.ones(H * W)], axis=1)  # (H*W, 3)
    grid = matmul(from_numpy(np.ascontiguousarray(base.astype(theta.dtype))), transpose(theta, 1, 2))  # (N, H*W, 2)
    return reshape(grid, (N, H, W, 2))


def _unnormalize(g: Tensor, size: int, align_corners: bool) -> Tensor:
    if align_corners:
        return mul(add(g, 1.0), (size - 1) / 2)
    return mul(sub(mul(add(g, 1.0), float(size)), 1.0), 0.5)


def _corner(flat: Tensor, xi: np.ndarray, yi: np.ndarray, H: int, W: int, C: int) -> tuple[Tensor, np.ndarray]:
    """input[n, :, yi, xi] for integer positions (N, P) as (N, C, P), and the in-bounds mask."""
    inside = (xi >= 0) & (xi < W) & (yi >= 0) & (yi < H)
    lin = np.where(inside, yi * W + xi, 0).astype(np.int64)
    idx = np.ascontiguousarray(np.broadcast_to(lin[:, None, :], (lin.shape[0], C, lin.shape[1])))
    return gather(flat, 2, from_numpy(idx)), inside


def _positions(input: Tensor, grid: Tensor, padding_mode: str, align_corners: bool):  # noqa: A002
    """The source positions ix, iy (N, P) as tensors (padded: clamped to the border)."""
    N, P = grid.shape[0], grid.shape[1] * grid.shape[2]
    g = reshape(grid, (N, P, 2))
    ix = _unnormalize(index_get(g, (slice(None), slice(None), 0)), input.shape[3], align_corners)
    iy = _unnormalize(index_get(g, (slice(None), slice(None), 1)), input.shape[2], align_corners)
    if padding_mode == "border":  # clamped; the gradient is 0 on and beyond the border, as torch's
        ix, iy = _clip(ix, input.shape[3] - 1.0), _clip(iy, input.shape[2] - 1.0)
    return ix, iy


def _clip(t: Tensor, hi: float) -> Tensor:
    a = t.numpy(force=True)
    strictly_inside = from_numpy(np.ascontiguousarray((a > 0) & (a < hi)))
    return where(strictly_inside, t, from_numpy(np.clip(a, 0.0, hi).astype(a.dtype)))


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros",  # noqa: A002
                align_corners=None) -> Tensor:
    """input (N, C, H, W) sampled at grid (N, Ho, Wo, 2) (x, y in [-1, 1]): (N, C, Ho, Wo).
    mode "bilinear" or "nearest" (ties to even, as torch); padding_mode "zeros" or "border"."""
    if align_corners is None:
        align_corners = False
    if mode not in ("bilinear", "nearest"):
        raise NotImplementedError(f"grid_sample: mode {mode!r} is not supported ('bilinear', 'nearest' are)")
    if padding_mode not in ("zeros", "border"):
        raise NotImplementedError(f"grid_sample: padding_mode {padding_mode!r} is not supported ('zeros', 'border' are)")
    if not isinstance(input, Tensor) or input.ndim != 4:
        raise NotImplementedError("grid_sample: only 4-D inputs (N, C, H, W) are supported")
    if not isinstance(grid, Tensor) or grid.ndim != 4 or grid.shape[3] != 2 or grid.shape[0] != input.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid of shape (N, H_out, W_out, 2) with N={input.shape[0]}, "
                           f"got {list(grid.shape) if isinstance(grid, Tensor) else type(grid).__name__}")
    N, C, H, W = input.shape
    Ho, Wo = grid.shape[1], grid.shape[2]
    flat = reshape(input, (N, C, H * W))
    ix, iy = _positions(input, grid, padding_mode, align_corners)
    hx, hy = ix.numpy(force=True), iy.numpy(force=True)
    if mode == "nearest":
        out, inside = _corner(flat, np.rint(hx).astype(np.int64), np.rint(hy).astype(np.int64), H, W, C)
        out = mul(out, from_numpy(np.ascontiguousarray(inside[:, None, :].astype(input.dtype))))
        out = add(out, reshape(mul(ix, 0.0), (N, 1, Ho * Wo)))  # the grid gets torch's zero gradient
        return reshape(out, (N, C, Ho, Wo))
    x0, y0 = np.floor(hx), np.floor(hy)
    cx0, cy0 = from_numpy(x0.astype(input.dtype)), from_numpy(y0.astype(input.dtype))
    dx1, dy1 = sub(ix, cx0), sub(iy, cy0)  # ix - x0, iy - y0
    dx0, dy0 = sub(add(cx0, 1.0), ix), sub(add(cy0, 1.0), iy)  # x1 - ix, y1 - iy
    out = None
    for wx, wy, xi, yi in ((dx0, dy0, x0, y0), (dx1, dy0, x0 + 1, y0), (dx0, dy1, x0, y0 + 1), (dx1, dy1, x0 + 1, y0 + 1)):
        vals, inside = _corner(flat, xi.astype(np.int64), yi.astype(np.int64), H, W, C)
        w = mul(mul(wx, wy), from_numpy(inside.astype(input.dtype)))
        term = mul(vals, reshape(w, (N, 1, Ho * Wo)))
        out = term if out is None else add(out, term)
    return reshape(out, (N, C, Ho, Wo))
