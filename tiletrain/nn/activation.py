"""Activations (parameter-free but PReLU's learned slopes), Flatten and the constant padding
modules, each a thin shell over the function of the same name (torch.nn's names, arguments
and defaults)."""
from __future__ import annotations

from .. import functional as F
from ..ops.creation import full
from ..tensors import Tensor
from ..tensors.tensor import default_float
from .module import Module, Parameter


class _Elementwise(Module):
    """``inplace`` is accepted as torch's; the result is always a new tensor (tiles are freed by
    dataflow, so nothing is saved by overwriting the input)."""
    fn = None

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = bool(inplace)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return type(self).fn(input)


class ReLU(_Elementwise):
    fn = staticmethod(F.relu)


class SiLU(_Elementwise):
    fn = staticmethod(F.silu)


class Tanh(Module):
    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.tanh(input)


class Sigmoid(Module):
    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.sigmoid(input)


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class _Params(Module):
    """A parameter-free module whose forward is F.<name>(input, **the constructor's arguments)."""
    fn = None
    args: tuple = ()

    def __init__(self, *args, **kwargs):
        super().__init__()
        names = [n for n, _ in self.args]
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__}() takes at most {len(names)} arguments ({len(args)} given)")
        values = dict(self.args)
        values.update(zip(names, args))
        for k, v in kwargs.items():
            if k not in values:
                raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument {k!r}")
            values[k] = v
        for k, v in values.items():
            setattr(self, k, v)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return type(self).fn(input, **{k: getattr(self, k) for k, _ in self.args})

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={getattr(self, k)}" for k, _ in self.args if k != "inplace")


def _params(name: str, fn, *args) -> type:
    return type(name, (_Params,), {"fn": staticmethod(fn), "args": args, "__doc__": f"torch.nn.{name}: F.{fn.__name__}."})


LeakyReLU = _params("LeakyReLU", F.leaky_relu, ("negative_slope", 0.01), ("inplace", False))
ELU = _params("ELU", F.elu, ("alpha", 1.0), ("inplace", False))
SELU = _params("SELU", F.selu, ("inplace", False))
CELU = _params("CELU", F.celu, ("alpha", 1.0), ("inplace", False))
Softplus = _params("Softplus", F.softplus, ("beta", 1.0), ("threshold", 20.0))
Hardtanh = _params("Hardtanh", F.hardtanh, ("min_val", -1.0), ("max_val", 1.0), ("inplace", False))
ReLU6 = _params("ReLU6", F.relu6, ("inplace", False))
Mish = _params("Mish", F.mish, ("inplace", False))
Hardsigmoid = _params("Hardsigmoid", F.hardsigmoid, ("inplace", False))
Hardswish = _params("Hardswish", F.hardswish, ("inplace", False))
LogSigmoid = _params("LogSigmoid", F.logsigmoid)
Softsign = _params("Softsign", F.softsign)
Tanhshrink = _params("Tanhshrink", F.tanhshrink)
GLU = _params("GLU", F.glu, ("dim", -1))
Softmin = _params("Softmin", F.softmin, ("dim", None))


def _softmax_dim(ndim: int) -> int:
    """torch's implicit softmax dim (a deprecated call without dim): 0 for 0-, 1- and 3-d input, else 1."""
    return 0 if ndim in (0, 1, 3) else 1


class Softmax(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.softmax(input, _softmax_dim(input.ndim) if self.dim is None else self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.log_softmax(input, _softmax_dim(input.ndim) if self.dim is None else self.dim)


class Unflatten(Module):
    """Expands dim ``dim`` into ``unflattened_size``."""

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        d = self.dim % input.ndim
        return input.reshape(*input.shape[:d], *self.unflattened_size, *input.shape[d + 1:])

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class CosineSimilarity(Module):
    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PReLU(Module):
    """torch.nn.PReLU(num_parameters=1, init=0.25): max(0, x) + a * min(0, x), a learned (one,
    or one per channel of dim 1)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters = num_parameters
        self.weight = Parameter(full((num_parameters,), float(init), dtype=default_float(dtype)))

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class _ConstantPad(Module):
    """torch.nn.ConstantPadNd(padding, value) / ZeroPadNd(padding): F.pad with a constant; an int
    pads every side of the last N dims."""
    dims = 1

    def __init__(self, padding, value: float = 0.0):
        super().__init__()
        self.padding = (int(padding),) * (2 * self.dims) if isinstance(padding, int) else tuple(padding)
        if len(self.padding) != 2 * self.dims:
            raise ValueError(f"{type(self).__name__}: padding must be an int or {2 * self.dims} ints, "
                             f"got {padding!r}")
        self.value = value

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


def _pad_class(name: str, dims: int, zero: bool):
    if zero:
        def __init__(self, padding):
            _ConstantPad.__init__(self, padding, 0.0)
    else:
        def __init__(self, padding, value):
            _ConstantPad.__init__(self, padding, value)
    return type(name, (_ConstantPad,), {"dims": dims, "__init__": __init__, "__module__": __name__})


ConstantPad1d, ConstantPad2d, ConstantPad3d = (_pad_class(f"ConstantPad{n}d", n, False) for n in (1, 2, 3))
ZeroPad1d, ZeroPad2d, ZeroPad3d = (_pad_class(f"ZeroPad{n}d", n, True) for n in (1, 2, 3))


class PixelShuffle(Module):
    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.pixel_shuffle(input, self.upscale_factor)


class PixelUnshuffle(Module):
    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.pixel_unshuffle(input, self.downscale_factor)


class Unfold(Module):
    """torch.nn.Unfold(kernel_size, dilation=1, padding=0, stride=1): F.unfold."""

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)


class Fold(Module):
    """torch.nn.Fold(output_size, kernel_size, dilation=1, padding=0, stride=1): F.fold."""

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)


class Identity(Module):
    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return input


class Flatten(Module):
    """Flattens dims start_dim..end_dim into one (default: all but the batch dim)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.flatten(input, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


__all__ = ["CELU", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "CosineSimilarity", "ELU", "Flatten", "Fold",
           "GELU", "GLU", "Hardsigmoid", "Hardswish", "Hardtanh", "Identity", "LeakyReLU", "LogSigmoid",
           "LogSoftmax", "Mish", "PReLU", "PixelShuffle", "PixelUnshuffle", "ReLU", "ReLU6", "SELU", "SiLU",
           "Sigmoid", "Softmax", "Softmin", "Softplus", "Softsign", "Tanh", "Tanhshrink", "Unflatten",
           "Unfold", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d"]
