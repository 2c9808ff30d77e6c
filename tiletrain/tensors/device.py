"""torch.device, for programs that pass devices around: tiletrain has one, "cpu".  StarPU
places every task on a CPU or GPU worker itself and moves the tiles it reads there
(tiletrain.init(ncuda=...)), so a tensor is not bound to a device."""
from __future__ import annotations

_GPU_TYPES = ("cuda", "mps", "xpu", "hip")


class device:  # noqa: N801 - torch's name
    """torch.device("cpu") / torch.device("cpu", 0) / torch.device("cpu:0")."""

    __slots__ = ("type", "index")

    def __init__(self, type, index=None):  # noqa: A002 - torch's name
        if isinstance(type, device):
            type, index = type.type, type.index if index is None else index
        if not isinstance(type, str):
            raise TypeError(f"device: expected a string like 'cpu', got {type!r}")
        if ":" in type:
            type, _, idx = type.partition(":")
            if index is not None or not idx.isdigit():
                raise ValueError(f"device: invalid device string {type + ':' + idx!r}")
            index = int(idx)
        if type in _GPU_TYPES:
            raise RuntimeError(f"device {type!r}: tiletrain tensors are not bound to a device; StarPU runs each "
                               "task on a CPU or GPU worker and moves its tiles there. Start GPU workers with "
                               "tiletrain.init(ncuda=...) and keep device='cpu' in the program")
        if type != "cpu":
            raise RuntimeError(f"device: unknown device type {type!r} (tiletrain has 'cpu')")
        self.type, self.index = type, index

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = device(other)
            except (RuntimeError, ValueError):
                return False
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        return f"device(type={self.type!r}" + ("" if self.index is None else f", index={self.index}") + ")"


def parse_to(what: str, args, kwargs, tensor=None):
    """The dtype of a torch .to(...) call (None: unchanged), after checking its device
    arguments: to(dtype), to(device, dtype=None, non_blocking=False, copy=False), to(tensor)."""
    kwargs = dict(kwargs)
    dtype = kwargs.pop("dtype", None)
    dev = kwargs.pop("device", None)
    kwargs.pop("non_blocking", None)
    kwargs.pop("copy", None)
    kwargs.pop("memory_format", None)
    if kwargs:
        raise TypeError(f"{what}: unexpected argument(s) {sorted(kwargs)}")
    for a in args:
        if isinstance(a, (str, device)):
            dev = a
        elif hasattr(a, "dtype") and hasattr(a, "shape") and hasattr(a, "traits"):  # a tensor: its dtype
            dtype = a.dtype
        elif isinstance(a, bool):
            continue  # non_blocking / copy given by position
        else:
            dtype = a
    if dev is not None:
        device(dev)  # "cuda" raises, with the reason
    return dtype


def device_arg(fn):
    """Give a creation function torch's device= keyword: checked (device("cuda") raises with
    the reason) and dropped."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, device=None, pin_memory=False, **kwargs):
        if device is not None:
            globals()["device"](device)
        return fn(*args, **kwargs)
    return wrapper
