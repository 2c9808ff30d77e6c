"""torch.nn.utils.parametrize for parameters: ``register_parametrization(module, name, p)``
makes ``module.<name>`` the value of ``p`` applied to the stored original(s), computed with
recorded ops on every access (so gradients reach the originals), as torch: the module's
class becomes ``Parametrized<Class>`` with a property ``<name>``, the originals live in
``module.parametrizations.<name>`` as ``original`` (or ``original0``, ``original1``, ...
when ``p.right_inverse`` returns several tensors), so state dict keys are torch's.
Buffers cannot be parametrized here (NotImplementedError)."""
from __future__ import annotations

from ...ops import no_grad
from ...tensors import Tensor
from ..module import Module, ModuleDict, ModuleList, Parameter

__all__ = ["ParametrizationList", "register_parametrization", "is_parametrized", "remove_parametrizations"]


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor ("0", "1", ..., applied in order) and its originals."""

    def __init__(self, modules, original: Parameter, unsafe: bool = False) -> None:
        super().__init__(modules)
        self.unsafe = unsafe
        with no_grad():
            new = original.detach()
            for m in reversed(list(self)):
                if hasattr(m, "right_inverse"):
                    try:
                        new = m.right_inverse(new)
                    except NotImplementedError:  # taken as the identity, as torch
                        pass
        self.is_tensor = isinstance(new, Tensor)
        self.ntensors = 1 if self.is_tensor else len(new)
        if self.is_tensor:
            self.original = original
            with no_grad():
                original.copy_(new)
        else:
            for i, t in enumerate(new):
                if not isinstance(t, Tensor):
                    raise ValueError("'right_inverse' must return a Tensor or a Sequence of tensors (list, tuple...). "
                                     f"Got element {i} of the sequence with type {type(t).__name__}.")
                self.register_parameter(f"original{i}", Parameter(t.detach(), requires_grad=original.requires_grad))
        if not unsafe:
            _check_same_kind(self(), original, "Registering a parametrization")

    def right_inverse(self, value: Tensor) -> None:
        """Assigning ``module.<name> = value``: the originals take the right inverse of value."""
        with no_grad():
            for m in reversed(list(self)):
                if hasattr(m, "right_inverse"):
                    value = m.right_inverse(value)
            if self.is_tensor:
                self.original.copy_(value)
            else:
                for i, t in enumerate(value):
                    getattr(self, f"original{i}").copy_(t)

    def forward(self) -> Tensor:
        mods = list(self)
        if self.is_tensor:
            x = mods[0](self.original)
        else:
            x = mods[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        for m in mods[1:]:
            x = m(x)
        return x


def _check_same_kind(z, like: Tensor, what: str) -> None:
    """torch's consistency check of a safe parametrization: a tensor of like's dtype and shape."""
    if not isinstance(z, Tensor):
        raise ValueError(f"A parametrization must return a tensor. Got {type(z).__name__}.")
    if z.dtype != like.dtype:
        raise ValueError(f"{what} may not change the dtype of the tensor, unless the `unsafe` flag is enabled.\n"
                         f"unparametrized dtype: {like.dtype}\nparametrized dtype: {z.dtype}")
    if tuple(z.shape) != tuple(like.shape):
        raise ValueError(f"{what} may not change the shape of the tensor, unless the `unsafe` flag is enabled.\n"
                         f"unparametrized shape: {like.shape}\nparametrized shape: {z.shape}")


def _property(name: str) -> property:
    def get(self):
        return self.parametrizations[name]()

    def set_(self, value):
        self.parametrizations[name].right_inverse(value)
    return property(get, set_)


def register_parametrization(module: Module, tensor_name: str, parametrization: Module, *,
                             unsafe: bool = False) -> Module:
    """torch.nn.utils.parametrize.register_parametrization for a parameter of ``module``
    (a second one on the same name is appended to its list)."""
    if not isinstance(parametrization, Module):
        raise TypeError(f"parametrization must be a Module, got {type(parametrization).__name__}")
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        if not unsafe:
            y = getattr(module, tensor_name)
            x = parametrization(y)
            _check_same_kind(x, y, "Registering a parametrization")
            if hasattr(parametrization, "right_inverse"):
                try:
                    z = parametrization.right_inverse(x)
                except NotImplementedError:
                    pass
                else:
                    _check_same_kind(z, y, "The tensor returned by parametrization.right_inverse")
        plist = module.parametrizations[tensor_name]
        plist.append(parametrization)
        plist.unsafe |= unsafe
        return module
    if tensor_name in module._buffers:
        raise NotImplementedError("register_parametrization: parametrizing a buffer is not supported (parameters "
                                  "are)")
    original = module._parameters.get(tensor_name)
    if original is None:
        raise ValueError(f"Module '{module}' does not have a parameter, a buffer, or a parametrized element with "
                         f"name '{tensor_name}'")
    plist = ParametrizationList([parametrization], original, unsafe=unsafe)
    delattr(module, tensor_name)
    if not is_parametrized(module):
        cls = type(module)
        module.__class__ = type(f"Parametrized{cls.__name__}", (cls,), {})
        module.parametrizations = ModuleDict()
    setattr(type(module), tensor_name, _property(tensor_name))
    module.parametrizations[tensor_name] = plist
    return module


def is_parametrized(module: Module, tensor_name: str | None = None) -> bool:
    plists = module.__dict__.get("_modules", {}).get("parametrizations")
    if not isinstance(plists, ModuleDict):
        return False
    return len(plists) > 0 if tensor_name is None else tensor_name in plists


def remove_parametrizations(module: Module, tensor_name: str, leave_parametrized: bool = True) -> Module:
    """torch's remove_parametrizations: ``<name>`` becomes a plain parameter again, holding
    its current parametrized value (leave_parametrized) or the original."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {module} does not have a parametrization on {tensor_name}")
    plist = module.parametrizations[tensor_name]
    if leave_parametrized:
        with no_grad():
            value = getattr(module, tensor_name)
        requires_grad = (plist.original if plist.is_tensor else plist.original0).requires_grad
        param = Parameter(value.detach(), requires_grad=requires_grad)
    elif plist.is_tensor:
        param = plist.original
    else:
        raise ValueError("Cannot leave unparametrized (`leave_parametrized=False`) a tensor that is parametrized in "
                         "terms of a sequence of tensors.")
    delattr(type(module), tensor_name)
    delattr(module.parametrizations, tensor_name)
    module.register_parameter(tensor_name, param)
    if not is_parametrized(module):
        delattr(module, "parametrizations")
        module.__class__ = type(module).__bases__[0]
    return module
