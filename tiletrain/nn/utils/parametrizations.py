"""torch.nn.utils.parametrizations.weight_norm: ``module.<name>`` parametrized (nn/utils/
parametrize.py) as g * v / ||v||, g and v stored as ``parametrizations.<name>.original0``
and ``original1`` (torch's names), the weight recomputed with recorded ops on each access.
The other parametrizations of torch (orthogonal, spectral_norm) are not provided."""
from __future__ import annotations

from ..module import Module
from .parametrize import register_parametrization
from .weight_norm import norm_dim, norm_except_dim, weight_norm_of

__all__ = ["weight_norm"]


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
