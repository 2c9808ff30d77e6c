"""torch.nn.utils.stateless.functional_call (and torch.func.functional_call, which is the same
function): run a module with other tensors in place of its parameters and buffers.

The given tensors replace the module's own for the call (in the module's parameter and
buffer tables and as attributes, so ``forward`` and ``parameters()`` see them); the
originals are put back afterwards, also when the call raises.  The substituted tensors are
used as they are, so gradients flow to them (per-sample gradients with tiletrain.func.vmap
and grad, meta-learning)."""
from __future__ import annotations

import contextlib

from ...tensors import Tensor
from ..module import Module

__all__ = ["functional_call"]

_ABSENT = object()


def _merged(parameter_and_buffer_dicts) -> dict:
    if isinstance(parameter_and_buffer_dicts, dict):
        return dict(parameter_and_buffer_dicts)
    if isinstance(parameter_and_buffer_dicts, (list, tuple)) and all(
            isinstance(d, dict) for d in parameter_and_buffer_dicts):
        out, repeated = {}, []
        for d in parameter_and_buffer_dicts:
            repeated += [k for k in d if k in out and k not in repeated]
            out.update(d)
        if repeated:
            raise ValueError(f"{repeated} appeared in multiple dictionaries; behavior of functional call is ambiguous")
        return out
    raise ValueError("Expected parameter_and_buffer_dicts to be a dict, or a list/tuple of dicts, but got "
                     f"{type(parameter_and_buffer_dicts)}")


def _tensor_names(module: Module) -> dict[str, object]:
    """Every parameter and buffer under each of its names (tied ones and shared submodules
    under all of theirs)."""
    out = {}
    for mname, m in module.named_modules(remove_duplicate=False):
        for table in (m._parameters, m._buffers):
            for name, t in table.items():
                if t is not None:
                    out[f"{mname}.{name}" if mname else name] = t
    return out


def _tie(values: dict, names: dict) -> dict:
    """values with each given tensor also under the other names of the tensor it replaces."""
    groups: dict[int, list[str]] = {}
    for name, t in names.items():
        groups.setdefault(id(t), []).append(name)
    out = dict(values)
    for group in groups.values():
        given = [n for n in group if n in values]
        if len(group) < 2 or not given:
            continue
        if any(values[n] is not values[given[0]] for n in given):
            raise ValueError(f"functional_call got multiple values for keys {given}, which are tied. Consider using "
                             "tie_weights=False")
        out.update({n: values[given[0]] for n in group})
    return out


def _check_strict(module: Module, values: dict, names: dict) -> None:
    unexpected = [k for k in values if k not in names]
    missing = [k for k in names if k not in values]
    if unexpected or missing:
        lines = ([f"\tUnexpected key(s): {', '.join(repr(k) for k in unexpected)}."] if unexpected else []) + \
                ([f"\tMissing key(s): {', '.join(repr(k) for k in missing)}."] if missing else [])
        raise RuntimeError(f"Error(s) in reparametrizing for {type(module).__name__}:\n" + "\n".join(lines))


def _owner(module: Module, name: str) -> tuple[Module, str]:
    path, _, attr = name.rpartition(".")
    m = module.get_submodule(path)
    if attr in m._modules:
        raise TypeError(f"attribute `{attr}`: {m._modules[attr]} is not an instance of tiletrain.Tensor")
    return m, attr


@contextlib.contextmanager
def _substituted(module: Module, values: dict):
    """The module with values in place of its tensors; the originals restored on exit."""
    undo = []
    try:
        for name, value in values.items():
            m, attr = _owner(module, name)
            table = next((t for t in (m._parameters, m._buffers) if attr in t), None)
            old = table[attr] if table is not None else m.__dict__.get(attr, _ABSENT)
            undo.append((m, attr, table, old))
            if table is not None:
                table[attr] = value
            object.__setattr__(m, attr, value)
        yield
    finally:
        for m, attr, table, old in reversed(undo):
            if table is not None:
                table[attr] = old
            if old is _ABSENT:
                object.__delattr__(m, attr)
            else:
                object.__setattr__(m, attr, old)


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *, tie_weights: bool = True,
                    strict: bool = False):
    """``module(*args, **kwargs)`` with the tensors of ``parameter_and_buffer_dicts`` (a dict
    of dotted names, or a list/tuple of dicts with distinct keys) in place of the module's
    parameters and buffers of those names; the others are the module's own.  ``args`` that
    is not a tuple is the one positional argument.  ``tie_weights``: a tensor given for one
    name of a tied parameter replaces it under all its names (different tensors for tied
    names raise ValueError).  ``strict``: every parameter and buffer must be given and no
    other name (RuntimeError).  A name that is neither is set as an attribute for the call."""
    if not isinstance(module, Module):
        raise TypeError(f"functional_call: module must be a tiletrain.nn.Module, got {type(module).__name__}")
    values = _merged(parameter_and_buffer_dicts)
    for v in values.values():
        if not isinstance(v, Tensor):
            raise TypeError(f"{v} is not an instance of tiletrain.Tensor")
    names = _tensor_names(module)
    if tie_weights:
        values = _tie(values, names)
    if strict:
        _check_strict(module, values, names)
    args = () if args is None else args if isinstance(args, tuple) else (args,)
    with _substituted(module, values):
        return module(*args, **({} if kwargs is None else kwargs))
