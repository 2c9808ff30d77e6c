"""CNN layers as torch.nn: Conv1d/2d/3d, MaxPool1d/2d/3d, AvgPool1d/2d/3d,
AdaptiveAvgPool1d/2d/3d, AdaptiveMaxPool1d/2d/3d, BatchNorm1d/2d/3d,
plus Sequential, ReLU and Flatten.

Parameter names, shapes and initialisation are torch's (conv weight (C_out, C_in / groups,
*kernel) and bias drawn from U(-1/sqrt(fan_in), 1/sqrt(fan_in)), i.e. kaiming_uniform_ with
a = sqrt(5); batch norm weight 1, bias 0, buffers running_mean 0, running_var 1 and
num_batches_tracked), so a torch state_dict loads as is.  Parameters and batch-norm buffers
are single tiles; activations may be tiled along the batch axis and along D/H/W (volumes
split in space: halos are read from the neighbouring tiles, docs/cnn3d.md); a channel axis
split in several tiles is re-tiled by the ops."""
from __future__ import annotations

import math
import numbers

import numpy as np

from .. import functional as F
from ..ops.basic import count_, new_count
from ..tensors import Tensor, from_numpy
from ..tensors.tensor import default_float
from .layers import kaiming_bound, uniform
from .module import Module, Parameter

__all__ = ["GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "Upsample", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "MaxPool1d", "MaxPool2d", "MaxPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "AdaptiveAvgPool1d",
           "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "AvgPool1d", "AvgPool2d",
           "AvgPool3d", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d"]


def _pos_int(v, what: str, name: str) -> int:
    if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{what}: {name} must be a positive int, got {v!r}")
    return int(v)


def _tuple(v, n: int) -> tuple:
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


def _conv_shape(m: Module, in_channels, out_channels, kernel_size, groups) -> str:
    """Set a (transposed) convolution's channels, groups and kernel size, checked; its name."""
    what = type(m).__name__
    m.in_channels = _pos_int(in_channels, what, "in_channels")
    m.out_channels = _pos_int(out_channels, what, "out_channels")
    m.groups = _pos_int(groups, what, "groups")
    if m.in_channels % m.groups or m.out_channels % m.groups:
        raise ValueError(f"{what}: in_channels ({in_channels}) and out_channels ({out_channels}) must be "
                         f"divisible by groups ({groups})")
    n = m._dims
    m.kernel_size = tuple(_pos_int(k, what, "kernel_size") for k in _tuple(kernel_size, n))
    if len(m.kernel_size) != n:
        raise ValueError(f"{what}: kernel_size must be an int or {n} ints, got {kernel_size!r}")
    return what


def _conv_params(m: Module, shape: tuple, bias: bool, dtype, rng) -> None:
    """weight of ``shape`` and bias (out_channels,) as torch's reset_parameters draws them:
    kaiming_uniform_(a=sqrt(5)) and U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = shape[1] *
    kernel size (both weight layouts), from the default generator (or ``rng``)."""
    dtype = default_float(dtype)
    fan_in = shape[1] * math.prod(m.kernel_size)
    m.weight = Parameter(uniform(shape, kaiming_bound(fan_in), rng, dtype, shape))
    cout = m.out_channels
    m.bias = Parameter(uniform((cout,), 1.0 / math.sqrt(fan_in), rng, dtype, (cout,))) if bias else None


class _ConvNd(Module):
    _dims = 0

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", *, dtype=None,
                 rng: np.random.Generator | None = None):
        super().__init__()
        what = _conv_shape(self, in_channels, out_channels, kernel_size, groups)
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"padding_mode must be one of ['zeros', 'reflect', 'replicate', 'circular'], but got "
                             f"padding_mode='{padding_mode}'")
        self.padding_mode = padding_mode
        n = self._dims
        self.stride, self.dilation = _tuple(stride, n), _tuple(dilation, n)
        self.padding = padding if isinstance(padding, str) else _tuple(padding, n)
        if padding == "same" and any(s != 1 for s in self.stride):
            raise ValueError(f"{what}: padding='same' is not supported for strided convolutions")
        _conv_params(self, (self.out_channels, self.in_channels // self.groups) + self.kernel_size, bias, dtype, rng)

    def forward(self, x: Tensor) -> Tensor:
        conv = getattr(F, f"conv{self._dims}d")
        if self.padding_mode != "zeros":  # the input padded by F.pad's mode, then an unpadded convolution
            x = F.pad(x, self._pad_amounts(), mode=self.padding_mode)
            return conv(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
        return conv(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def _pad_amounts(self) -> list:
        """F.pad's list (last dimension first, before and after) of the module's padding;
        'same' puts the odd element after, as torch."""
        amounts = []
        for d in reversed(range(self._dims)):
            if self.padding == "valid":
                before = after = 0
            elif self.padding == "same":
                total = self.dilation[d] * (self.kernel_size[d] - 1)
                before, after = total // 2, total - total // 2
            else:
                before = after = self.padding[d]
            amounts += [before, after]
        return amounts

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}, padding={self.padding}")
        if any(d != 1 for d in self.dilation):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        return s + ("" if self.bias is not None else ", bias=False")


class Conv1d(_ConvNd):
    _dims = 1


class Conv2d(_ConvNd):
    _dims = 2


class Conv3d(_ConvNd):
    _dims = 3


class _ConvTransposeNd(Module):
    """torch.nn.ConvTranspose*d: weight (in_channels, out_channels / groups, kernel...), bias
    (out_channels,), both U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with torch's fan_in = weight.shape[1]
    times the kernel's size."""
    _dims = 0

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        what = _conv_shape(self, in_channels, out_channels, kernel_size, groups)
        if padding_mode != "zeros":
            raise ValueError(f"Only \"zeros\" padding mode is supported for {what}")
        n = self._dims
        self.stride, self.padding = _tuple(stride, n), _tuple(padding, n)
        self.output_padding, self.dilation = _tuple(output_padding, n), _tuple(dilation, n)
        _conv_params(self, (self.in_channels, self.out_channels // self.groups) + self.kernel_size, bias, dtype, None)

    def forward(self, x: Tensor, output_size=None) -> Tensor:
        out_pad = self.output_padding if output_size is None else self._output_padding(x, output_size)
        return getattr(F, f"conv_transpose{self._dims}d")(x, self.weight, self.bias, self.stride, self.padding,
                                                          out_pad, self.groups, self.dilation)

    def _output_padding(self, x: Tensor, output_size) -> tuple:
        """The output_padding that gives ``output_size`` (its last dimensions), checked to lie
        between the smallest output and that plus stride - 1, as torch."""
        n = self._dims
        want = [int(v) for v in (output_size.tolist() if isinstance(output_size, Tensor) else output_size)]
        if len(want) == n + 2:
            want = want[2:]
        if len(want) != n:
            raise ValueError(f"ConvTranspose{n}D: for {x.ndim}D input, output_size must have {n} or {n + 2} "
                             f"elements (got {len(want)})")
        spatial = x.shape[x.ndim - n:]
        smallest = [(spatial[d] - 1) * self.stride[d] - 2 * self.padding[d] + self.dilation[d] * (self.kernel_size[d] - 1)
                    + 1 for d in range(n)]
        largest = [smallest[d] + self.stride[d] - 1 for d in range(n)]
        if any(not smallest[d] <= want[d] <= largest[d] for d in range(n)):
            raise ValueError(f"requested an output size of {want}, but valid sizes range from {smallest} to "
                             f"{largest} (for an input of {list(spatial)})")
        return tuple(want[d] - smallest[d] for d in range(n))

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
                + ("" if not any(self.padding) else f", padding={self.padding}")
                + ("" if not any(self.output_padding) else f", output_padding={self.output_padding}"))


class ConvTranspose1d(_ConvTransposeNd):
    _dims = 1


class ConvTranspose2d(_ConvTransposeNd):
    _dims = 2


class ConvTranspose3d(_ConvTransposeNd):
    _dims = 3


class _MaxPoolNd(Module):
    _dims = 0

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        self.kernel_size, self.padding = kernel_size, padding
        self.stride = stride if stride is not None else kernel_size
        self.dilation, self.ceil_mode, self.return_indices = dilation, ceil_mode, return_indices

    def forward(self, x: Tensor) -> Tensor:
        """The pooled tensor, or (pooled, int64 indices) with return_indices=True."""
        pool = getattr(F, f"max_pool{self._dims}d")
        return pool(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                    self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPoolNd):
    _dims = 1


class MaxPool2d(_MaxPoolNd):
    _dims = 2


class MaxPool3d(_MaxPoolNd):
    _dims = 3


class _MaxUnpoolNd(Module):
    """torch.nn.MaxUnpool1d/2d/3d(kernel_size, stride=None (kernel_size), padding=0):
    forward(input, indices, output_size=None) is F.max_unpool*d."""
    _dims = 0

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        n = self._dims

        def tup(v):   # torch keeps them as tuples of _dims ints
            return (v,) * n if isinstance(v, int) else tuple(v)
        self.kernel_size, self.padding = tup(kernel_size), tup(padding)
        self.stride = tup(stride if stride is not None else kernel_size)

    def forward(self, input: Tensor, indices: Tensor, output_size=None) -> Tensor:  # noqa: A002
        unpool = getattr(F, f"max_unpool{self._dims}d")
        return unpool(input, indices, self.kernel_size, self.stride, self.padding, output_size)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    _dims = 1


class MaxUnpool2d(_MaxUnpoolNd):
    _dims = 2


class MaxUnpool3d(_MaxUnpoolNd):
    _dims = 3


class _AvgPoolNd(Module):
    _dims = 0

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size, self.padding = kernel_size, padding
        self.stride = stride if stride is not None else kernel_size
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, x: Tensor) -> Tensor:
        extra = () if self._dims == 1 else (self.divisor_override,)
        pool = getattr(F, f"avg_pool{self._dims}d")
        return pool(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad,
                    *extra)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPoolNd):
    _dims = 1

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad)


class AvgPool2d(_AvgPoolNd):
    _dims = 2


class AvgPool3d(_AvgPoolNd):
    _dims = 3


class _AdaptiveAvgPoolNd(Module):
    _dims = 0

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return getattr(F, f"adaptive_avg_pool{self._dims}d")(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class _AdaptiveMaxPoolNd(_AdaptiveAvgPoolNd):
    def __init__(self, output_size, return_indices: bool = False):
        super().__init__(output_size)
        self.return_indices = return_indices

    def forward(self, x: Tensor) -> Tensor:
        return getattr(F, f"adaptive_max_pool{self._dims}d")(x, self.output_size, self.return_indices)


class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    _dims = 1


class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    _dims = 2


class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    _dims = 3


class AdaptiveAvgPool1d(_AdaptiveAvgPoolNd):
    _dims = 1


class AdaptiveAvgPool2d(_AdaptiveAvgPoolNd):
    _dims = 2


class AdaptiveAvgPool3d(_AdaptiveAvgPoolNd):
    _dims = 3


class _BatchNorm(Module):
    _ranks: tuple = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, *,
                 dtype=None):
        super().__init__()
        what = type(self).__name__
        self.num_features = _pos_int(num_features, what, "num_features")
        self.eps, self.momentum = float(eps), momentum
        self.affine, self.track_running_stats = bool(affine), bool(track_running_stats)
        dtype, C = default_float(dtype), self.num_features
        self.weight = Parameter(np.ones(C, dtype), (C,)) if affine else None
        self.bias = Parameter(np.zeros(C, dtype), (C,)) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", from_numpy(np.zeros(C, dtype), (C,)))
            self.register_buffer("running_var", from_numpy(np.ones(C, dtype), (C,)))
            self.register_buffer("num_batches_tracked", new_count(0, np.int64))   # counted by count_
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def forward(self, x: Tensor) -> Tensor:
        if isinstance(x, Tensor) and x.ndim not in self._ranks:
            ranks = " or ".join(f"{r}D" for r in self._ranks)
            raise ValueError(f"{type(self).__name__}: expected {ranks} input (got {x.ndim}D input)")
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            n = count_(self.num_batches_tracked)               # in place, its value known on the host
            if self.momentum is None:                          # cumulative moving average
                factor = 1.0 / n
        training = self.training or self.running_mean is None
        use_running = not self.training or self.track_running_stats
        return F.batch_norm(x, self.running_mean if use_running else None,
                            self.running_var if use_running else None, self.weight, self.bias, training,
                            factor, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    _ranks = (4,)


class BatchNorm3d(_BatchNorm):
    _ranks = (5,)




class GroupNorm(Module):
    """torch.nn.GroupNorm(num_groups, num_channels, eps=1e-5, affine=True): weight ones, bias zeros."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device=None,
                 dtype=None):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        dtype = default_float(dtype)
        self.weight = Parameter(np.ones(num_channels, dtype), (num_channels,)) if affine else None
        self.bias = Parameter(np.zeros(num_channels, dtype), (num_channels,)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class _InstanceNorm(Module):
    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device=None, dtype=None):
        super().__init__()
        if track_running_stats:
            raise NotImplementedError(f"{type(self).__name__}: track_running_stats=True is not supported")
        self.num_features, self.eps, self.momentum, self.affine = num_features, eps, momentum, affine
        self.track_running_stats = False
        dtype = default_float(dtype)
        self.weight = Parameter(np.ones(num_features, dtype), (num_features,)) if affine else None
        self.bias = Parameter(np.zeros(num_features, dtype), (num_features,)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        return F.instance_norm(x, weight=self.weight, bias=self.bias, eps=self.eps)


class InstanceNorm1d(_InstanceNorm):
    pass


class InstanceNorm2d(_InstanceNorm):
    pass


class InstanceNorm3d(_InstanceNorm):
    pass


class Upsample(Module):
    """torch.nn.Upsample(size=None, scale_factor=None, mode='nearest'): F.interpolate."""

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x: Tensor) -> Tensor:
        return F.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                             self.recompute_scale_factor)
