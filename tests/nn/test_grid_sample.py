"""F.affine_grid and F.grid_sample against torch (float64): values and the gradients with
respect to the input, the grid and theta, every supported mode, padding and align_corners,
points outside the input and on its border."""
import numpy as np
import pytest
import torch

import tiletrain as tt

THETA = np.array([[[0.9, 0.2, 0.1], [-0.3, 1.1, -0.2]], [[1.4, 0.0, 0.3], [0.1, 0.7, 0.5]]])


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border"])
def test_spatial_transformer_equals_torch(align_corners, mode, padding_mode):
    a = np.random.default_rng(0).standard_normal((2, 3, 5, 6))
    out = []
    for m in (torch, tt):
        theta, x = m.tensor(THETA, requires_grad=True), m.tensor(a, requires_grad=True)
        grid = m.nn.functional.affine_grid(theta, (2, 3, 4, 7), align_corners=align_corners)
        y = m.nn.functional.grid_sample(x, grid, mode=mode, padding_mode=padding_mode, align_corners=align_corners)
        (y * y).sum().backward()
        out.append((grid.detach().numpy(), y.detach().numpy(), x.grad.numpy(), theta.grad.numpy()))
    for u, v in zip(*out):
        np.testing.assert_allclose(v, u, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("padding_mode", ["zeros", "border"])
def test_grid_sample_of_a_free_grid_equals_torch(padding_mode):
    """A grid with points outside [-1, 1] and exactly on it: the values, the input's and the
    grid's gradients."""
    rng = np.random.default_rng(1)
    a, g = rng.standard_normal((2, 2, 4, 5)), rng.uniform(-1.3, 1.3, (2, 3, 4, 2))
    g[0, 0, 0] = [1.0, -1.0]
    out = []
    for m in (torch, tt):
        x, grid = m.tensor(a, requires_grad=True), m.tensor(g, requires_grad=True)
        y = m.nn.functional.grid_sample(x, grid, padding_mode=padding_mode, align_corners=True)
        y.backward(m.tensor(np.arange(y.numel(), dtype=np.float64).reshape(tuple(y.shape)) / 10))
        out.append((y.detach().numpy(), x.grad.numpy(), grid.grad.numpy()))
    for u, v in zip(*out):
        np.testing.assert_allclose(v, u, rtol=1e-11, atol=1e-12)


def test_grid_sample_refuses_what_it_does_not_support():
    F = tt.nn.functional
    x, grid = tt.zeros(1, 1, 3, 3), tt.zeros(1, 2, 2, 2)
    with pytest.raises(NotImplementedError, match="bicubic"):
        F.grid_sample(x, grid, mode="bicubic")
    with pytest.raises(NotImplementedError, match="reflection"):
        F.grid_sample(x, grid, padding_mode="reflection")
    with pytest.raises(RuntimeError, match="grid"):
        F.grid_sample(x, tt.zeros(1, 2, 2, 3))
    with pytest.raises(ValueError, match="Nx2x3"):
        F.affine_grid(tt.zeros(1, 3, 3), (1, 1, 2, 2))
