"""torch.save / torch.load for state dicts and other plain containers: tensors (tiletrain
Tensors, Parameters, NumPy arrays) inside dicts, lists, tuples and numbers are written as
NumPy arrays in a pickle, and read back as tiletrain Tensors.  Loading unpickles only those
types (as torch.load's weights_only=True): a file cannot run code."""
from __future__ import annotations

import collections
import io
import os
import pickle

import numpy as np

from .tensors import Tensor, from_numpy

__all__ = ["save", "load"]

_FORMAT = "tiletrain.save/1"


def _c(a) -> np.ndarray:
    """a as a C-contiguous array that keeps 0-d arrays 0-d (np.ascontiguousarray makes them 1-d)."""
    return np.array(a, order="C")


class _Stored:
    """A tensor in a saved file: its array and requires_grad."""

    def __init__(self, array: np.ndarray, requires_grad: bool):
        self.array, self.requires_grad = array, requires_grad


def _pack(obj, memo: dict):
    """obj with its tensors as _Stored arrays; a tensor met twice (a tied weight under two
    names) is stored once, and loads as one tensor (as torch.save keeps shared storage)."""
    if isinstance(obj, Tensor):
        if id(obj) not in memo:
            memo[id(obj)] = (obj, _Stored(obj.numpy(force=True), bool(obj.requires_grad)))  # numpy(): a C-contiguous copy
        return memo[id(obj)][1]
    if isinstance(obj, np.ndarray):
        return obj
    if isinstance(obj, collections.OrderedDict):
        return collections.OrderedDict((k, _pack(v, memo)) for k, v in obj.items())
    if isinstance(obj, dict):
        return {k: _pack(v, memo) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_pack(v, memo) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_pack(v, memo) for v in obj)
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes, np.generic)):
        return obj
    raise TypeError(f"save: objects of type {type(obj).__name__} cannot be saved (tensors, arrays, numbers, "
                    "strings and dicts/lists/tuples of them can)")


def _unpack(obj, memo: dict):
    if isinstance(obj, _Stored):
        if id(obj) not in memo:
            t = from_numpy(_c(obj.array))
            if obj.requires_grad:
                t.requires_grad_(True)
            memo[id(obj)] = t
        return memo[id(obj)]
    if isinstance(obj, collections.OrderedDict):
        return collections.OrderedDict((k, _unpack(v, memo)) for k, v in obj.items())
    if isinstance(obj, dict):
        return {k: _unpack(v, memo) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unpack(v, memo) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_unpack(v, memo) for v in obj)
    return obj


_ALLOWED = {("collections", "OrderedDict"), ("numpy", "ndarray"), ("numpy", "dtype"),
            ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
            ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
            ("builtins", "complex"), (__name__, "_Stored")}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _ALLOWED or (module.startswith("numpy") and name.endswith("DType")):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"load: {module}.{name} is not allowed in a tiletrain file (only tensors, "
                                     "arrays, numbers, strings and containers are)")


def save(obj, f, pickle_protocol: int = pickle.DEFAULT_PROTOCOL) -> None:
    """torch.save(obj, f): f a path or a binary file object."""
    payload = {"format": _FORMAT, "obj": _pack(obj, {})}
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            pickle.dump(payload, fh, protocol=pickle_protocol)
    else:
        pickle.dump(payload, f, protocol=pickle_protocol)


def load(f, map_location=None, weights_only: bool = True, **kwargs):
    """torch.load(f): what save wrote, tensors as tiletrain Tensors (map_location is accepted
    and ignored: tiletrain has one device)."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            data = fh.read()
    else:
        data = f.read()
    try:
        payload = _Unpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as e:
        raise pickle.UnpicklingError(f"load: not a tiletrain.save file, or it holds disallowed objects ({e})") \
            from None
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        raise ValueError("load: not a file written by tiletrain.save")
    return _unpack(payload["obj"], {})
