"""torch.nn.utils.spectral_norm and remove_spectral_norm (the forward pre-hook form): a
module's parameter ``name`` becomes ``name_orig`` and ``name = name_orig / sigma`` is
recomputed before each forward, sigma = u . (W v) with W the parameter as a matrix (the
``dim`` axis first, the others flattened) and u, v the buffers ``name_u`` and ``name_v``: in
training mode first moved by ``n_power_iterations`` steps of the power method (without a
gradient), in eval mode used as stored.  u and v start as normal draws from the default
generator, normalised (torch's draws and order: the same numbers after the same seed).
``reshape_weight_to_matrix`` and ``power_step`` are shared with
tiletrain.nn.utils.parametrizations.spectral_norm."""
from __future__ import annotations

import numbers

from ...functional.activations import normalize
from ...ops import no_grad
from ...ops.creation import normal_values
from ...tensors import Tensor
from ..conv import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from ..module import Module, Parameter
from .weight_norm import find_hook, remove_hook

__all__ = ["SpectralNorm", "spectral_norm", "remove_spectral_norm", "reshape_weight_to_matrix",
           "initial_vectors", "default_dim"]


def reshape_weight_to_matrix(weight: Tensor, dim: int) -> Tensor:
    """weight with axis ``dim`` first, the other axes flattened: (size of dim, rest)."""
    if dim != 0:
        weight = weight.permute(dim, *[d for d in range(weight.ndim) if d != dim])
    return weight.reshape(weight.shape[0], -1)


def initial_vectors(weight_mat: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """u (rows) and v (columns): normal draws, u first, each normalised (torch's order)."""
    h, w = weight_mat.shape
    u = normalize(normal_values(weight_mat.new_empty(h)), dim=0, eps=eps)
    v = normalize(normal_values(weight_mat.new_empty(w)), dim=0, eps=eps)
    return u, v


def default_dim(module: Module, dim) -> int:
    """torch's default: 1 for the transposed convolutions (their output axis), else 0."""
    if dim is None:
        return 1 if isinstance(module, (ConvTranspose1d, ConvTranspose2d, ConvTranspose3d)) else 0
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise TypeError(f"spectral_norm: dim must be an int or None, got {type(dim).__name__}")
    return int(dim)


class SpectralNorm:
    """The forward pre-hook of spectral_norm: sets ``module.<name>`` from ``<name>_orig``,
    ``<name>_u`` and ``<name>_v`` before each forward."""

    _version: int = 1

    def __init__(self, name: str = "weight", n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12) -> None:
        self.name = name
        self.dim = dim
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.n_power_iterations = n_power_iterations
        self.eps = eps

    def reshape_weight_to_matrix(self, weight: Tensor) -> Tensor:
        return reshape_weight_to_matrix(weight, self.dim)

    def compute_weight(self, module: Module, do_power_iteration: bool) -> Tensor:
        """weight_orig / sigma; with do_power_iteration, u and v (the buffers) first take
        n_power_iterations steps v <- normalize(W^T u), u <- normalize(W v)."""
        weight = getattr(module, self.name + "_orig")
        u, v = getattr(module, self.name + "_u"), getattr(module, self.name + "_v")
        weight_mat = self.reshape_weight_to_matrix(weight)
        if do_power_iteration:
            with no_grad():
                wd = weight_mat.detach()
                for _ in range(self.n_power_iterations):
                    v = normalize(wd.t().mv(u), dim=0, eps=self.eps)
                    u = normalize(wd.mv(v), dim=0, eps=self.eps)
                setattr(module, self.name + "_u", u)
                setattr(module, self.name + "_v", v)
        sigma = u.dot(weight_mat.mv(v))
        return weight / sigma

    def remove(self, module: Module) -> None:
        with no_grad():
            weight = self.compute_weight(module, do_power_iteration=False)
        for suffix in ("", "_u", "_v", "_orig"):
            delattr(module, self.name + suffix)
        module.register_parameter(self.name, Parameter(weight.detach()))

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module, do_power_iteration=module.training))

    @staticmethod
    def apply(module: Module, name: str, n_power_iterations: int, dim: int, eps: float) -> "SpectralNorm":
        if find_hook(module, SpectralNorm, name):
            raise RuntimeError(f"Cannot register two spectral_norm hooks on the same parameter {name}")
        fn = SpectralNorm(name, n_power_iterations, dim, eps)
        weight = module._parameters.get(name) if isinstance(module, Module) else None
        if weight is None:
            raise ValueError(f"`SpectralNorm` cannot be applied as parameter `{name}` is None")
        if weight.ndim < 1 or not -weight.ndim <= dim < weight.ndim:
            raise IndexError(f"spectral_norm: dim {dim} is out of range for a parameter of shape {weight.shape}")
        with no_grad():
            u, v = initial_vectors(fn.reshape_weight_to_matrix(weight.detach()), fn.eps)
        delattr(module, fn.name)
        module.register_parameter(fn.name + "_orig", weight)
        object.__setattr__(module, fn.name, weight.detach())  # a plain attribute until the first forward
        module.register_buffer(fn.name + "_u", u)
        module.register_buffer(fn.name + "_v", v)
        module.register_forward_pre_hook(fn)
        return fn


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12,
                  dim=None) -> Module:
    """torch.nn.utils.spectral_norm: ``module.<name>`` divided by its largest singular
    value as estimated by the power method (parameter ``<name>_orig``, buffers ``<name>_u``
    and ``<name>_v``); dim None: 0, or 1 for ConvTranspose1d/2d/3d.  Returns the module."""
    SpectralNorm.apply(module, name, n_power_iterations, default_dim(module, dim), eps)
    return module


def remove_spectral_norm(module: Module, name: str = "weight") -> Module:
    """torch.nn.utils.remove_spectral_norm: ``<name>`` becomes a plain parameter again (its
    value with the stored u and v); ValueError when the module has no spectral norm on it."""
    return remove_hook(module, SpectralNorm, name, "spectral_norm")
