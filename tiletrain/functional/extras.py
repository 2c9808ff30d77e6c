"""More of torch.nn.functional, each composed of recorded tiletrain ops (so autograd comes
from theirs): the non-constant padding modes, the shrink/threshold activations and their
in-place forms, and margin losses.  Names, arguments, defaults and numerics are torch's."""
from __future__ import annotations

import numbers

import numpy as np

from ..ops.elementwise import abs as _abs, add, clamp, gt, lt, mul, sub, where
from ..ops.index import index_select
from ..tensors import Tensor, from_numpy

__all__ = ["hardshrink", "softshrink", "threshold", "relu_", "elu_", "leaky_relu_", "hardtanh_", "selu_", "celu_",
           "threshold_", "soft_margin_loss", "hinge_embedding_loss", "pairwise_distance", "channel_shuffle",
           "upsample", "upsample_nearest", "upsample_bilinear", "multilabel_soft_margin_loss", "gaussian_nll_loss",
           "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "rrelu",
           "triplet_margin_with_distance_loss", "pdist", "local_response_norm", "lp_pool1d", "lp_pool2d",
           "multi_margin_loss", "multilabel_margin_loss"]

def _number(v, what: str, name: str) -> float:
    if not isinstance(v, numbers.Real) or isinstance(v, bool):
        raise TypeError(f"{what}(): argument '{name}' must be a number, not {type(v).__name__}")
    return float(v)


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:  # noqa: A002
    """x where |x| > lambd, else 0."""
    lambd = _number(lambd, "hardshrink", "lambd")
    return where(gt(_abs(input), lambd), input, 0.0)


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:  # noqa: A002
    """x - lambd above lambd, x + lambd below -lambd, else 0."""
    lambd = _number(lambd, "softshrink", "lambd")
    if lambd < 0:
        raise RuntimeError(f"lambda must be greater or equal to 0, but found to be {lambd}.")
    return where(gt(input, lambd), sub(input, lambd), where(lt(input, -lambd), add(input, lambd), 0.0))


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:  # noqa: A002
    """x where x > threshold, else value."""
    th, value = _number(threshold, "threshold", "threshold"), _number(value, "threshold", "value")
    if inplace:
        return threshold_(input, th, value)
    return where(gt(input, th), input, value)


def _inplace(x: Tensor, fn) -> Tensor:
    from ..tensors.api import _inplace as inplace
    return inplace(x, fn)


def threshold_(input: Tensor, threshold: float, value: float) -> Tensor:  # noqa: A002
    th, value = _number(threshold, "threshold", "threshold"), _number(value, "threshold", "value")
    return _inplace(input, lambda a: where(gt(a, th), a, value))


def relu_(input: Tensor) -> Tensor:  # noqa: A002
    from ..ops.elementwise import relu
    return _inplace(input, relu)


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:  # noqa: A002
    from ..ops.elementwise import elu
    return _inplace(input, lambda a: elu(a, alpha))


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:  # noqa: A002
    from ..ops.elementwise import leaky_relu
    return _inplace(input, lambda a: leaky_relu(a, negative_slope))


def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:  # noqa: A002
    from ..ops.elementwise import hardtanh
    return _inplace(input, lambda a: hardtanh(a, min_val, max_val))


def selu_(input: Tensor) -> Tensor:  # noqa: A002
    from ..ops.elementwise import selu
    return _inplace(input, selu)


def celu_(input: Tensor, alpha: float = 1.0) -> Tensor:  # noqa: A002
    from ..ops.elementwise import celu
    return _inplace(input, lambda a: celu(a, alpha))


def _reduce(loss: Tensor, reduction: str, what: str) -> Tensor:
    from ..ops.reduce import mean, sum as _sum
    if reduction == "none":
        return loss
    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return _sum(loss)
    raise ValueError(f"{reduction} is not a valid value for reduction")


def soft_margin_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,  # noqa: A002
                     reduction: str = "mean") -> Tensor:
    """log(1 + exp(-target * input)), reduced."""
    from ..ops.elementwise import exp, log1p, neg
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(f"Using a target size ({tuple(target.shape)}) that is different to the input size "
                         f"({tuple(input.shape)}) is deprecated. Please ensure they have the same size.")
    return _reduce(log1p(exp(neg(mul(target, input)))), reduction, "soft_margin_loss")


def hinge_embedding_loss(input: Tensor, target: Tensor, margin: float = 1.0, size_average=None,  # noqa: A002
                         reduce=None, reduction: str = "mean") -> Tensor:
    """x where target is 1, max(0, margin - x) where target is -1 (torch sums the two
    masked parts), reduced."""
    from ..ops.elementwise import ne, neg
    margin_part = clamp(add(neg(input), float(margin)), min=0.0)
    loss = add(where(ne(target, -1.0), input, 0.0), where(ne(target, 1.0), margin_part, 0.0))
    return _reduce(loss, reduction, "hinge_embedding_loss")


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """The p-norm of x1 - x2 + eps over the last dim."""
    from ..ops.reduce import norm
    return norm(add(sub(x1, x2), float(eps)), p, -1, keepdim=keepdim)


def channel_shuffle(input: Tensor, groups: int) -> Tensor:  # noqa: A002
    """(N, g * k, *) viewed as (N, g, k, *), the two channel axes swapped, back to (N, g * k, *)."""
    from ..ops.shape import reshape, transpose
    if input.ndim < 3:
        raise RuntimeError(f"channel_shuffle expects input to have at least 3 dimensions, but got input with "
                           f"sizes {list(input.shape)}")
    if groups <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of groups:{groups}")
    n, c, rest = input.shape[0], input.shape[1], tuple(input.shape[2:])
    if c % groups:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels and {groups} groups.")
    x = transpose(reshape(input, (n, groups, c // groups) + rest), 1, 2)
    return reshape(x, (n, c) + rest)


def upsample(input: Tensor, size=None, scale_factor=None, mode: str = "nearest", align_corners=None) -> Tensor:  # noqa: A002
    from .activations import interpolate
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: Tensor, size=None, scale_factor=None) -> Tensor:  # noqa: A002
    from .activations import interpolate
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Tensor, size=None, scale_factor=None) -> Tensor:  # noqa: A002
    """interpolate(mode="bilinear", align_corners=True), as torch's."""
    from .activations import interpolate
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def multilabel_soft_margin_loss(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                                size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """-(t log sigmoid(x) + (1 - t) log sigmoid(-x)), weighted, averaged over the classes
    (dim 1), reduced."""
    from ..ops.elementwise import neg
    from ..ops.reduce import sum as _sum
    from .activations import logsigmoid
    loss = neg(add(mul(target, logsigmoid(input)), mul(add(neg(target), 1.0), logsigmoid(neg(input)))))
    if weight is not None:
        loss = mul(loss, weight)
    from ..ops.elementwise import div
    loss = div(_sum(loss, input.ndim - 1), float(input.shape[-1]))
    return _reduce(loss, reduction, "multilabel_soft_margin_loss")


def gaussian_nll_loss(input: Tensor, target: Tensor, var, full: bool = False, eps: float = 1e-6,  # noqa: A002
                      reduction: str = "mean") -> Tensor:
    """0.5 (log var + (input - target)^2 / var) (+ 0.5 log 2 pi when full); var is clamped at
    eps for the value only (its gradient passes as if unclamped, as torch's)."""
    import math
    from ..ops.elementwise import div, log
    from ..ops.shape import unsqueeze
    if not isinstance(var, Tensor):
        var = _full_like(input, float(var))
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = unsqueeze(var, -1)
        elif not (tuple(input.shape[:-1]) == tuple(var.shape[:-1]) and var.shape[-1] == 1):
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    if (var.numpy(force=True) < 0).any():
        raise ValueError("var has negative entry/entries")
    var = add(var, sub(clamp(var, min=float(eps)), var).detach())
    diff = sub(input, target)
    loss = mul(add(log(var), div(mul(diff, diff), var)), 0.5)
    if full:
        loss = add(loss, 0.5 * math.log(2 * math.pi))
    return _reduce(loss, reduction, "gaussian_nll_loss")


def _full_like(x: Tensor, v: float) -> Tensor:
    from ..ops.creation import full
    return full(tuple(x.shape), v, dtype=x.dtype)


def _channel_dropout(input: Tensor, p: float, training: bool, batched: int, what: str) -> Tensor:
    """Whole channels zeroed with probability p (one draw of tiletrain's generator per (N, C)
    pair), the others scaled by 1 / (1 - p)."""
    from ..ops.creation import rand
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if what == "dropout1d" and input.ndim not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D input")
    if not training or p == 0.0:
        return input
    lead = 2 if input.ndim == batched + 1 or what == "dropout2d" else 1  # torch's dropout2d: (N, C, L) on 3D
    shape = tuple(input.shape[:lead]) + (1,) * (input.ndim - lead)
    keep = rand(shape, dtype=input.dtype).numpy(force=True) >= p
    scale = keep.astype(input.dtype) * (0.0 if p == 1.0 else 1.0 / (1.0 - p))
    return mul(input, from_numpy(np.ascontiguousarray(scale)))


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    return _channel_dropout(input, p, training, 2, "dropout1d")


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    return _channel_dropout(input, p, training, 3, "dropout2d")


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    return _channel_dropout(input, p, training, 4, "dropout3d")


def _check_p(p: float) -> float:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    return float(p)


def _alpha_dropout(input: Tensor, p: float, training: bool, feature: bool) -> Tensor:  # noqa: A002
    """Kept elements a x + alpha a p, dropped ones alpha a (p - 1), with alpha selu's
    1.7580993408473766 and a = 1 / sqrt((alpha^2 p + 1)(1 - p)) (torch's constants), so a
    zero-mean unit-variance input keeps its statistics; tiletrain's draws."""
    from ..ops.creation import rand
    p = _check_p(p)
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return mul(input, 0.0)
    if feature and input.ndim < 2:
        raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
    shape = (tuple(input.shape[:2]) + (1,) * (input.ndim - 2)) if feature else tuple(input.shape)
    keep = (rand(shape, dtype=input.dtype).numpy(force=True) >= p).astype(input.dtype)
    alpha = 1.7580993408473766
    a = 1.0 / np.sqrt((alpha * alpha * p + 1) * (1 - p))
    b = (keep - 1.0) * (alpha * a) + alpha * a * p
    return add(mul(input, from_numpy(np.ascontiguousarray(keep * a))), from_numpy(np.ascontiguousarray(b)))


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:  # noqa: A002
    return _alpha_dropout(input, p, training, False)


def feature_alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False,  # noqa: A002
                          inplace: bool = False) -> Tensor:
    return _alpha_dropout(input, p, training, True)


def rrelu(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False,  # noqa: A002
          inplace: bool = False) -> Tensor:
    """Training: x * a below or at 0, a drawn uniform in [lower, upper) per element (tiletrain's
    draws); eval: leaky_relu with the mean slope (lower + upper) / 2, as torch's."""
    from ..ops.creation import rand
    from ..ops.elementwise import leaky_relu
    if not training:
        return leaky_relu(input, (lower + upper) / 2)
    r = rand(tuple(input.shape), dtype=input.dtype).numpy(force=True) * (upper - lower) + lower
    return where(gt(input, 0.0), input, mul(input, from_numpy(np.ascontiguousarray(r))))


def triplet_margin_with_distance_loss(anchor: Tensor, positive: Tensor, negative: Tensor, *,
                                      distance_function=None, margin: float = 1.0, swap: bool = False,
                                      reduction: str = "mean") -> Tensor:
    """max(0, margin + d(anchor, positive) - d(anchor, negative)), d pairwise_distance unless
    given; swap takes the smaller of d(anchor, negative) and d(positive, negative)."""
    from ..ops.elementwise import minimum
    if margin <= 0:
        raise ValueError(f"TripletMarginWithDistanceLoss: expected margin to be greater than 0, got {margin} instead")
    if not (anchor.ndim == positive.ndim == negative.ndim):
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have the same number of "
                           f"dimensions, but got: anchor {anchor.ndim}D, positive {positive.ndim}D, and negative "
                           f"{negative.ndim}D inputs")
    d = pairwise_distance if distance_function is None else distance_function
    dist_pos, dist_neg = d(anchor, positive), d(anchor, negative)
    if swap:
        dist_neg = minimum(dist_neg, d(positive, negative))
    loss = clamp(sub(add(dist_pos, float(margin)), dist_neg), min=0.0)
    return _reduce(loss, reduction, "triplet_margin_with_distance_loss")


def pdist(input: Tensor, p: float = 2.0) -> Tensor:  # noqa: A002
    """The p-norm distances of the rows of an (N, M) input, pairs i < j in row order."""
    from ..ops.reduce import norm
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    i, j = np.triu_indices(input.shape[0], 1)
    a = index_select(input, 0, from_numpy(np.ascontiguousarray(i.astype(np.int64))))
    b = index_select(input, 0, from_numpy(np.ascontiguousarray(j.astype(np.int64))))
    return norm(sub(a, b), p, 1)


def local_response_norm(input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75,  # noqa: A002
                        k: float = 1.0) -> Tensor:
    """input / (k + alpha * mean of the squares over a window of size channels)^beta, the
    window zero-padded size // 2 before and (size - 1) // 2 after (torch's steps)."""
    from ..ops.elementwise import div, pow as _pow
    from ..ops.shape import cat
    if input.ndim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality input (got {input.ndim} dimensions)")
    sq = mul(input, input)
    c, parts = input.shape[1], []
    for amount in (size // 2, None, (size - 1) // 2):
        if amount is None:
            parts.append(sq)
        elif amount:
            parts.append(_full_like(index_select(sq, 1, from_numpy(np.zeros(amount, np.int64))), 0.0))
    sq = cat(parts, 1) if len(parts) > 1 else sq
    acc = None  # the window's sum in order, then / size (torch's average pooling)
    for j in range(size):
        part = index_select(sq, 1, from_numpy(np.arange(j, j + c, dtype=np.int64)))
        acc = part if acc is None else add(acc, part)
    sq = div(acc, float(size))
    return div(input, _pow(add(mul(sq, float(alpha)), float(k)), float(beta)))


def _lp_finish(out: Tensor, norm_type: float, count: int) -> Tensor:
    from ..ops.elementwise import pow as _pow, relu, sign
    return _pow(mul(mul(sign(out), relu(_abs(out))), float(count)), 1.0 / norm_type)


def lp_pool1d(input: Tensor, norm_type, kernel_size: int, stride=None, ceil_mode: bool = False) -> Tensor:  # noqa: A002
    """(sum over each window of x^p)^(1/p): avg_pool1d of x^p times the window size."""
    from ..ops.conv import avg_pool1d
    from ..ops.elementwise import pow as _pow
    out = avg_pool1d(_pow(input, norm_type), kernel_size, stride, 0, ceil_mode)
    return _lp_finish(out, float(norm_type), int(kernel_size))


def lp_pool2d(input: Tensor, norm_type, kernel_size, stride=None, ceil_mode: bool = False) -> Tensor:  # noqa: A002
    from ..ops.conv import avg_pool2d
    from ..ops.elementwise import pow as _pow
    kw, kh = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
    out = avg_pool2d(_pow(input, norm_type), kernel_size, stride, 0, ceil_mode)
    return _lp_finish(out, float(norm_type), kw * kh)


def _class_target(input: Tensor, target: Tensor, what: str) -> np.ndarray:
    if input.ndim not in (1, 2) or target.dtype != np.int64:
        raise RuntimeError(f"{what}: expected a 1D or 2D input and int64 targets, got input {list(input.shape)}, "
                           f"target {target.dtype}")
    return target.numpy(force=True)


def multi_margin_loss(input: Tensor, target: Tensor, p: int = 1, margin: float = 1.0,  # noqa: A002
                      weight: Tensor | None = None, size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """sum over i != y of max(0, margin - x[y] + x[i])^p (times weight[y]), / C."""
    from ..ops.reduce import sum as _sum
    from ..ops.elementwise import div
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    y = _class_target(input, target, "multi_margin_loss")
    x = input if input.ndim == 2 else input.reshape(1, -1)
    c = x.shape[1]
    y = y.reshape(-1)
    if y.size != x.shape[0] or (y < 0).any() or (y >= c).any():
        raise RuntimeError(f"multi_margin_loss: target {list(target.shape)} out of range or of the wrong size")
    onehot = np.zeros((y.size, c), dtype=x.dtype)
    onehot[np.arange(y.size), y] = 1.0
    xy = _sum(mul(x, from_numpy(onehot)), 1, keepdim=True)
    z = clamp(add(sub(x, xy), float(margin)), min=0.0)
    z = mul(z, z) if p == 2 else z
    z = mul(z, from_numpy(np.ascontiguousarray(1.0 - onehot)))
    if weight is not None:
        z = mul(z, index_select(weight, 0, from_numpy(np.ascontiguousarray(y))).reshape(-1, 1))
    loss = div(_sum(z, 1), float(c))
    loss = loss if input.ndim == 2 else loss.reshape(())
    return _reduce(loss, reduction, "multi_margin_loss")


def multilabel_margin_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,  # noqa: A002
                           reduction: str = "mean") -> Tensor:
    """For each target class j (the target's entries before its first -1) and each non-target
    class i: max(0, 1 - (x[j] - x[i])), summed, / C."""
    from ..ops.reduce import sum as _sum
    from ..ops.elementwise import div
    from ..ops.shape import unsqueeze
    t = _class_target(input, target, "multilabel_margin_loss")
    if tuple(target.shape) != tuple(input.shape):
        raise RuntimeError(f"multilabel_margin_loss: inconsistent target size {list(target.shape)} for input "
                           f"{list(input.shape)}")
    x = input if input.ndim == 2 else input.reshape(1, -1)
    t = t.reshape(x.shape)
    n, c = x.shape
    count = np.zeros((n, c), dtype=x.dtype)
    for r in range(n):
        for v in t[r]:
            if v < 0:
                break
            if v >= c:
                raise RuntimeError(f"multilabel_margin_loss: target {v} out of range [0, {c})")
            count[r, v] += 1.0
    mask = count[:, :, None] * (count[:, None, :] == 0)
    z = clamp(add(sub(unsqueeze(x, 1), unsqueeze(x, 2)), 1.0), min=0.0)  # [n, j, i]: 1 - x[j] + x[i]
    loss = div(_sum(mul(z, from_numpy(np.ascontiguousarray(mask))), (1, 2)), float(c))
    loss = loss if input.ndim == 2 else loss.reshape(())
    return _reduce(loss, reduction, "multilabel_margin_loss")
