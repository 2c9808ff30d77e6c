"""torch.nn.functional's activations and helpers that are compositions of other ops (their
gradients, double backward included, come from the ops they are made of): logsigmoid, mish,
softsign, tanhshrink, glu, prelu, softmin, normalize, cosine_similarity, constant padding (pad),
group_norm, instance_norm, unfold and fold, interpolate, bilinear and scaled_dot_product_attention's
masked, dropout and cross-attention forms (the fused kernels otherwise).  The element-wise
activations with kernels of their own (leaky_relu, elu, selu, celu, softplus, hardtanh, relu6, hardsigmoid, hardswish) are rows of tiletrain/ops/elementwise.py."""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..ops.elementwise import abs as _abs, add, clamp, div, mul, neg, softplus, sub, tanh
from ..ops.elementwise import relu, sigmoid
from ..ops.contract import einsum
from ..ops.reduce import norm as _norm, sum as _sum
from ..ops.index import index_get
from ..ops.shape import cat, chunk, reshape
from ..ops.softmax import softmax
from ..ops.creation import full
from ..ops.basic import _tensor
from ..tensors import Tensor

__all__ = ["bilinear", "cosine_similarity", "fold",
           "glu", "group_norm", "gumbel_softmax", "instance_norm", "interpolate", "logsigmoid", "mish",
           "normalize", "pad", "pixel_shuffle", "pixel_unshuffle", "prelu", "unfold",
           "scaled_dot_product_attention", "softmin", "softsign", "tanhshrink"]


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """torch.nn.functional.bilinear: y[..., o] = sum_ij input1[..., i] weight[o, i, j]
    input2[..., j] + bias[o], for inputs (..., in1) and (..., in2) with the same leading
    dimensions (none too) and weight (out, in1, in2); an einsum, so its gradients are the
    einsum's."""
    what = "bilinear():"
    for name, t in (("input1", input1), ("input2", input2), ("weight", weight)):
        _tensor(t, "bilinear", name)
    if input1.ndim != input2.ndim:
        raise RuntimeError(f"{what} input dimensions do not match: got {input1.ndim} and {input2.ndim}")
    for d, (a, b) in enumerate(zip(input1.shape[:-1], input2.shape[:-1])):
        if a != b:
            raise RuntimeError(f"{what} input batch dimensions do not match at dim {d}: got {a} and {b}")
    if weight.ndim != 3:
        raise RuntimeError(f"{what} weight must be 3-D (out_features, in1_features, in2_features), got shape "
                           f"{weight.shape}")
    for k, t in ((1, input1), (2, input2)):
        if t.shape[-1] != weight.shape[k]:
            raise RuntimeError(f"{what} input{k} size does not match weight size: got {t.shape[-1]} but expected "
                               f"{weight.shape[k]}")
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != weight.shape[0]):
        raise RuntimeError(f"{what} bias size does not match weight size: got {bias.shape[-1] if bias.ndim else 1} "
                           f"but expected {weight.shape[0]}")
    lead = input1.shape[:-1]
    x1 = reshape(input1, (-1, input1.shape[-1]))
    x2 = reshape(input2, (-1, input2.shape[-1]))
    y = einsum("bi,oij,bj->bo", x1, weight, x2)                          # (B, out)
    if bias is not None:
        y = add(y, bias)
    return reshape(y, lead + (weight.shape[0],))                        # (..., out)


def logsigmoid(input: Tensor) -> Tensor:  # noqa: A002 - torch's names
    """log(sigmoid(x)) = -softplus(-x) (stable for large |x|)."""
    return neg(softplus(neg(input)))


def mish(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """x * tanh(softplus(x))."""
    return mul(input, tanh(softplus(input)))


def softsign(input: Tensor) -> Tensor:  # noqa: A002
    """x / (1 + |x|)."""
    return div(input, add(_abs(input), 1.0))


def tanhshrink(input: Tensor) -> Tensor:  # noqa: A002
    """x - tanh(x)."""
    return sub(input, tanh(input))


def glu(input: Tensor, dim: int = -1) -> Tensor:  # noqa: A002
    """a * sigmoid(b), a and b the two halves of input along dim (its size must be even)."""
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    n = input.shape[dim]
    if n % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim % input.ndim} is size {n}")
    a, b = chunk(input, 2, dim)
    return mul(a, sigmoid(b))


def prelu(input: Tensor, weight: Tensor) -> Tensor:  # noqa: A002
    """max(0, x) + weight * min(0, x), weight one slope or one per channel (dim 1; dim 0 of a
    1-d input)."""
    w = weight
    if w.numel() > 1:
        c = 0 if input.ndim == 1 else 1
        if input.ndim == 0 or input.shape[c] != w.numel():
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found parameter numbers = "
                               f"{w.numel()} and channel size = {input.shape[c] if input.ndim else 1}.")
        w = reshape(w, (w.numel(),) + (1,) * (input.ndim - 1 - c))
    elif w.ndim:
        w = reshape(w, ())
    pos = relu(input)
    return add(pos, mul(w, sub(input, pos)))


def gumbel_softmax(logits: Tensor, tau: float = 1.0, hard: bool = False, eps: float = 1e-10, dim: int = -1) -> Tensor:
    """softmax((logits + g) / tau) with g Gumbel(0, 1) draws (tiletrain's generator, not torch's
    draws); hard: the one-hot of its argmax in the forward, the soft sample's gradient."""
    from ..ops.creation import rand
    from ..ops.elementwise import eq, log
    from ..ops.reduce import amax
    u = rand(logits.shape, dtype=logits.dtype, tiles=logits.tiles)
    g = neg(log(neg(log(clamp(u, min=1e-20)))))  # -log(Exp(1))
    y = softmax(div(add(logits, g), float(tau)), dim)
    if not hard:
        return y
    y_hard = eq(y.detach(), amax(y.detach(), dim, keepdim=True)).to(y.dtype)
    return add(sub(y_hard, y.detach()), y)


def _pixel_shuffle(x: Tensor, r: int, up: bool, what: str) -> Tensor:
    from ..ops.shape import permute
    if x.ndim < 3:
        raise RuntimeError(f"{what} expects input to have at least 3 dimensions, but got input with {x.ndim} "
                           "dimension(s)")
    *lead, c, h, w = x.shape
    if up:
        if c % (r * r):
            raise RuntimeError(f"{what} expects its input's 'channel' dimension to be divisible by the square of "
                               f"upscale_factor, but input.size(-3)={c} is not divisible by {r * r}")
        y = reshape(x, (-1, c // (r * r), r, r, h, w))
        return reshape(permute(y, 0, 1, 4, 2, 5, 3), (*lead, c // (r * r), h * r, w * r))
    if h % r or w % r:
        raise RuntimeError(f"{what} expects height and width to be divisible by downscale_factor {r}")
    y = reshape(x, (-1, c, h // r, r, w // r, r))
    return reshape(permute(y, 0, 1, 3, 5, 2, 4), (*lead, c * r * r, h // r, w // r))


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:  # noqa: A002
    """(*, C r^2, H, W) -> (*, C, H r, W r)."""
    return _pixel_shuffle(input, int(upscale_factor), True, "pixel_shuffle")


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:  # noqa: A002
    """(*, C, H r, W r) -> (*, C r^2, H, W)."""
    return _pixel_shuffle(input, int(downscale_factor), False, "pixel_unshuffle")


def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:  # noqa: A002
    """torch.nn.functional.unfold (im2col) of (N, C, H, W) or (C, H, W): the sliding blocks as
    (N, C kh kw, L) columns, composed of index selections (differentiable)."""
    from ..ops.composite import _windows
    from ..ops.shape import permute, unsqueeze
    if input.ndim not in (3, 4):
        raise NotImplementedError(f"Input Error: Only 3D or 4D input Tensors are supported (got {input.ndim}D)")
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = (
        (v, v) if isinstance(v, numbers.Integral) else tuple(v) for v in (kernel_size, dilation, padding, stride))
    x = input if input.ndim == 4 else unsqueeze(input, 0)
    if ph or pw:
        x = pad(x, (pw, pw, ph, ph))
    y = _windows(_windows(x, 2, kh, sh, dh), 3, kw, sw, dw)  # (N, C, oh, ow, kh, kw)
    n, c, oh, ow = y.shape[:4]
    y = reshape(permute(y, 0, 1, 4, 5, 2, 3), (n, c * kh * kw, oh * ow))
    return y if input.ndim == 4 else reshape(y, y.shape[1:])


def _pair(v, what: str, name: str) -> tuple:
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return (int(v), int(v))
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(
            isinstance(u, numbers.Integral) and not isinstance(u, bool) for u in v):
        return (int(v[0]), int(v[1]))
    if isinstance(v, (tuple, list)) and len(v) != 2:
        raise RuntimeError(f"It is expected {name} equals to 2, but got size {len(v)}")
    raise TypeError(f"{what}: {name} must be an int or a pair of ints, got {v!r}")


def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:  # noqa: A002
    """torch.nn.functional.fold (col2im), the adjoint of unfold: (N, C kh kw, L) or (C kh kw, L)
    columns summed into (N, C, H, W) or (C, H, W), overlapping blocks adding up.  Composed of one
    index_add of the columns into the padded output (flattened), then a crop: differentiable."""
    from ..ops.creation import zeros
    from ..ops.index import index_add
    from ..ops.shape import unsqueeze
    from ..ops.basic import _float_tensor
    what = "fold"
    _float_tensor(input, what, "input")
    (h, w), (kh, kw), (dh, dw), (ph, pw), (sh, sw) = (
        _pair(v, what, name) for v, name in ((output_size, "output_size"), (kernel_size, "kernel_size"),
                                             (dilation, "dilation"), (padding, "padding"), (stride, "stride")))
    if kh <= 0 or kw <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got kernel_height: {kh} kernel_width: {kw}")
    if sh <= 0 or sw <= 0:
        raise RuntimeError(f"stride should be greater than zero, but got stride_height: {sh} stride_width: {sw}")
    if dh <= 0 or dw <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got dilation_height: {dh} "
                           f"dilation_width: {dw}")
    if ph < 0 or pw < 0:
        raise RuntimeError(f"padding should be non-negative, but got pad_height: {ph} pad_width: {pw}")
    if input.ndim not in (2, 3):
        raise RuntimeError("Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and non-zero "
                           f"dimensions for input, but got: {list(input.shape)}")
    x = input if input.ndim == 3 else unsqueeze(input, 0)
    n, ckk, cols = x.shape
    if ckk % (kh * kw):
        raise RuntimeError(f"Expected size of input's dimension 1 to be divisible by the product of kernel_size, but "
                           f"got input.size(1)={ckk} and kernel_size=({kh}, {kw})")
    bh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    bw = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if cols != bh * bw:
        raise RuntimeError(f"Given output_size=({h}, {w}), kernel_size=({kh}, {kw}), dilation=({dh}, {dw}), "
                           f"padding=({ph}, {pw}), stride=({sh}, {sw}), expected size of input's dimension 2 to match "
                           f"the calculated number of sliding blocks {bh} * {bw} = {bh * bw}, but got "
                           f"input.size(2)={cols}.")
    if bh < 1 or bw < 1:
        raise RuntimeError(f"Given output_size=({h}, {w}), kernel_size=({kh}, {kw}), dilation=({dh}, {dw}), "
                           f"padding=({ph}, {pw}), stride=({sh}, {sw}), calculated shape of the array of sliding "
                           f"blocks as ({bh}, {bw}), but its components must be at least one.")
    c = ckk // (kh * kw)
    hp, wp = h + 2 * ph, w + 2 * pw
    # column (c, ki, kj) of block (i, j) lands at (i sh + ki dh, j sw + kj dw) of the padded output
    ki, kj, i, j = np.meshgrid(np.arange(kh), np.arange(kw), np.arange(bh), np.arange(bw), indexing="ij")
    idx = ((i * sh + ki * dh) * wp + j * sw + kj * dw).reshape(-1).astype(np.int64)
    y = index_add(zeros((n, c, hp * wp), dtype=x.dtype), 2, idx, reshape(x, (n, c, kh * kw * cols)))
    y = reshape(y, (n, c, hp, wp))
    if ph or pw:
        y = index_get(y, (slice(None), slice(None), slice(ph, ph + h), slice(pw, pw + w)))
    return y if input.ndim == 3 else reshape(y, y.shape[1:])


def softmin(input: Tensor, dim=None, _stacklevel: int = 3, dtype=None) -> Tensor:  # noqa: A002
    """softmax(-x) along dim."""
    return softmax(neg(input), dim, dtype=dtype)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None) -> Tensor:  # noqa: A002
    """x / max(||x||_p along dim, eps), as torch.nn.functional.normalize."""
    if out is not None:
        raise NotImplementedError("normalize: out= is not supported; use the return value")
    n = clamp(_norm(input, p, dim, keepdim=True), min=eps)
    return div(input, n)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps)) along dim (torch's formula: each
    operand divided by its clamped norm, then the product summed)."""
    n1 = clamp(_norm(x1, 2, dim, keepdim=True), min=eps)
    n2 = clamp(_norm(x2, 2, dim, keepdim=True), min=eps)
    return _sum(mul(div(x1, n1), div(x2, n2)), dim)


def pad(input: Tensor, pad, mode: str = "constant", value: float | None = None) -> Tensor:  # noqa: A002
    """torch.nn.functional.pad: pad = (left, right) for the last dim, then (top, bottom) for the
    one before, ...; mode "constant" fills value (negative amounts crop); "reflect",
    "replicate" and "circular" are padding.pad_modes."""
    if not isinstance(pad, (tuple, list)) or len(pad) % 2 or not all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in pad):
        raise ValueError(f"pad: pad must be a tuple of an even number of ints, got {pad!r}")
    if len(pad) // 2 > input.ndim:
        raise ValueError(f"Padding length should be less than or equal to two times the input dimension but got "
                         f"padding length {len(pad)} and input of dimension {input.ndim}")
    if mode != "constant":
        if value is not None and value != 0:
            raise RuntimeError(f"Padding mode \"{mode}\" doesn't take in value argument")
        from .padding import pad_modes
        return pad_modes(input, pad, mode)
    value = 0.0 if value is None else float(value)
    x = input
    for i in range(len(pad) // 2):
        d = x.ndim - 1 - i
        lo, hi = int(pad[2 * i]), int(pad[2 * i + 1])
        if lo < 0 or hi < 0:  # crop first
            idx = [slice(None)] * x.ndim
            idx[d] = slice(max(-lo, 0), x.shape[d] - max(-hi, 0))
            if idx[d].start >= idx[d].stop:
                raise RuntimeError(f"pad: the cropped size of dimension {d} would be <= 0")
            x = index_get(x, tuple(idx))
        parts = []
        for amount in (max(lo, 0), None, max(hi, 0)):
            if amount is None:
                parts.append(x)
            elif amount:
                shape = list(x.shape)
                shape[d] = amount
                parts.append(full(tuple(shape), value, dtype=x.dtype))
        x = cat(parts, d) if len(parts) > 1 else x
    return x


def _fused_shapes(q: Tensor, k: Tensor, v: Tensor, mask, gqa: bool) -> bool:
    """What the fused kernels take: 4-d (B, H, T, D) of one batch and D, key and value alike,
    the same heads (or a divisor of them with enable_gqa), the same T (or Tk >= Tq under
    causal_lower_right)."""
    if not (q.ndim == k.ndim == v.ndim == 4 and tuple(k.shape) == tuple(v.shape)):
        return False
    (b, h, t, d), (bk, hk, tk, dk) = q.shape, k.shape
    heads = hk == h or (gqa and hk and h % hk == 0)
    return b == bk and d == dk and heads and (tk == t or (mask is not None and tk >= t))


def _check_attention(q, k, v, mask, gqa: bool) -> None:
    """torch's shape rules for the composed path, checked before any task: (..., L, E) query,
    (..., S, E) key, (..., S, Ev) value of one float dtype, the same leading axes (heads
    dividing query's with enable_gqa), a mask tensor or None."""
    what = "scaled_dot_product_attention"
    for t, n in ((q, "query"), (k, "key"), (v, "value")):
        if not isinstance(t, Tensor):
            raise TypeError(f"{what}: {n} must be a tiletrain Tensor, got {type(t).__name__}")
        if t.ndim < 2:
            raise ValueError(f"{what}: {n} must have at least 2 dims (..., T, D), got shape {t.shape}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"{what}: dtype mismatch: query {q.dtype}, key {k.dtype}, value {v.dtype}")
    if tuple(k.shape[:-1]) != tuple(v.shape[:-1]):
        raise ValueError(f"{what}: key has shape {k.shape} and value has shape {v.shape}: they must agree in all "
                         "but the last axis")
    lead_q, lead_k = tuple(q.shape[:-2]), tuple(k.shape[:-2])
    if gqa and len(lead_q) == len(lead_k) >= 1 and lead_k[-1] and lead_q[-1] % lead_k[-1]:
        raise ValueError(f"{what}: key has {lead_k[-1]} heads: enable_gqa needs a number of heads dividing query's "
                         f"{lead_q[-1]}")
    grouped = (gqa and len(lead_q) == len(lead_k) >= 1 and lead_q[:-1] == lead_k[:-1] and lead_k[-1]
               and lead_q[-1] % lead_k[-1] == 0)
    if q.shape[-1] != k.shape[-1] or (lead_q != lead_k and not grouped):
        raise ValueError(f"{what}: query has shape {q.shape} and key has shape {k.shape}: their leading axes and "
                         "last axis must be equal" + ("" if gqa else " (enable_gqa=True for fewer key/value heads); "
                                                     "they must be equal"))
    if mask is not None and not isinstance(mask, Tensor):
        raise TypeError(f"{what}: attn_mask must be None, a tiletrain Tensor (bool or float) or "
                        f"causal_lower_right(Tq, Tk), got {type(mask).__name__}")


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False,
                                 **kwargs) -> Tensor:
    """torch.nn.functional.scaled_dot_product_attention: softmax(q k^T scale + mask) v.  The
    fused tile kernels (tiletrain/ops/attention.py) run when query, key and value are 4-d of
    one shape with no mask tensor and no dropout; otherwise (a bool mask: True takes part; a
    float mask: added; dropout; other shapes, cross attention) the same formula is composed of
    matmul, masked softmax and dropout."""
    from ..ops import attention as _att
    from ..tensors import from_numpy
    from ..ops.linalg import matmul
    from ..ops.shape import transpose
    plain = (attn_mask is None or isinstance(attn_mask, _att.CausalBias)) and not dropout_p
    if plain and _fused_shapes(query, key, value, attn_mask, enable_gqa):
        return _att.scaled_dot_product_attention(query, key, value, attn_mask, 0.0, is_causal, scale, enable_gqa,
                                                 **kwargs)
    if isinstance(attn_mask, _att.CausalBias):
        raise NotImplementedError("scaled_dot_product_attention: causal_lower_right with dropout or unequal "
                                  "shapes is not supported")
    _check_attention(query, key, value, attn_mask, enable_gqa)
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, numbers.Real) or not 0 <= dropout_p < 1:
        raise ValueError(f"scaled_dot_product_attention: dropout_p must be in [0, 1), got {dropout_p!r}")
    if not isinstance(is_causal, bool):
        raise TypeError(f"scaled_dot_product_attention: is_causal must be a bool, got {type(is_causal).__name__}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)
                              or not math.isfinite(scale)):
        raise TypeError(f"scaled_dot_product_attention: scale must be a finite real number, got {scale!r}")
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    if enable_gqa and query.ndim >= 3 and key.shape[-3] != query.shape[-3]:  # kv head h // (H // Hkv)
        from ..ops.index import index_select
        rep = query.shape[-3] // key.shape[-3]
        idx = from_numpy(np.repeat(np.arange(key.shape[-3], dtype=np.int64), rep))
        key, value = index_select(key, key.ndim - 3, idx), index_select(value, value.ndim - 3, idx)
    E = query.shape[-1]
    s = 1.0 / math.sqrt(E) if scale is None else float(scale)
    scores = mul(matmul(query, transpose(key, -2, -1)), s)
    L, S = query.shape[-2], key.shape[-2]
    if is_causal:
        attn_mask = from_numpy(np.tril(np.ones((L, S), dtype=np.bool_)))
    return matmul(attention_weights(scores, attn_mask, dropout_p), value)


def attention_weights(scores: Tensor, mask=None, dropout_p: float = 0.0) -> Tensor:
    """softmax over the last axis of scores with a mask (bool: True takes part; float: added),
    then dropout: the composed attention's weights (scaled_dot_product_attention,
    nn.MultiheadAttention's need_weights path)."""
    from ..ops.activations import dropout
    from ..ops.elementwise import add as _add, where
    if mask is not None:
        scores = where(mask, scores, -math.inf) if mask.dtype == np.bool_ else _add(scores, mask)
    w = softmax(scores, -1)
    return dropout(w, dropout_p, True) if dropout_p else w


def group_norm(input: Tensor, num_groups: int, weight=None, bias=None, eps: float = 1e-5) -> Tensor:  # noqa: A002
    """torch.nn.functional.group_norm over (N, C, *): each group of C / num_groups channels
    normalised with its own mean and biased variance, then weight[c] x + bias[c]."""
    from ..ops.reduce import mean as _mean
    from ..ops.elementwise import rsqrt
    from ..ops.shape import reshape
    x = input
    if x.ndim < 2 or x.shape[1] % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {list(x.shape)} and num_groups={num_groups}")
    N, C = x.shape[0], x.shape[1]
    g = reshape(x, (N, num_groups, -1))
    mu = _mean(g, -1, keepdim=True)
    d = sub(g, mu)
    var = _mean(mul(d, d), -1, keepdim=True)
    y = reshape(mul(d, rsqrt(add(var, eps))), x.shape)
    shape = (C,) + (1,) * (x.ndim - 2)
    if weight is not None:
        y = mul(y, reshape(weight, shape))
    if bias is not None:
        y = add(y, reshape(bias, shape))
    return y


def instance_norm(input: Tensor, running_mean=None, running_var=None, weight=None, bias=None,  # noqa: A002
                  use_input_stats: bool = True, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """torch.nn.functional.instance_norm: each (sample, channel) normalised over its spatial
    axes (running statistics are not supported)."""
    if running_mean is not None or running_var is not None or not use_input_stats:
        raise NotImplementedError("instance_norm: running statistics (track_running_stats) are not supported")
    return group_norm(input, input.shape[1], weight, bias, eps)


def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,  # noqa: A002
                recompute_scale_factor=None, antialias: bool = False) -> Tensor:
    """torch.nn.functional.interpolate, modes "nearest" (output i reads input floor(i * scale),
    scale = in / out, or 1 / scale_factor when given), "nearest-exact" (floor((i + 0.5) *
    scale)), "linear"/"bilinear"/"trilinear" (align_corners False: source (i + 0.5) scale -
    0.5 clamped at 0; True: i (in - 1) / (out - 1)), "bicubic" (torch's cubic convolution,
    A = -0.75, the source not clamped, the taps clamped at the edges) and "area" (adaptive
    average pooling), axis by axis as index selections and weighted sums (differentiable)."""
    linear = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
    if mode not in ("nearest", "nearest-exact", "area") and mode not in linear:
        raise NotImplementedError(f"interpolate: mode {mode!r} is not supported ('nearest', 'nearest-exact', 'area', "
                                  "'linear', 'bilinear', 'bicubic', 'trilinear' are)")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported")
    nsp = input.ndim - 2
    if nsp < 1:
        raise ValueError(f"interpolate: input must be (N, C, *spatial), got shape {input.shape}")
    if mode in linear and linear[mode] != nsp:
        raise NotImplementedError(f"Got {input.ndim}D input, but {mode} mode needs {linear[mode] + 2}D input")
    if mode not in linear and align_corners is not None:
        raise ValueError("align_corners option can only be set with the interpolating modes: linear | bilinear | "
                         "bicubic | trilinear")
    out, scales = _interp_sizes(input, size, scale_factor, recompute_scale_factor, nsp)
    if mode == "area":
        from ..ops import conv
        return getattr(conv, f"adaptive_avg_pool{nsp}d")(input, out)
    x = input
    for k in reversed(range(nsp)):  # the last axis first: torch's order of the weighted sums
        n, o = input.shape[2 + k], out[k]
        if mode.startswith("nearest"):
            x = _nearest_axis(x, 2 + k, n, o, scales[k], mode == "nearest-exact")
        elif mode == "bicubic":
            x = _cubic_axis(x, 2 + k, n, o, scales[k], bool(align_corners))
        else:
            x = _linear_axis(x, 2 + k, n, o, scales[k], bool(align_corners))
    return x


def _interp_sizes(input, size, scale_factor, recompute, nsp):
    if (size is None) == (scale_factor is None):
        raise ValueError("only one of size or scale_factor should be defined")
    spatial = input.shape[2:]
    if size is not None:
        out = (size,) * nsp if isinstance(size, numbers.Integral) else tuple(size)
        scales = [None] * nsp
    else:
        sf = (scale_factor,) * nsp if isinstance(scale_factor, numbers.Real) else tuple(scale_factor)
        out = tuple(int(math.floor(n * f)) for n, f in zip(spatial, sf))
        scales = [None if recompute else 1.0 / f for f in sf]
    if len(out) != nsp or any(o < 1 for o in out):
        raise ValueError(f"interpolate: size/scale_factor must give {nsp} positive sizes, got {out}")
    return out, scales


def _nearest_axis(x, d, n, o, scale, exact=False):
    from ..ops.index import index_select
    from ..tensors import from_numpy
    sc = np.float32(n / o if scale is None else scale)
    dst = np.arange(o, dtype=np.float32) + (np.float32(0.5) if exact else np.float32(0.0))
    idx = np.minimum(np.floor(dst * sc).astype(np.int64), n - 1)
    return index_select(x, d, from_numpy(np.ascontiguousarray(idx)))


def _linear_axis(x, d, n, o, scale, align_corners):
    from ..ops.index import index_select
    from ..ops.shape import reshape
    from ..tensors import from_numpy
    dst = np.arange(o, dtype=np.float64)
    if align_corners:
        src = dst * ((n - 1) / (o - 1) if o > 1 else 0.0)
    else:
        sc = n / o if scale is None else scale
        src = np.maximum((dst + 0.5) * sc - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n - 1)
    i1 = np.minimum(i0 + 1, n - 1)
    l1 = src - i0
    shape = (o,) + (1,) * (x.ndim - 1 - d)
    w0 = from_numpy(np.ascontiguousarray((1.0 - l1).reshape(shape)).astype(x.dtype))
    w1 = from_numpy(np.ascontiguousarray(l1.reshape(shape)).astype(x.dtype))
    a = index_select(x, d, from_numpy(np.ascontiguousarray(i0)))
    b = index_select(x, d, from_numpy(np.ascontiguousarray(i1)))
    return add(mul(w0, a), mul(w1, b))


def _cubic_weights(t: np.ndarray, A: float = -0.75) -> list:
    """torch's cubic-convolution weights of the four taps floor(src) - 1 .. + 2 at fraction t."""
    near = lambda v: ((A + 2) * v - (A + 3)) * v * v + 1  # noqa: E731  |v| <= 1
    far = lambda v: ((A * v - 5 * A) * v + 8 * A) * v - 4 * A  # noqa: E731  1 < |v| < 2
    return [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]


def _cubic_axis(x, d, n, o, scale, align_corners):
    from ..ops.index import index_select
    from ..tensors import from_numpy
    dst = np.arange(o, dtype=np.float64)
    if align_corners:
        src = dst * ((n - 1) / (o - 1) if o > 1 else 0.0)
    else:
        src = (dst + 0.5) * (n / o if scale is None else scale) - 0.5
    i0 = np.floor(src).astype(np.int64)
    shape = (o,) + (1,) * (x.ndim - 1 - d)
    y = None
    for k, w in enumerate(_cubic_weights(src - i0)):
        idx = from_numpy(np.ascontiguousarray(np.clip(i0 - 1 + k, 0, n - 1)))
        term = mul(from_numpy(np.ascontiguousarray(w.reshape(shape)).astype(x.dtype)), index_select(x, d, idx))
        y = term if y is None else add(y, term)
    return y
