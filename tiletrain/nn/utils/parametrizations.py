"""torch.nn.utils.parametrizations.weight_norm: ``module.<name>`` parametrized (nn/utils/
parametrize.py) as g * v / ||v||, g and v stored as ``parametrizations.<name>.original0``
and ``original1`` (torch's names), the weight recomputed with recorded ops on each access;
spectral_norm: the weight divided by its largest singular value estimated by the power
method (buffers ``parametrizations.<name>.0._u`` and ``_v``, drawn and moved as torch's);
orthogonal (nn/utils/orthogonal.py)."""
from __future__ import annotations

from ...functional.activations import normalize
from ...ops import no_grad
from ...tensors import Tensor
from ..module import Module
from .orthogonal import orthogonal
from .parametrize import register_parametrization
from .spectral_norm import default_dim, initial_vectors, reshape_weight_to_matrix
from .weight_norm import norm_dim, norm_except_dim, weight_norm_of

__all__ = ["orthogonal", "spectral_norm", "weight_norm"]


class _WeightNorm(Module):
    def __init__(self, dim=0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g, weight_v):
        return weight_norm_of(weight_v, weight_g, self.dim)

    def right_inverse(self, weight):
        return norm_except_dim(weight, self.dim), weight


def weight_norm(module: Module, name: str = "weight", dim=0) -> Module:
    """torch.nn.utils.parametrizations.weight_norm: the norm over every dimension but
    ``dim`` (None: the whole tensor) and the direction; returns the module.  Loading a state
    dict of the old hook form (weight_g, weight_v) into it is not supported."""
    weight = module._parameters.get(name) if isinstance(module, Module) else None
    if weight is None:
        raise AttributeError(f"weight_norm: {type(module).__name__} has no parameter {name!r}")
    register_parametrization(module, name, _WeightNorm(norm_dim(dim, weight)), unsafe=True)
    return module


class _SpectralNorm(Module):
    def __init__(self, weight: Tensor, n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12) -> None:
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [-{ndim}, {ndim - 1}] but got {dim})")
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            with no_grad():
                weight_mat = reshape_weight_to_matrix(weight.detach(), self.dim)
                u, v = initial_vectors(weight_mat, eps)
                self.register_buffer("_u", u)
                self.register_buffer("_v", v)
                self._power_method(weight_mat, 15)

    def _power_method(self, weight_mat: Tensor, n_power_iterations: int) -> None:
        """u <- normalize(W v), v <- normalize(W^T u), n times, without a gradient."""
        with no_grad():
            w = weight_mat.detach()
            for _ in range(n_power_iterations):
                self._u = normalize(w.mv(self._v), dim=0, eps=self.eps)
                self._v = normalize(w.t().mv(self._u), dim=0, eps=self.eps)

    def forward(self, weight: Tensor) -> Tensor:
        if weight.ndim == 1:
            return normalize(weight, dim=0, eps=self.eps)
        weight_mat = reshape_weight_to_matrix(weight, self.dim)
        if self.training:
            self._power_method(weight_mat, self.n_power_iterations)
        sigma = self._u.dot(weight_mat.mv(self._v))
        return weight / sigma

    def right_inverse(self, value: Tensor) -> Tensor:
        return value


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12,
                  dim=None) -> Module:
    """torch.nn.utils.parametrizations.spectral_norm: ``module.<name>`` divided by its
    largest singular value, estimated by n_power_iterations steps of the power method on
    each access in training mode (15 steps at registration, one more by the registration's
    check, as torch); a 1-d weight is normalised.  dim None: 0, or 1 for
    ConvTranspose1d/2d/3d.  Returns the module."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    register_parametrization(module, name, _SpectralNorm(weight, n_power_iterations, default_dim(module, dim), eps))
    return module
