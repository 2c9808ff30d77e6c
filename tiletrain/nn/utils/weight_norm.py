"""torch.nn.utils.weight_norm and remove_weight_norm (the forward pre-hook form): a module's
parameter ``name`` becomes ``name_g`` (its norm over every dimension but ``dim``) and
``name_v`` (its direction), and ``name = v * (g / ||v||)`` is recomputed from them with
recorded ops before each forward, so their gradients come from those ops.
``norm_dim``, ``norm_except_dim`` and ``weight_norm_of`` (the formulas) are shared with
tiletrain.nn.utils.parametrizations.weight_norm."""
from __future__ import annotations

import numbers
import warnings

from ...ops import no_grad
from ...ops.elementwise import abs as _abs, div, mul
from ...ops.reduce import norm
from ...tensors import Tensor
from ..module import Module, Parameter

__all__ = ["WeightNorm", "weight_norm", "remove_weight_norm", "norm_dim", "norm_except_dim", "weight_norm_of"]


def norm_dim(dim, v: Tensor) -> int:
    """torch's dim of weight norm: None and -1 mean the norm of the whole tensor (-1, not the
    last dimension: torch's convention); other values are a dimension of v."""
    if dim is None:
        return -1
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise TypeError(f"weight_norm: dim must be an int or None, got {type(dim).__name__}")
    if dim != -1 and not -v.ndim <= dim < v.ndim:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-v.ndim}, {v.ndim - 1}], but got "
                         f"{dim})")
    return int(dim)


def norm_except_dim(v: Tensor, dim: int) -> Tensor:
    """torch.norm_except_dim(v, 2, dim): the 2-norm of v over every dimension but ``dim``,
    kept with size 1 (so it broadcasts against v); dim -1: the norm of all of v (0-d)."""
    if dim == -1:
        return norm(v)
    d = dim % v.ndim
    others = tuple(a for a in range(v.ndim) if a != d)
    return norm(v, 2, others, keepdim=True) if others else _abs(v)


def weight_norm_of(v: Tensor, g: Tensor, dim: int) -> Tensor:
    """torch._weight_norm(v, g, dim): v * (g / norm_except_dim(v, dim))."""
    return mul(v, div(g, norm_except_dim(v, dim)))


def _hooks(module: Module) -> dict:
    return module.__dict__.get("_forward_pre_hooks", {})


def find_hook(module: Module, kind: type, name: str):
    """(key, hook) of the forward pre-hook of class ``kind`` on parameter ``name``, or None
    (weight_norm's and spectral_norm's hooks)."""
    for key, hook in _hooks(module).items():
        if isinstance(hook, kind) and hook.name == name:
            return key, hook
    return None


def remove_hook(module: Module, kind: type, name: str, what: str) -> Module:
    """Undo the ``kind`` hook on ``name`` (its parameter comes back); ValueError naming ``what``
    when the module has none."""
    found = find_hook(module, kind, name)
    if found is None:
        raise ValueError(f"{what} of '{name}' not found in {module}")
    key, hook = found
    hook.remove(module)
    del _hooks(module)[key]
    return module


class WeightNorm:
    """The forward pre-hook of weight_norm: sets ``module.<name>`` from ``<name>_g`` and
    ``<name>_v`` before each forward."""

    def __init__(self, name: str, dim) -> None:
        self.name = name
        self.dim = -1 if dim is None else dim

    def compute_weight(self, module: Module) -> Tensor:
        return weight_norm_of(getattr(module, self.name + "_v"), getattr(module, self.name + "_g"), self.dim)

    @staticmethod
    def apply(module: Module, name: str, dim) -> "WeightNorm":
        warnings.warn("`torch.nn.utils.weight_norm` is deprecated in favor of "
                      "`torch.nn.utils.parametrizations.weight_norm`.", FutureWarning, stacklevel=3)
        if find_hook(module, WeightNorm, name):
            raise RuntimeError(f"Cannot register two weight_norm hooks on the same parameter {name}")
        weight = module._parameters.get(name) if isinstance(module, Module) else None
        if weight is None:
            raise AttributeError(f"weight_norm: {type(module).__name__} has no parameter {name!r}")
        fn = WeightNorm(name, norm_dim(dim, weight))
        with no_grad():
            g = norm_except_dim(weight.detach(), fn.dim)
        delattr(module, name)
        module.register_parameter(name + "_g", Parameter(g))
        module.register_parameter(name + "_v", Parameter(weight.detach()))
        setattr(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module: Module) -> None:
        with no_grad():
            weight = self.compute_weight(module)
        delattr(module, self.name)
        delattr(module, self.name + "_g")
        delattr(module, self.name + "_v")
        setattr(module, self.name, Parameter(weight))

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module: Module, name: str = "weight", dim=0) -> Module:
    """torch.nn.utils.weight_norm: reparametrise ``module.<name>`` as g * v / ||v|| (norms
    over every dimension but ``dim``; dim None: over the whole tensor), with the parameters
    ``<name>_g`` and ``<name>_v``; returns the module.  Deprecated in torch (a FutureWarning,
    as torch) in favour of tiletrain.nn.utils.parametrizations.weight_norm."""
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module: Module, name: str = "weight") -> Module:
    """torch.nn.utils.remove_weight_norm: ``<name>`` becomes a plain parameter again (its
    current value); ValueError when the module has no weight norm on ``name``."""
    return remove_hook(module, WeightNorm, name, "weight_norm")
