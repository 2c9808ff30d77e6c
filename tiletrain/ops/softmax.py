"""softmax, log_softmax (along any axis) and a fused cross-entropy (along the last axis).

The axis may be split into several tiles.  Each op first runs a span reduction along
it that keeps two numbers per row, the row max ``mx`` and ``s = sum exp(x - mx)``
(accumulated online across the row's tiles), then a broadcast pass over the tiles.  The
backward rules recompute the probabilities ``exp(x - mx) / s`` from the saved input and
row statistics (O(rows) extra memory; no probability tensor is kept, and the output is not
saved, so no reference cycle through the autograd node):

- softmax:       dx = y * (g - sum(g * y))
- log_softmax:   dx = g - exp(y) * sum(g)
- cross_entropy: dlogits = (softmax(logits) - onehot(target)) * g / count, zero rows for
  ignored targets.

cross_entropy counts the non-ignored targets with tile tasks and divides in a task on 0-d
tensors, so neither its forward nor its backward waits for anything (apart from the range
check of the targets in forward, which reads the targets tensor)."""
from __future__ import annotations

import numbers

import numpy as np

from ..runtime.kernels import run_map, run_span, sum_all
from ..tensors import Tensor, TensorTraits, as_dtype, from_numpy
from ..tensors.tensor import known_within, value_range_of
from .autograd import backward_rule, double_backward_rule, needs_grad, record
from .basic import _float_tensor, _tensor, astype, dim_alias
from .elementwise import add, mul, neg
from .index import gather, index_select
from .reduce import mean as _mean, sum as _total
from .shape import permute, reshape, retile

_REDUCTIONS = ("mean", "sum", "none")


def _axis(x: Tensor, dim, what: str) -> int:
    if dim is None:  # torch's deprecated implicit choice, with its warning
        import warnings
        warnings.warn(f"Implicit dimension choice for {what} has been deprecated. Change the call to include "
                      "dim=X as an argument.", UserWarning, stacklevel=4)
        dim = 0 if x.ndim in (0, 1, 3) else 1
    if not isinstance(dim, numbers.Integral) or isinstance(dim, bool):
        raise TypeError(f"{what}: dim must be an int, got {type(dim).__name__}")
    if x.ndim == 0:
        raise ValueError(f"{what}: input must have at least one axis, got a 0-d tensor")
    if not -x.ndim <= dim < x.ndim:
        raise IndexError(f"{what}: Dimension out of range (expected to be in range of [{-x.ndim}, {x.ndim - 1}], "
                         f"but got {dim})")
    return int(dim) % x.ndim


def _row_stats(x: Tensor, axis: int) -> tuple[Tensor, Tensor]:
    """(max, sum of exp(x - max)) along ``axis``, as span-reduction tasks."""
    rows = x.traits.drop_axis(axis)
    mx, s = Tensor(rows, x.dtype), Tensor(rows, x.dtype)
    run_span("softmax_stats", axis, 1, [x], [mx, s], reduce=True)
    return mx, s


def _softmax(x: Tensor, dim, dtype, islog: int, what: str) -> Tensor:
    _float_tensor(x, what, "input")
    axis = _axis(x, dim, what)
    if dtype is not None and as_dtype(dtype) != x.dtype:
        x = astype(x, dtype)
        _float_tensor(x, what, "dtype")
    mx, s = _row_stats(x, axis)
    y = Tensor(x.traits, x.dtype)
    run_span("softmax_apply", axis, 1, [x, y], [mx, s], reduce=False, islog=islog)
    return record(what, y, (x,), saved=(x, mx, s), islog=islog, axis=axis)


@dim_alias
def softmax(input: Tensor, dim=None, dtype=None) -> Tensor:
    """torch.nn.functional.softmax: exp(x - max) / sum(exp(x - max)) along ``dim`` (required)."""
    return _softmax(input, dim, dtype, 0, "softmax")


@dim_alias
def log_softmax(input: Tensor, dim=None, dtype=None) -> Tensor:
    """torch.nn.functional.log_softmax: (x - max) - log(sum(exp(x - max))) along ``dim`` (required)."""
    return _softmax(input, dim, dtype, 1, "log_softmax")


def _softmax_bwd(node, g):
    x, mx, s = node.saved
    islog, axis = node.ctx["islog"], node.ctx["axis"]
    d = Tensor(mx.traits, x.dtype)  # sum(g * y) for softmax, sum(g) for log_softmax
    run_span("softmax_bwd_dot", axis, 1, [x, g], [mx, s, d], reduce=True, islog=islog)
    dx = Tensor(x.traits, x.dtype)
    run_span("softmax_bwd", axis, 1, [x, g, dx], [mx, s, d], reduce=False, islog=islog)
    return (dx,)


backward_rule("softmax")(_softmax_bwd)
backward_rule("log_softmax")(_softmax_bwd)


@double_backward_rule("softmax")
@double_backward_rule("log_softmax")
def _softmax_double(node, g):
    """Differentiable form (torch's formulas, the output recomputed as a recorded op):
    softmax dx = y (g - sum(g y)), log_softmax dx = g - exp(y) sum(g)."""
    from .elementwise import exp, mul, sub
    from .reduce import sum as rsum
    x = node.saved[0]
    islog, axis = node.ctx["islog"], node.ctx["axis"]
    y = _softmax(x, axis, None, islog, "log_softmax" if islog else "softmax")
    if islog:
        return (sub(g, mul(exp(y), rsum(g, axis, keepdim=True))),)
    return (mul(y, sub(g, rsum(mul(g, y), axis, keepdim=True))),)


def _zero_d(dtype) -> Tensor:
    return Tensor(TensorTraits(()), dtype)


def _div0(a: Tensor, b: Tensor) -> Tensor:
    """a / b on 0-d tensors, as one task (0 / 0 = nan)."""
    c = _zero_d(a.dtype)
    run_map("div", a, b, c, alpha=1.0)
    return c


def _sum0(x: Tensor) -> Tensor:
    """The sum of every element of x, as a 0-d tensor (one task per tile)."""
    y = _zero_d(x.dtype)
    sum_all(1.0, x, 0.0, y)
    return y


def _check_targets(logits: Tensor, targets, ignore_index: int, what: str) -> Tensor:
    if not isinstance(targets, Tensor):
        raise TypeError(f"{what}: targets must be a tiletrain Tensor, got {type(targets).__name__}")
    _tensor(targets, what, "targets")
    if targets.dtype != np.int64:
        raise TypeError(f"{what}: targets must be int64 class ids, got dtype {targets.dtype}")
    rows = logits.traits.drop_axis(logits.ndim - 1)
    if targets.shape != rows.shape:
        raise ValueError(f"{what}: targets must have shape {rows.shape} (logits {logits.shape} without "
                         f"the last axis), got {targets.shape}")
    if targets.tiles != rows.tiles:  # tiling is never a correctness rule: retiled like logits' rows
        retiled = retile(targets, rows.tiles)
        retiled.value_range = value_range_of(targets)
        targets = retiled
    ncls = logits.shape[-1]
    if known_within(targets, ncls):  # from_numpy's targets: in range without reading them back
        return targets
    t = targets.numpy(force=True)  # input data: waits only for the targets' writers
    bad = (t != ignore_index) & ((t < 0) | (t >= ncls))
    if bad.any():
        pos = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{what}: target {int(t[pos])} at position {pos} is out of range: class ids "
                         f"must be in [0, {ncls}) or equal ignore_index={ignore_index}")
    return targets


def cross_entropy(input: Tensor, target: Tensor, weight=None, size_average=None,  # noqa: A002
                  ignore_index: int = -100, reduce=None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """torch.nn.functional.cross_entropy: the classes on dim 1 of an (N, C, d1, ...) input
    (the last axis of (N, C) and of an unbatched (C,)), targets (N, d1, ...) of class ids;
    the rest as ``cross_entropy_last`` (tiletrain's models' (..., V) logits call that).  A
    float target of input's shape holds class probabilities (torch's soft targets)."""
    if isinstance(target, Tensor) and isinstance(input, Tensor) and target.dtype == input.dtype \
            and target.shape == input.shape:
        return _soft_cross_entropy(input, target, weight, reduction, label_smoothing)
    if isinstance(input, Tensor) and input.ndim >= 3:
        input = permute(input, 0, *range(2, input.ndim), 1)  # (N, d1, ..., C): the classes last
    return cross_entropy_last(input, target, weight, size_average, ignore_index, reduce, reduction, label_smoothing)


def _soft_cross_entropy(x: Tensor, p: Tensor, weight, reduction: str, label_smoothing: float) -> Tensor:
    """-sum_c w_c p_c log_softmax(x)_c over the class dim (1; 0 unbatched); mean: over the
    samples (not the weights), as torch's probability targets."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    c = 1 if x.ndim >= 2 else 0
    C = x.shape[c]
    if label_smoothing:
        p = add(mul(p, 1.0 - label_smoothing), label_smoothing / C)
    terms = mul(log_softmax(x, c), p)
    if weight is not None:
        terms = mul(terms, reshape(weight, (C,) + (1,) * (x.ndim - 1 - c)))
    per = neg(_total(terms, c))
    if reduction == "none":
        return per
    return _total(per) if reduction == "sum" else _mean(per)


def cross_entropy_last(logits: Tensor, targets: Tensor, weight=None, size_average=None, ignore_index: int = -100,
                       reduce=None, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Softmax cross-entropy of ``logits`` (..., V) against int64 class ids ``targets``
    (logits' shape and tiles without the last axis), PyTorch semantics and argument order
    but the classes on the last axis (a language model's (B, T, V) logits as they are).

    reduction="mean" averages over the targets that are not ``ignore_index`` (nan when every
    target is ignored, as in PyTorch: 0 / 0); "sum" adds them; "none" returns the loss per
    position (0 where the target is ignored).  "mean" and "sum" return a 0-d tensor.
    ``label_smoothing`` = eps in [0, 1]: torch's mixture (1 - eps) * cross-entropy + eps *
    the mean over the classes of -log_softmax, per counted position.  ``weight``: torch's
    class weights (V,) -- each position's loss times its target's weight, "mean" divided by
    the sum of the counted targets' weights (composed of log_softmax, gather and
    index_select).  Not supported (a clear error): the deprecated ``size_average``/``reduce``
    (use reduction=).

    Fused: the forward keeps only the row max and the row sum of exp per position; the
    backward recomputes the probabilities from the logits.  Raises ValueError, before
    submitting anything, for a target outside [0, V) that is not ignore_index."""
    what = "cross_entropy"
    if size_average is not None or reduce is not None:
        raise NotImplementedError(f"{what}: size_average and reduce are deprecated in torch and not supported; "
                                  "use reduction='mean', 'sum' or 'none'")
    if not isinstance(label_smoothing, numbers.Real) or isinstance(label_smoothing, bool) \
            or not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{what}: label_smoothing must be a number in [0, 1], got {label_smoothing!r}")
    if weight is not None:
        return _weighted_cross_entropy(logits, targets, weight, ignore_index, reduction, float(label_smoothing))
    if label_smoothing > 0.0:
        return _smoothed_cross_entropy(logits, targets, ignore_index, reduction, float(label_smoothing))
    _float_tensor(logits, what, "logits")
    if logits.ndim == 0:
        raise ValueError(f"{what}: logits must have at least one axis (the classes), got a 0-d tensor")
    if not isinstance(reduction, str) or reduction not in _REDUCTIONS:
        raise ValueError(f"{what}: reduction must be one of {', '.join(map(repr, _REDUCTIONS))}, "
                         f"got {reduction!r}")
    if not isinstance(ignore_index, numbers.Integral) or isinstance(ignore_index, bool):
        raise TypeError(f"{what}: ignore_index must be an int, got {type(ignore_index).__name__}")
    ignore_index = int(ignore_index)
    if not -2**63 <= ignore_index < 2**63:
        raise ValueError(f"{what}: ignore_index {ignore_index} does not fit in int64")
    targets = _check_targets(logits, targets, ignore_index, what)

    axis = logits.ndim - 1
    rows = logits.traits.drop_axis(axis)
    geom = {"vtile": logits.tiles[-1], "ncols": logits.shape[-1], "ignore_index": ignore_index}
    mx, s = Tensor(rows, logits.dtype), Tensor(rows, logits.dtype)
    per_row, counted = Tensor(rows, logits.dtype), Tensor(rows, logits.dtype)
    run_span("cross_entropy_fwd", axis, 1, [logits],
          [targets, mx, s, per_row, counted], reduce=True, **geom)
    count = None
    if reduction == "none":
        out = per_row
    elif reduction == "sum":
        out = _sum0(per_row)
    else:
        count = _sum0(counted)
        out = _div0(_sum0(per_row), count)
    return record(what, out, (logits,), saved=(logits, targets, mx, s, count), reduction=reduction, geom=geom)


def _smoothed_cross_entropy(logits: Tensor, targets: Tensor, ignore_index, reduction: str, eps: float) -> Tensor:
    """(1 - eps) * cross_entropy + eps * (-mean_c log_softmax), over the counted positions,
    of the fused op and log_softmax (so autograd comes with them)."""
    ce = cross_entropy_last(logits, targets, ignore_index=ignore_index, reduction=reduction)
    t = targets.numpy(force=True)                       # checked by cross_entropy; the counted positions
    counted = t != ignore_index
    smooth = mul(_mean(log_softmax(logits, -1), -1), -1.0)
    if not counted.all():
        rows = logits.traits.drop_axis(logits.ndim - 1)
        smooth = mul(smooth, from_numpy(np.array(counted, dtype=logits.dtype, order="C"), rows.tiles or None))
    if reduction == "sum":
        smooth = _total(smooth)
    elif reduction == "mean":
        smooth = mul(_total(smooth), 1.0 / counted.sum() if counted.any() else float("nan"))
    return mul(ce, 1.0 - eps) + mul(smooth, eps)


def _weighted_cross_entropy(logits: Tensor, targets: Tensor, weight, ignore_index, reduction: str,
                            eps: float) -> Tensor:
    """torch's cross-entropy with class weights w (and label smoothing eps): per position
    -(1 - eps) w[t] logp[t] - eps / V * sum_c w[c] logp[c], zero where t is ignored; "mean"
    divides the sum by the counted targets' total weight."""
    what = "cross_entropy"
    _float_tensor(logits, what, "logits")
    logp = log_softmax(logits, -1)
    nll, w_t, counted = _nll_terms(logp, targets, weight, ignore_index, reduction, what)
    V = logits.shape[-1]
    loss = mul(nll, 1.0 - eps)                                   # -(1 - eps) w[t] logp[t]
    if eps > 0.0:
        smooth = mul(_total(mul(logp, weight), -1), -eps / V)
        if not counted.all():
            smooth = mul(smooth, from_numpy(np.array(counted, dtype=logits.dtype, order="C")))
        loss = loss + smooth
    return _nll_reduce(loss, w_t, reduction)


def _nll_terms(logp: Tensor, targets, weight, ignore_index, reduction: str, what: str):
    """(-w[t] logp[t] per position (0 where t is ignored), w[t] (0 where ignored), the host mask
    of counted positions); logp (..., V), weight None or (V,)."""
    _float_tensor(logp, what, "input")
    if logp.ndim == 0:
        raise ValueError(f"{what}: input must have at least one axis (the classes), got a 0-d tensor")
    V = logp.shape[-1]
    if weight is not None:
        w = _float_tensor(weight, what, "weight")
        if w.shape != (V,):
            raise ValueError(f"{what}: weight must have shape ({V},) (one weight per class), got {w.shape}")
        if w.dtype != logp.dtype:
            raise TypeError(f"{what}: weight is {w.dtype} but input is {logp.dtype}")
        if needs_grad(w):
            raise RuntimeError(f"{what}: weight cannot require gradients (as torch: the loss is not differentiable "
                               "with respect to the class weights)")
    if not isinstance(ignore_index, numbers.Integral) or isinstance(ignore_index, bool):
        raise TypeError(f"{what}: ignore_index must be an int, got {type(ignore_index).__name__}")
    if not isinstance(reduction, str) or reduction not in _REDUCTIONS:
        raise ValueError(f"{what}: reduction must be one of {', '.join(map(repr, _REDUCTIONS))}, got {reduction!r}")
    targets = _check_targets(logp, targets, int(ignore_index), what)
    t = targets.numpy(force=True)
    counted = t != ignore_index
    safe = np.where(counted, t, 0).astype(np.int64)
    picked = reshape(gather(logp, -1, from_numpy(np.ascontiguousarray(safe[..., None]))), t.shape)
    mask = from_numpy(np.array(counted, dtype=logp.dtype, order="C"))
    w_t = mask if weight is None else \
        mul(reshape(index_select(weight, 0, from_numpy(np.ascontiguousarray(safe.reshape(-1)))), t.shape), mask)
    return neg(mul(picked, w_t)), w_t, counted


def _nll_reduce(loss: Tensor, w_t: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return loss
    total = _total(loss)
    return total if reduction == "sum" else total / _total(w_t)


def nll_loss(input: Tensor, target: Tensor, weight=None, size_average=None, ignore_index: int = -100,  # noqa: A002
             reduce=None, reduction: str = "mean") -> Tensor:
    """torch.nn.functional.nll_loss: -weight[t] input[t] per position, input of log-probabilities
    with the classes on dim 1 of (N, C, d1, ...) (the last axis of (N, C) and of an unbatched
    (C,)); "mean" divides by the counted targets' total weight (ignore_index not counted)."""
    what = "nll_loss"
    if size_average is not None or reduce is not None:
        raise NotImplementedError(f"{what}: size_average and reduce are deprecated in torch and not supported; "
                                  "use reduction='mean', 'sum' or 'none'")
    if isinstance(input, Tensor) and input.ndim >= 3:
        input = permute(input, 0, *range(2, input.ndim), 1)  # (N, d1, ..., C): the classes last
    loss, w_t, _ = _nll_terms(input, target, weight, ignore_index, reduction, what)
    return _nll_reduce(loss, w_t, reduction)


@backward_rule("cross_entropy")
def _cross_entropy_bwd(node, g):
    logits, targets, mx, s, count = node.saved
    c = node.ctx
    rows = mx.traits
    if c["reduction"] == "none":
        gr = g
    else:
        scale = _div0(g, count) if c["reduction"] == "mean" else g  # 0-d
        if rows.ndim == 0:
            gr = scale
        else:
            gr = Tensor(rows, logits.dtype)
            run_span("bcast", 0, rows.ndim, [gr], [scale],
                  reduce=False, alpha=1.0)
    dx = Tensor(logits.traits, logits.dtype)
    run_span("cross_entropy_bwd", logits.ndim - 1, 1,
          [logits, dx], [targets, mx, s, gr], reduce=False, **c["geom"])
    return (dx,)


__all__ = ["softmax", "log_softmax", "cross_entropy", "nll_loss"]


@double_backward_rule("cross_entropy")
def _cross_entropy_double(node, g):
    """Differentiable form: dlogits = (softmax(logits) - onehot(target)) * w per row, w = g
    (divided by the count for "mean"), 0 for ignored targets.  The one-hot and row masks are
    built from the targets on the host (read once: create_graph only)."""
    from ..tensors import from_numpy
    from .elementwise import div, mul, sub
    from .shape import unsqueeze
    logits, targets, mx, s, count = node.saved
    c = node.ctx
    t = targets.numpy(force=True)
    valid = t != c["geom"]["ignore_index"]
    onehot = np.zeros(logits.shape, dtype=logits.dtype)
    idx = np.nonzero(valid)
    onehot[idx + (t[idx],)] = 1.0
    rows = mx.traits
    vt = from_numpy(np.array(valid, dtype=logits.dtype, order="C"), rows.tiles if rows.ndim else None)
    w = mul(div(g, count) if c["reduction"] == "mean" else g, vt)
    p = softmax(logits, dim=-1)
    return (mul(sub(p, from_numpy(onehot, logits.tiles)), unsqueeze(w, -1)),)
