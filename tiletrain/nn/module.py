"""Module and Parameter: the containers that model code is written with.

A Module registers the attributes assigned to it that are Parameters or Modules, in
assignment order (its own parameters first, then its submodules, as torch.nn.Module), so
that ``named_parameters()`` yields dotted names such as ``transformer.h.0.attn.c_attn.weight``.
A Parameter is a Tensor that requires gradients.  ``state_dict()`` gives detached tensors
sharing the parameters' tiles (as torch's; ``state_arrays(module)`` gathers NumPy copies);
``load_state_dict()`` writes into the existing parameters' tiles in place, so optimizers
holding them and tied weights stay valid; a checkpoint's StoredTensor streams from the file
into the tiles a block of tile rows at a time (no host copy of the weight)."""
from __future__ import annotations

import numbers
import warnings
from collections import OrderedDict, namedtuple
from typing import Iterator

import numpy as np

from ..distribution import use
from ..ops import no_grad
from ..ops.basic import zero_grads
from ..ops.index import assign_
from ..tensors import TensorTraits, from_numpy
from ..tensors.api import Tensor  # the user-facing class: Parameter has its methods
from ..tensors.device import parse_to
from ..tensors.tensor import as_dtype, write_rows_

__all__ = ["Parameter", "Module", "ModuleList", "ModuleDict", "IncompatibleKeys", "to_numpy", "state_arrays"]


class Parameter(Tensor):
    """A Tensor that requires gradients and is registered by a Module.

    ``Parameter(data, tiles=None, requires_grad=True)``: data is a tiletrain Tensor (the
    parameter shares its tiles, no copy) or a NumPy array (copied into a tensor with the given
    tile shape).  As in torch, ``Parameter(data, False)`` makes one without gradients (a bool
    is never a tile shape)."""

    __slots__ = ()

    def __init__(self, data, tiles=None, requires_grad: bool = True):
        if isinstance(tiles, bool):  # torch's Parameter(data, requires_grad)
            tiles, requires_grad = None, tiles
        if not isinstance(requires_grad, bool):
            raise TypeError(f"Parameter: requires_grad must be a bool, got {type(requires_grad).__name__}")
        if isinstance(data, np.ndarray):
            data = from_numpy(np.ascontiguousarray(data), tiles)
        elif not isinstance(data, Tensor):
            raise TypeError("Parameter: data must be a tiletrain Tensor or a numpy.ndarray, "
                            f"got {type(data).__name__}")
        elif tiles is not None and TensorTraits(data.shape, tiles).tiles != data.tiles:
            raise ValueError(f"Parameter: tiles={tiles} given for a tensor that already has tiles "
                             f"{data.tiles}")
        data._handle("Parameter")
        if data.dtype not in (np.float32, np.float64):
            raise TypeError(f"Parameter: parameters must be float32 or float64, got {data.dtype}")
        # share data's tiles (as Tensor.detach does); data stays alive as long as the parameter
        self.traits, self.dtype, self._ptr, self._session = data.traits, data.dtype, data._ptr, data._session
        self._base = data if data._base is None else data._base
        self.grad, self._node, self.value_range, self._read = None, None, None, False
        self.requires_grad = requires_grad

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def to_numpy(value, name: str = "value") -> np.ndarray:
    """A NumPy array from a NumPy array, a tiletrain Tensor or a torch tensor (any device,
    with or without requires_grad; float16/bfloat16 are widened to float32)."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, Tensor):
        return value.numpy(force=True)
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, without importing torch
        value = value.detach().cpu()
        if str(value.dtype) in ("torch.bfloat16", "torch.float16"):
            value = value.float()
        return value.numpy()
    if isinstance(value, (numbers.Number, list, tuple)):
        return np.asarray(value)
    raise TypeError(f"{name}: expected a numpy array or a torch tensor, got {type(value).__name__}")


def state_arrays(module: "Module") -> dict[str, np.ndarray]:
    """{name: NumPy copy} of ``module.state_dict()`` (a tied weight under each of its names as
    the same array).  Waits for the tasks that write the parameters."""
    arrays: dict[int, np.ndarray] = {}
    out = {}
    for name, t in module.state_dict(keep_vars=True).items():
        if id(t) not in arrays:
            arrays[id(t)] = t.numpy(force=True)
        out[name] = arrays[id(t)]
    return out


class Module:
    """Base class of every layer and model.

    Assigning a Parameter or a Module to an attribute registers it; ``named_parameters()``
    lists the registered parameters with dotted names (each parameter once: a tied weight is
    listed under the first name it was registered with), ``state_dict()`` lists them under
    every name.  ``__call__`` runs ``forward``."""

    training: bool

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_non_persistent", set())  # buffers state_dict() leaves out
        object.__setattr__(self, "training", True)

    # -- registration -----------------------------------------------------------------
    def __setattr__(self, name: str, value) -> None:
        params = self.__dict__.get("_parameters")
        if params is None and isinstance(value, (Parameter, Module)):
            raise AttributeError(f"cannot assign {type(value).__name__} {name!r} before Module.__init__() is "
                                 f"called (call super().__init__() first in {type(self).__name__}.__init__)")
        if params is not None:
            mods = self.__dict__["_modules"]
            params.pop(name, None)
            mods.pop(name, None)
            buffers = self.__dict__["_buffers"]
            if name in buffers and not isinstance(value, (Parameter, Module)):
                buffers[name] = self._buffer_value(name, value)
            if isinstance(value, Parameter):
                buffers.pop(name, None)
                params[name] = value
            elif isinstance(value, Module):
                mods[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self.__dict__["_buffers"].pop(name, None)
        self.__dict__["_parameters"].pop(name, None)
        self.__dict__["_modules"].pop(name, None)
        object.__delattr__(self, name)

    # -- buffers: state that is not trained (batch norm's running statistics) -----------
    def register_buffer(self, name: str, value, persistent: bool = True) -> None:
        """Register ``value`` (a tiletrain Tensor, a NumPy array kept on the host, or None) as
        buffer ``name``: listed by ``named_buffers()``, saved by ``state_dict()`` and
        written in place by ``load_state_dict()`` unless persistent=False, as
        torch.nn.Module.register_buffer."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot register a buffer before Module.__init__() is called")
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f"register_buffer: bad buffer name {name!r}")
        if name in self._parameters or name in self._modules:
            raise KeyError(f"register_buffer: attribute {name!r} already exists")
        self.__dict__["_buffers"][name] = self._buffer_value(name, value)
        nonp = self.__dict__.setdefault("_non_persistent", set())
        (nonp.discard if persistent else nonp.add)(name)
        object.__setattr__(self, name, value)

    def _own_persistent_buffers(self) -> Iterator[tuple[str, object]]:
        """This module's own buffers that state_dict() holds (not None, not persistent=False)."""
        nonp = self.__dict__.get("_non_persistent", ())
        return ((bname, b) for bname, b in self._buffers.items() if b is not None and bname not in nonp)

    def _state_buffers(self) -> Iterator[tuple[str, object]]:
        """The persistent buffers (those state_dict() holds), with dotted names."""
        for mname, m in self.named_modules():
            for bname, b in m._own_persistent_buffers():
                yield (f"{mname}.{bname}" if mname else bname), b

    def register_parameter(self, name: str, param) -> None:
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign {type(param).__name__} as parameter {name!r} (a Parameter or None)")
        if param is None:
            self.__dict__["_parameters"].pop(name, None)
            object.__setattr__(self, name, None)
        else:
            setattr(self, name, param)

    def add_module(self, name: str, module) -> None:
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        setattr(self, name, module)

    register_module = add_module

    def get_submodule(self, target: str) -> "Module":
        """The submodule at dotted path ``target`` ("" : this module), with torch's errors."""
        m = self
        for part in target.split(".") if target else []:
            if part not in m._modules:
                if hasattr(m, part):
                    raise AttributeError(f"`{part}` is not an nn.Module")
                raise AttributeError(f"{type(m).__name__} has no attribute `{part}`")
            m = m._modules[part]
        return m

    def apply(self, fn) -> "Module":
        """fn(module) on every submodule (children first), then on this module, as torch."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def to(self, *args, **kwargs) -> "Module":
        """torch's Module.to(device) / to(dtype): the device is checked and kept (StarPU places
        the tasks); a float dtype converts the floating-point parameters and buffers in place
        (the Parameter objects stay the same, as torch's)."""
        dtype = parse_to("Module.to", args, kwargs)
        return self if dtype is None else self._cast(dtype)

    def _cast(self, dtype) -> "Module":
        from ..ops.elementwise import convert
        from ..tensors import is_float
        want = as_dtype(dtype)
        if not is_float(want):
            raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got desired dtype={want}")
        with no_grad():
            for m in self.modules():
                for table in (m._parameters, m._buffers):
                    for t in table.values():
                        if isinstance(t, Tensor) and is_float(t.dtype) and t.dtype != want:
                            rg, c = t.requires_grad, convert(t, want)
                            t._take(c)
                            t.requires_grad, t.grad = rg, None
        return self

    def double(self) -> "Module":
        return self._cast(np.float64)

    def float(self) -> "Module":  # noqa: A003 - torch's name
        return self._cast(np.float32)

    def half(self) -> "Module":
        from ..tensors import float16
        return self._cast(float16)

    def bfloat16(self) -> "Module":
        from ..tensors import bfloat16
        return self._cast(bfloat16)

    def type(self, dst_type) -> "Module":  # noqa: A003
        return self._cast(dst_type)

    def cuda(self, device=None) -> "Module":
        raise RuntimeError("Module.cuda(): tiletrain tensors are not bound to a device; StarPU runs each task on a "
                           "CPU or GPU worker (tiletrain.init(ncuda=...)): keep the model on 'cpu'")

    def get_parameter(self, target: str):
        mod, _, name = target.rpartition(".")
        m = self.get_submodule(mod) if mod else self
        if name not in m._parameters:
            raise AttributeError(f"{type(m).__name__} has no parameter `{name}`")
        return m._parameters[name]

    def get_buffer(self, target: str):
        mod, _, name = target.rpartition(".")
        m = self.get_submodule(mod) if mod else self
        if name not in m._buffers:
            raise AttributeError(f"{type(m).__name__} has no buffer `{name}`")
        return m._buffers[name]

    def register_forward_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False):
        """hook(module, args, output) after forward (its return value, when not None, replaces
        the output); returns a handle whose remove() takes it off."""
        return _Hooks.add(self, "_forward_hooks", hook, prepend)

    def register_forward_pre_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False):
        """hook(module, args) before forward (a returned value replaces the args: a tuple, or
        one value)."""
        return _Hooks.add(self, "_forward_pre_hooks", hook, prepend)

    def cpu(self) -> "Module":
        return self
    @staticmethod
    def _buffer_value(name: str, value):
        if value is not None and not isinstance(value, (Tensor, np.ndarray)):
            raise TypeError(f"buffer {name!r} must be a tiletrain Tensor, a numpy.ndarray or None, "
                            f"got {type(value).__name__}")
        return value

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, object]]:
        """(dotted name, buffer) for this module's buffers (None skipped), then each submodule's."""
        modules = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mname, m in modules:
            for bname, b in m._buffers.items():
                if b is not None:
                    yield (f"{mname}.{bname}" if mname else bname), b

    def buffers(self, recurse: bool = True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        if "_forward_hooks" in self.__dict__ or "_forward_pre_hooks" in self.__dict__:
            return _Hooks.call(self, args, kwargs)
        return self._call(*args, **kwargs)

    def _call(self, *args, **kwargs):
        place = self.__dict__.get("placement")  # where this module's work runs (MPI)
        if place is None:
            return self.forward(*args, **kwargs)
        if hasattr(place, "resolve"):  # a pipeline stage (tiletrain.parallel.Stage): its rank now
            place = place.resolve()
        with use(place):
            return self.forward(*args, **kwargs)

    # -- traversal --------------------------------------------------------------------
    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        yield from self._modules.items()

    def children(self) -> Iterator["Module"]:
        for _, m in self.named_children():
            yield m

    def named_modules(self, prefix: str = "", remove_duplicate: bool = True, _memo=None):
        """(dotted name, module) for this module ("" unless prefix is given) and every submodule."""
        memo = set() if _memo is None else _memo
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            yield from m.named_modules(f"{prefix}.{name}" if prefix else name, remove_duplicate, memo)

    def modules(self) -> Iterator["Module"]:
        for _, m in self.named_modules():
            yield m

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, parameter): this module's parameters in assignment order, then each
        submodule's.  With remove_duplicate (the default) a parameter registered under
        several names (tied weights) is yielded once, under its first name."""
        seen: set[int] = set()
        if recurse:
            modules = self.named_modules(prefix, remove_duplicate=remove_duplicate)
        else:
            modules = [(prefix, self)]
        for mname, m in modules:
            for pname, p in m._parameters.items():
                if remove_duplicate:
                    if id(p) in seen:
                        continue
                    seen.add(id(p))
                yield (f"{mname}.{pname}" if mname else pname), p

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def num_parameters(self) -> int:
        """Number of parameter elements (a tied weight counted once)."""
        return sum(p.numel() for p in self.parameters())

    # -- modes ------------------------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        """Set ``training`` on this module and every submodule (dropout is active in training)."""
        if not isinstance(mode, bool):
            raise TypeError(f"train(mode): mode must be a bool, got {type(mode).__name__}")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every parameter's gradient (the next backward creates fresh ones), or with
        set_to_none=False fill them with zeros."""
        zero_grads(self.parameters(), set_to_none)

    # -- state ------------------------------------------------------------------------
    def state_dict(self, *args, destination=None, prefix: str = "", keep_vars: bool = False) -> dict:
        """torch's state_dict: an OrderedDict {dotted name: tensor} of every parameter and
        persistent buffer, module by module (its parameters, its buffers, then each
        submodule's), a tied weight under each of its names.  The values are detached tensors
        sharing the parameters' tiles (no copy, nothing waits: writing one in place under
        no_grad writes the model); keep_vars=True gives the Parameters and buffers themselves
        (BatchNorm's num_batches_tracked too, a 0-d int64 tensor as torch's).  A buffer that is a
        NumPy array comes as a tensor copy.  destination: a
        dict to fill (and return); prefix: prepended to every name.  Positional arguments
        (destination, prefix, keep_vars) work with torch's FutureWarning."""
        if args:
            if len(args) > 3:
                raise TypeError(f"state_dict() takes at most 3 positional arguments, got {len(args)}")
            warnings.warn("Positional args are being deprecated, use kwargs instead.", FutureWarning, stacklevel=2)
            destination, prefix, keep_vars = (tuple(args) + (destination, prefix, keep_vars)[len(args):])
        out = OrderedDict() if destination is None else destination
        views: dict[int, Tensor] = {}

        def value(t):
            if isinstance(t, np.ndarray):
                return from_numpy(np.array(t, order="C"))
            if keep_vars:
                return t
            if id(t) not in views:
                views[id(t)] = t.detach()
            return views[id(t)]

        for mname, m in self.named_modules(remove_duplicate=False):
            head = f"{prefix}{mname}." if mname else prefix
            for pname, p in m._parameters.items():
                out[head + pname] = value(p)
            for bname, b in m._own_persistent_buffers():
                out[head + bname] = value(b)
        return out

    def load_state_dict(self, state_dict, strict: bool = True) -> IncompatibleKeys:
        """Copy the arrays of ``state_dict`` (NumPy arrays, torch tensors or tiletrain
        Tensors, keyed by the names of ``state_dict()``) into the parameters, in place.

        Everything is checked before anything is written.  A shape mismatch always raises
        ValueError; with strict=True (the default) so do missing and unexpected keys.  A tied
        weight needs only one of its names; if several are given they must be equal.  Values
        are converted to the parameter's dtype.  Returns (missing_keys, unexpected_keys)."""
        if not hasattr(state_dict, "keys") or not hasattr(state_dict, "__getitem__"):
            raise TypeError("load_state_dict: expected a mapping of names to arrays, "
                            f"got {type(state_dict).__name__}")
        params = dict(self.named_parameters(remove_duplicate=False))
        params.update(self._state_buffers())
        aliases: dict[int, list[str]] = {}
        for name, p in params.items():
            aliases.setdefault(id(p), []).append(name)
        keys = [str(k) for k in state_dict.keys()]
        unexpected = [k for k in keys if k not in params]
        present = set(keys)
        missing = [n for n, p in params.items()
                   if n not in present and not any(a in present for a in aliases[id(p)])]
        problems = []
        values: dict[int, tuple[str, np.ndarray]] = {}
        for name, p in params.items():
            if name not in present:
                continue
            arr = state_dict[name]
            if isinstance(arr, Tensor):   # copied tile to tile below, no host copy
                if np.dtype(arr.dtype).kind not in "fiu":
                    problems.append(f"{name}: dtype {arr.dtype} is not numeric")
                    continue
            elif not hasattr(arr, "copy_to_"):  # a checkpoint's StoredTensor stays on disk until written
                try:
                    arr = to_numpy(arr, f"load_state_dict: {name}")
                except TypeError as e:
                    raise TypeError(str(e)) from None
                if arr.dtype.kind not in "fiu":
                    problems.append(f"{name}: dtype {arr.dtype} is not numeric")
                    continue
            if tuple(arr.shape) != tuple(p.shape):
                problems.append(f"{name}: shape {tuple(arr.shape)} in the state dict, {p.shape} in the model")
                continue
            if id(p) in values:
                first, other = values[id(p)]
                if other is not arr and not np.array_equal(np.asarray(other), np.asarray(arr)):
                    problems.append(f"{name} and {first} are the same (tied) parameter but the state dict "
                                    "gives them different values")
                continue
            values[id(p)] = (name, arr)
        if strict:
            if missing:
                problems.insert(0, f"missing keys: {', '.join(missing)}")
            if unexpected:
                problems.insert(1 if missing else 0, f"unexpected keys: {', '.join(unexpected)}")
        if problems:
            raise ValueError(f"load_state_dict into {type(self).__name__}: " + "; ".join(problems))
        with no_grad():
            for name, p in params.items():
                if id(p) not in values or values[id(p)][0] != name:
                    continue
                value = values[id(p)][1]
                if isinstance(p, np.ndarray):
                    np.copyto(p, np.asarray(value), casting="unsafe")   # a host-side buffer
                elif hasattr(value, "copy_to_"):
                    value.copy_to_(p)                    # streamed from the file, block by block
                elif isinstance(value, Tensor):          # tile to tile (converted, retiled), unless p's own tiles
                    if value._ptr != p._ptr:
                        assign_(p, value)
                else:                                    # in place, tile by tile (after p's pending tasks)
                    write_rows_(p, 0, p.grid[0] if p.ndim else 1, np.asarray(value, dtype=p.dtype))
        return IncompatibleKeys(missing, unexpected)

    # -- printing ---------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = []
        for name, m in self._modules.items():
            sub = repr(m).replace("\n", "\n  ")
            lines.append(f"  ({name}): {sub}")
        extra = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({extra})"
        head = f"{type(self).__name__}({extra}" if extra else f"{type(self).__name__}("
        return head + "\n" + "\n".join(lines) + "\n)"


class _Hooks:
    """Forward hooks and pre-hooks (kept in the module's __dict__ only once one is added, so
    that calls of modules without hooks stay as they were)."""

    class Handle:
        def __init__(self, table: dict, key: int):
            self.table, self.id = table, key

        def remove(self) -> None:
            self.table.pop(self.id, None)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.remove()

    _next = [0]

    @classmethod
    def add(cls, module, name: str, hook, prepend: bool):
        table = module.__dict__.setdefault(name, {})
        cls._next[0] += 1
        if prepend:
            items = list(table.items())
            table.clear()
            table[cls._next[0]] = hook
            table.update(items)
        else:
            table[cls._next[0]] = hook
        return cls.Handle(table, cls._next[0])

    @staticmethod
    def call(module, args, kwargs):
        for hook in list(module.__dict__.get("_forward_pre_hooks", {}).values()):
            r = hook(module, args)
            if r is not None:
                args = r if isinstance(r, tuple) else (r,)
        out = module._call(*args, **kwargs)
        for hook in list(module.__dict__.get("_forward_hooks", {}).values()):
            r = hook(module, args, out)
            if r is not None:
                out = r
        return out


class ModuleList(Module):
    """Modules registered under the names "0", "1", ...; indexable and iterable."""

    def __init__(self, modules=None) -> None:
        super().__init__()
        for m in modules or ():
            self.append(m)

    def append(self, module: Module) -> "ModuleList":
        if not isinstance(module, Module):
            raise TypeError(f"ModuleList: expected a Module, got {type(module).__name__}")
        setattr(self, str(len(self._modules)), module)
        return self

    def __getitem__(self, i: int) -> Module:
        mods = list(self._modules.values())
        return type(self)(*mods[i]) if isinstance(i, slice) and type(self) is not ModuleList else \
            ModuleList(mods[i]) if isinstance(i, slice) else mods[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(list(self._modules.values()))

    def extend(self, modules) -> "ModuleList":
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        mods = list(self._modules.values())
        mods.insert(index, module)
        self._modules.clear()
        for k, m in enumerate(mods):
            self._modules[str(k)] = m


class Sequential(ModuleList):
    """Modules applied in order (registered as "0", "1", ..., as torch.nn.Sequential)."""

    def __init__(self, *modules: Module) -> None:
        if len(modules) == 1 and isinstance(modules[0], dict):  # Sequential(OrderedDict(name=module))
            Module.__init__(self)
            for name, m in modules[0].items():
                self.add_module(name, m)
            return
        super().__init__(modules)

    def forward(self, x):
        for m in self:
            x = m(x)
        return x


class ModuleDict(Module):
    """Modules registered under the given names, in order; also reachable as attributes."""

    def __init__(self, modules=None) -> None:
        super().__init__()
        for name, m in dict(modules or {}).items():
            self[name] = m

    def __setitem__(self, name: str, module: Module) -> None:
        if not isinstance(module, Module):
            raise TypeError(f"ModuleDict: {name!r} must be a Module, got {type(module).__name__}")
        setattr(self, name, module)

    def __getitem__(self, name: str) -> Module:
        return self._modules[name]

    def __contains__(self, name) -> bool:
        return name in self._modules

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._modules))

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()


class ParameterList(Module):
    """Parameters registered under the names "0", "1", ...; indexable and iterable."""

    def __init__(self, values=None) -> None:
        super().__init__()
        for v in values or ():
            self.append(v)

    def append(self, value) -> "ParameterList":
        if not isinstance(value, Parameter):
            value = Parameter(value)
        self.register_parameter(str(len(self._parameters)), value)
        return self

    def extend(self, values) -> "ParameterList":
        for v in values:
            self.append(v)
        return self

    def __getitem__(self, i):
        return list(self._parameters.values())[i]

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self):
        return iter(list(self._parameters.values()))


class ParameterDict(Module):
    """Parameters registered under the given names, in order."""

    def __init__(self, parameters=None) -> None:
        super().__init__()
        for k, v in dict(parameters or {}).items():
            self[k] = v

    def __setitem__(self, name: str, value) -> None:
        self.register_parameter(name, value if isinstance(value, Parameter) else Parameter(value))

    def __getitem__(self, name: str):
        return self._parameters[name]

    def __contains__(self, name) -> bool:
        return name in self._parameters

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self):
        return iter(list(self._parameters))

    def keys(self):
        return self._parameters.keys()

    def items(self):
        return self._parameters.items()

    def values(self):
        return self._parameters.values()
