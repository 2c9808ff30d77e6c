"""Losses with torch.nn.functional's signatures and numerics: mse_loss, l1_loss,
binary_cross_entropy_with_logits (cross_entropy lives in tiletrain/ops/softmax.py).

Each is element-wise kernels (kernels.def, `# --- reductions`: absdiff, bce_logits and their
backward kernels) followed by tiletrain/ops/reduce.py's mean or sum.  input and target have one
shape and tiling (torch broadcasts them with a warning; tiletrain refuses).  ctc_loss is a
composition of recorded ops (its alpha recursion, one step per time step)."""
from __future__ import annotations

import numbers

import numpy as np

from ..ops import reduce
from ..ops.reduce import norm as _norm, sum as _sum  # (the losses' `reduce` argument hides the module)
from ..ops.autograd import backward_rule, composite_grads, double_backward_rule, record
from ..ops.basic import _float_tensor, _same
from ..ops.elementwise import mul, neg, sub
from ..ops.shape import retile
from ..runtime.kernels import run_map, run_span
from ..tensors import Tensor

_REDUCTIONS = ("none", "mean", "sum")


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    return loss if reduction == "none" else reduce.mean(loss) if reduction == "mean" else reduce.sum(loss)


def _reduction(what: str, reduction) -> None:
    if not isinstance(reduction, str) or reduction not in _REDUCTIONS:
        raise ValueError(f"{what}: reduction must be one of {', '.join(map(repr, _REDUCTIONS))}, got {reduction!r}")


def _check(what: str, input, target, reduction) -> None:
    """input and target of one shape and dtype (any tilings: _like retiles target once every
    operand is checked), a known reduction."""
    _float_tensor(input, what, "input")
    _float_tensor(target, what, "target")
    _same(what, input, target if target.tiles == input.tiles else _Retile(target, input.tiles),
          names=("input", "target"))
    _reduction(what, reduction)


def _like(t: Tensor, x: Tensor) -> Tensor:
    """t tiled like x (tiling is never a correctness rule)."""
    return t if t.tiles == x.tiles else retile(t, x.tiles)


def _deprecated(what: str, size_average, reduce) -> None:
    if size_average is not None or reduce is not None:
        raise NotImplementedError(f"{what}: size_average and reduce are deprecated in torch and not supported; "
                                  "use reduction='mean', 'sum' or 'none'")


def _weighted(loss: Tensor, weight) -> Tensor:
    return loss if weight is None else mul(loss, weight)


def _weighted_reduce(loss: Tensor, weight, reduction: str, input: Tensor, what: str) -> Tensor:  # noqa: A002
    """torch's weighted mse/l1: weight (input's shape) times the loss; "mean" divides the sum by
    the sum of the weights."""
    if weight is None:
        return _reduce(loss, reduction)
    if tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    loss = mul(loss, weight)
    return _reduce(loss, reduction) if reduction != "mean" else reduce.sum(loss) / reduce.sum(weight)


def mse_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean",
             weight=None) -> Tensor:
    """torch.nn.functional.mse_loss: weight (input - target)^2, reduced."""
    _deprecated("mse_loss", size_average, reduce)
    _check("mse_loss", input, target, reduction)
    target = _like(target, input)
    d = sub(input, target)
    return _weighted_reduce(mul(d, d), weight, reduction, input, "mse_loss")


def l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean",
            weight=None) -> Tensor:
    """torch.nn.functional.l1_loss: |input - target|, reduced (gradient sign(input - target),
    0 where they are equal)."""
    _deprecated("l1_loss", size_average, reduce)
    _check("l1_loss", input, target, reduction)
    target = _like(target, input)
    y = Tensor(input.traits, input.dtype)
    run_map("absdiff", input, target, y)
    return _weighted_reduce(record("absdiff", y, (input, target), saved=(input, target)), weight, reduction, input,
                            "l1_loss")


@backward_rule("absdiff")
def _absdiff_bwd(node, g):
    a, b = node.saved
    da = Tensor(a.traits, a.dtype)
    run_map("absdiff_bwd", a, b, g, da, alpha=1.0)
    return (da if node.inputs[0] is not None else None,
            neg(da) if node.inputs[1] is not None else None)


@double_backward_rule("absdiff")
def _absdiff_double(node, g):
    from ..ops.elementwise import abs as eabs
    a, b = node.saved
    return composite_grads(node, g, lambda a, b: eabs(sub(a, b)), a, b)


@double_backward_rule("bce_logits")
def _bce_logits_double(node, g):
    """dx = g w ((1 - t) - (1 + (pw - 1) t) sigmoid(-x)), dt = g w (-x + (pw - 1) softplus(-x)),
    softplus(-x) = log(1 + exp(-|x|)) + max(-x, 0), with recorded ops (weights: constants)."""
    from ..ops.elementwise import abs as eabs, add, exp, log, relu, sigmoid
    x, t, w, pw = node.saved
    gw = mul(g, w)
    dx = dt = None
    if node.inputs[0] is not None:
        c = add(mul(t, sub(pw, 1.0)), 1.0)
        dx = mul(gw, sub(sub(1.0, t), mul(c, sigmoid(neg(x)))))
    if node.inputs[1] is not None:
        sp = add(relu(neg(x)), log(add(exp(neg(eabs(x))), 1.0)))
        dt = mul(gw, sub(mul(sp, sub(pw, 1.0)), x))
    return dx, dt


class _Retile:
    """A weight to retile once every operand is checked (nothing is submitted before)."""

    def __init__(self, t: Tensor, tiles):
        self.t, self.tiles, self.shape, self.dtype = t, tiles, t.shape, t.dtype

    def __call__(self) -> Tensor:
        return retile(self.t, self.tiles)


def _check_weight(w, x: Tensor, what: str, name: str):
    """w: None, input's shape, or 1-D over input's last axis (checked before any task),
    returned tiled like input."""
    if w is None:
        return None
    _float_tensor(w, what, name)
    if w.dtype != x.dtype:
        raise TypeError(f"{what}: dtype mismatch, input is {x.dtype} and {name} is {w.dtype}")
    if w.shape == x.shape and w.tiles != x.tiles:
        w = _Retile(w, x.tiles)
    elif w.shape == x.shape[-1:] and w.tiles != x.tiles[-1:]:
        w = _Retile(w, x.tiles[-1:])
    if (w.shape, w.tiles) not in ((x.shape, x.tiles), (x.shape[-1:], x.tiles[-1:])) and not isinstance(w, _Retile):
        raise ValueError(f"{what}: {name} must have input's shape {x.shape} and tiles {x.tiles}, or be 1-D of "
                         f"shape {x.shape[-1:]} with tiles {x.tiles[-1:]} (input's last axis); got shape "
                         f"{w.shape} and tiles {w.tiles}")
    return w


def _weight(w, x: Tensor) -> Tensor:
    """w (checked) as a tensor of x's layout: None -> ones; a 1-D w broadcast over x's other axes."""
    if w is not None and w.shape == x.shape:
        return w
    t = Tensor(x.traits, x.dtype)
    if w is None:
        run_map("fill", t, value=1.0)
    else:
        run_span("bcast", 0, x.ndim - 1, [t], [w], reduce=False, alpha=1.0)
    return t


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight=None, size_average=None, reduce=None,
                                     reduction: str = "mean", pos_weight=None) -> Tensor:
    """torch.nn.functional.binary_cross_entropy_with_logits, in torch's stable form
    (1 - t) x + (1 + (pos_weight - 1) t) (log1p(exp(-|x|)) + max(-x, 0)), times weight.
    weight and pos_weight: input's shape, or 1-D over the last axis.  Gradients flow to input
    and target (not to weight or pos_weight)."""
    what = "binary_cross_entropy_with_logits"
    _deprecated(what, size_average, reduce)
    _check(what, input, target, reduction)
    weight = _check_weight(weight, input, what, "weight")
    pos_weight = _check_weight(pos_weight, input, what, "pos_weight")
    weight, pos_weight = (w() if isinstance(w, _Retile) else w for w in (weight, pos_weight))
    target = _like(target, input)
    w, pw = _weight(weight, input), _weight(pos_weight, input)
    y = Tensor(input.traits, input.dtype)
    run_map("bce_logits", input, target, w, pw, y)
    return _reduce(record("bce_logits", y, (input, target), saved=(input, target, w, pw)), reduction)


@backward_rule("bce_logits")
def _bce_logits_bwd(node, g):
    x, t, w, pw = node.saved
    dx, dt = Tensor(x.traits, x.dtype), Tensor(x.traits, x.dtype)
    run_map("bce_logits_bwd", x, t, w, pw, g, dx, dt)
    return (dx if node.inputs[0] is not None else None, dt if node.inputs[1] is not None else None)


def binary_cross_entropy(input: Tensor, target: Tensor, weight=None, size_average=None, reduce=None,
                         reduction: str = "mean") -> Tensor:
    """torch.nn.functional.binary_cross_entropy of probabilities: -w (t log x + (1 - t) log(1 - x)),
    each log clamped at -100 as torch does."""
    from ..ops.elementwise import add, clamp, log
    what = "binary_cross_entropy"
    _deprecated(what, size_average, reduce)
    _check(what, input, target, reduction)
    target = _like(target, input)
    lx = clamp(log(input), min=-100.0)
    l1x = clamp(log(sub(1.0, input)), min=-100.0)
    loss = neg(add(mul(target, lx), mul(sub(1.0, target), l1x)))
    return _reduce(_weighted(loss, weight), reduction)


def smooth_l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean",
                   beta: float = 1.0) -> Tensor:
    """torch.nn.functional.smooth_l1_loss: 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta."""
    from ..ops.elementwise import abs as eabs, lt, where
    what = "smooth_l1_loss"
    _deprecated(what, size_average, reduce)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    if beta == 0:
        return l1_loss(input, target, reduction=reduction)
    _check(what, input, target, reduction)
    d = sub(input, _like(target, input))
    a = eabs(d)
    return _reduce(where(lt(a, beta), mul(mul(d, d), 0.5 / beta), sub(a, 0.5 * beta)), reduction)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,
               weight=None) -> Tensor:
    """torch.nn.functional.huber_loss: 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta)."""
    from ..ops.elementwise import abs as eabs, lt, where
    what = "huber_loss"
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    _check(what, input, target, reduction)
    d = sub(input, _like(target, input))
    a = eabs(d)
    loss = where(lt(a, delta), mul(mul(d, d), 0.5), mul(sub(a, 0.5 * delta), delta))
    return _reduce(_weighted(loss, weight), reduction)


def kl_div(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean",
           log_target: bool = False) -> Tensor:
    """torch.nn.functional.kl_div of log-probabilities input: target (log target - input), 0 where
    target is 0 (log_target=False); exp(target) (target - input) with log_target=True.
    reduction "batchmean" divides the sum by the batch size (input.size(0))."""
    from ..ops.elementwise import exp, gt, log, where
    what = "kl_div"
    _deprecated(what, size_average, reduce)
    red = "sum" if reduction == "batchmean" else reduction
    _check(what, input, target, red)
    t = _like(target, input)
    if log_target:
        loss = mul(exp(t), sub(t, input))
    else:
        pos = gt(t, 0.0)
        loss = sub(where(pos, mul(t, log(where(pos, t, 1.0))), 0.0), mul(t, input))
    out = _reduce(loss, red)
    return mul(out, 1.0 / input.shape[0]) if reduction == "batchmean" and input.ndim else out


def margin_ranking_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0, size_average=None,
                        reduce=None, reduction: str = "mean") -> Tensor:
    """max(0, -target (input1 - input2) + margin)."""
    from ..ops.elementwise import add, relu
    _deprecated("margin_ranking_loss", size_average, reduce)
    _reduction("margin_ranking_loss", reduction)
    return _reduce(relu(add(mul(neg(target), sub(input1, input2)), float(margin))), reduction)


def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor, margin: float = 1.0, p: float = 2,
                        eps: float = 1e-6, swap: bool = False, size_average=None, reduce=None,
                        reduction: str = "mean") -> Tensor:
    """max(d(a, p) - d(a, n) + margin, 0), d the p-norm of the difference plus eps over the last
    dim (torch's pairwise_distance); swap: d(a, n) replaced by d(p, n) where smaller."""
    from ..ops.elementwise import add, minimum, relu
    _deprecated("triplet_margin_loss", size_average, reduce)
    _reduction("triplet_margin_loss", reduction)

    def dist(a, b):
        return _norm(add(sub(a, b), float(eps)), p, -1)
    d_ap, d_an = dist(anchor, positive), dist(anchor, negative)
    if swap:
        d_an = minimum(d_an, dist(positive, negative))
    return _reduce(relu(add(sub(d_ap, d_an), float(margin))), reduction)


def cosine_embedding_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0, size_average=None,
                          reduce=None, reduction: str = "mean") -> Tensor:
    """1 - cos(x1, x2) where target is 1, max(0, cos(x1, x2) - margin) where it is -1 (the
    cosine over the last dim, its squared norms each plus 1e-12, as torch)."""
    from ..ops.elementwise import add, div, eq, relu, sqrt, where
    _deprecated("cosine_embedding_loss", size_average, reduce)
    _reduction("cosine_embedding_loss", reduction)
    d = input1.ndim - 1
    prod = _sum(mul(input1, input2), d)
    m1 = add(_sum(mul(input1, input1), d), 1e-12)
    m2 = add(_sum(mul(input2, input2), d), 1e-12)
    cos = div(prod, sqrt(mul(m1, m2)))
    pos = where(eq(target, 1), neg(sub(cos, 1.0)), 0.0)
    negative = where(eq(target, -1), relu(sub(cos, float(margin))), 0.0)
    return _reduce(add(pos, negative), reduction)


def poisson_nll_loss(input: Tensor, target: Tensor, log_input: bool = True, full: bool = False,  # noqa: A002
                     size_average=None, eps: float = 1e-8, reduce=None, reduction: str = "mean") -> Tensor:
    """exp(input) - target input (log_input), else input - target log(input + eps); full adds
    Stirling's term target log(target) - target + log(2 pi target) / 2 where target > 1."""
    import math

    from ..ops.elementwise import add, exp, gt, log, where
    _deprecated("poisson_nll_loss", size_average, reduce)
    _reduction("poisson_nll_loss", reduction)
    if log_input:
        loss = sub(exp(input), mul(target, input))
    else:
        loss = sub(input, mul(target, log(add(input, float(eps)))))
    if full:
        big = gt(target, 1.0)
        t = where(big, target, 2.0)  # (any value > 1 where the term is dropped: no log of 0)
        stirling = add(sub(mul(t, log(t)), t), mul(log(mul(t, 2 * math.pi)), 0.5))
        loss = add(loss, where(big, stirling, 0.0))
    return _reduce(loss, reduction)


_CTC_NEG = -1e30  # "log 0" of the alpha recursion: finite, so no inf - inf and no NaN gradient


def _ctc_lengths(lengths, name: str, n: int, bound: int | None) -> np.ndarray:
    """input_lengths / target_lengths: a tuple or list of ints or an integer tensor, one per
    batch element, checked as torch checks them."""
    if isinstance(lengths, Tensor):
        if lengths.dtype not in (np.int64, np.int32):
            raise RuntimeError(f"ctc_loss: {name} must be an integer tensor, got {lengths.dtype}")
        a = np.asarray(lengths.numpy(force=True), dtype=np.int64).reshape(-1)
    elif isinstance(lengths, (tuple, list)) and all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in lengths):
        a = np.asarray(lengths, dtype=np.int64).reshape(-1)
    else:
        raise TypeError(f"ctc_loss: {name} must be a tuple or list of ints or an integer tensor, "
                        f"got {type(lengths).__name__}")
    if len(a) != n:
        raise RuntimeError(f"{name} must be of size batch_size")
    if len(a) and a.min() < 0:
        raise RuntimeError(f"Expected {name} to have value at least 0, but got value {int(a.min())}")
    if bound is not None and len(a) and a.max() > bound:
        raise RuntimeError(f"Expected {name} to have value at most {bound}, but got value {int(a.max())}")
    return a


def _ctc_labels(targets: Tensor, tl: np.ndarray, n: int, c: int, what: str) -> np.ndarray:
    """ctc_loss's targets as an (N, S_max) int64 array (padded or concatenated in), checked."""
    if targets.ndim not in (1, 2):
        raise RuntimeError(f"Expected 1 to 2 dimensions, but got {targets.ndim}-dimensional tensor for argument #2 "
                           "'targets'")
    tg = np.asarray(targets.numpy(force=True)).astype(np.int64)
    s_max = int(tl.max()) if n else 0
    lab = np.zeros((n, s_max), dtype=np.int64)
    if tg.ndim == 2:  # padded, one row per batch element
        if tg.shape[0] != n:
            raise RuntimeError(f"Expected tensor to have size {n} at dimension 0, but got size {tg.shape[0]} for "
                               "argument #2 'targets'")
        if tg.shape[1] < s_max:
            raise RuntimeError(f"Expected tensor to have size at least {s_max} at dimension 1, but got size "
                               f"{tg.shape[1]} for argument #2 'targets'")
        for b in range(n):
            lab[b, :tl[b]] = tg[b, :tl[b]]
    else:  # concatenated (unbatched too), exactly the target lengths' sum
        if tg.shape[0] != int(tl.sum()):
            raise RuntimeError(f"Expected tensor to have size {int(tl.sum())} at dimension 0, but got size "
                               f"{tg.shape[0]} for argument #2 'targets'")
        off = np.concatenate([[0], np.cumsum(tl)])
        for b in range(n):
            lab[b, :tl[b]] = tg[off[b]:off[b + 1]]
    used = np.arange(s_max)[None, :] < tl[:, None]
    if (used & ((lab < 0) | (lab >= c))).any():
        bad = lab[used & ((lab < 0) | (lab >= c))][0]
        raise RuntimeError(f"{what}: target value {int(bad)} is out of range for {c} classes")
    return lab


def _ctc_alpha(lp: Tensor, lab: np.ndarray, il: np.ndarray, blank: int) -> Tensor:
    """ctc_loss's alpha recursion in log space over the extended labels: (N, 2 S_max + 1) after
    each element's input length (recorded ops: the gradient comes from autograd)."""
    from ..ops.creation import full
    from ..ops.elementwise import add, where
    from ..ops.index import gather
    from ..ops.reduce import logsumexp
    from ..ops.shape import cat, stack
    from ..tensors import from_numpy
    t_max, n, _ = lp.shape
    s_max = lab.shape[1]
    # extended labels: blank, l1, blank, l2, ..., blank (K = 2 S + 1); a skip from s - 2 is
    # allowed onto a label that differs from the label before it
    k = 2 * s_max + 1
    ext = np.full((n, k), blank, dtype=np.int64)
    ext[:, 1::2] = lab
    skip = np.zeros((n, k), dtype=bool)
    skip[:, 3::2] = ext[:, 3::2] != ext[:, 1:-2:2]
    lp_ext = gather(lp, 2, np.ascontiguousarray(np.broadcast_to(ext, (t_max, n, k))))  # (T, N, K)
    dt = lp.dtype
    neg1 = full((n, 1), _CTC_NEG, dtype=dt)
    alpha = from_numpy(np.where(np.arange(k) == 0, 0.0, _CTC_NEG)[None].repeat(n, 0).astype(dt))
    skip_t = from_numpy(skip) if k >= 3 and skip.any() else None
    steps = int(il.max()) if n else 0
    for t in range(steps):
        parts = [alpha]
        if k >= 2:
            parts.append(cat([neg1, alpha[:, :k - 1]], 1))
        if skip_t is not None:
            parts.append(where(skip_t, cat([neg1, neg1, alpha[:, :k - 2]], 1), _CTC_NEG))
        new = add(logsumexp(stack(parts, 2), 2), lp_ext[t])
        live = il > t
        alpha = new if live.all() else where(from_numpy(live[:, None].copy()), new, alpha)
    return alpha


def ctc_loss(log_probs: Tensor, targets: Tensor, input_lengths, target_lengths, blank: int = 0,
             reduction: str = "mean", zero_infinity: bool = False) -> Tensor:
    """torch.nn.functional.ctc_loss: the connectionist temporal classification loss
    -log p(target | log_probs) of (T, N, C) log_probs (or (T, C), unbatched), targets padded
    (N, S) or concatenated 1-D, lengths as tuples/lists of ints or integer tensors.

    The alpha (forward) recursion over the extended labels (blank, l1, blank, ..., blank) is
    composed in log space of recorded ops (gather, cat, where, logsumexp), one step per time
    step, so autograd gives the gradient: T steps of a few small ops each, fine for T up to a
    few hundred (longer inputs submit thousands of small tasks).  The gradient with respect to
    log_probs is torch's: as if they were the logits of a log_softmax (exp(log_probs) minus the
    posterior of each label, on the first input_lengths steps; 0 after them).  An impossible
    alignment (input too short) gives an infinite loss and NaN gradients on its steps, as
    torch; zero_infinity=True makes it 0 with a zero gradient.  reduction "mean" divides each
    loss by its target length (at least 1), then averages over the batch.  Targets equal to
    blank (torch documents them as not allowed) are ordinary labels; as the last label, their
    gradient at the last step is the derivative, where torch's drops one of two terms; a lone
    -inf log-probability gets gradient 0 where torch's is NaN.  Label values outside [0, C)
    raise (torch does not check them)."""
    from ..ops.elementwise import add, div, exp, gt, le, log, where
    from ..ops.index import gather
    from ..ops.reduce import logsumexp
    from ..ops.shape import unsqueeze
    from ..tensors import from_numpy

    what = "ctc_loss"
    _reduction(what, reduction)
    if not isinstance(log_probs, Tensor):
        raise TypeError(f"{what}: log_probs must be a tiletrain Tensor, got {type(log_probs).__name__}")
    if not isinstance(targets, Tensor):
        raise TypeError(f"{what}: targets must be a tiletrain Tensor, got {type(targets).__name__}")
    if np.dtype(log_probs.dtype) not in (np.float32, np.float64):
        raise RuntimeError(f"{what}: log_probs must be float32 or float64, got {log_probs.dtype}")
    if log_probs.ndim not in (2, 3):
        raise RuntimeError(f"{what}: log_probs must be (T, N, C) or, unbatched, (T, C); got shape "
                           f"{tuple(log_probs.shape)}")
    batched = log_probs.ndim == 3
    lp = log_probs if batched else unsqueeze(log_probs, 1)
    t_max, n, c = lp.shape
    if not isinstance(blank, numbers.Integral) or not 0 <= blank < c:
        raise RuntimeError("blank must be in label range")
    il = _ctc_lengths(input_lengths, "input_lengths", n, t_max)
    tl = _ctc_lengths(target_lengths, "target_lengths", n, None)
    lab = _ctc_labels(targets, tl, n, c, what)
    alpha = _ctc_alpha(lp, lab, il, blank)
    dt = lp.dtype
    # log p = logsumexp(alpha[2 L], alpha[2 L - 1]) (the latter when L > 0)
    last = np.stack([2 * tl, np.maximum(2 * tl - 1, 0)], 1)
    ends = gather(alpha, 1, last)
    ends = where(from_numpy(np.stack([np.ones(n, bool), tl > 0], 1)), ends, _CTC_NEG)
    nll = neg(logsumexp(ends, 1))
    # torch's gradient adds exp(log_probs) on the live steps: a term whose value is exactly 0
    live = from_numpy((np.arange(t_max)[:, None] < il[None, :])[:, :, None].copy())
    e = _sum(where(live, exp(lp), 0.0), (0, 2))  # (where: the steps after the input get 0, never 0 NaN)
    loss = add(nll, sub(e, e.detach()))
    impossible = gt(nll, -_CTC_NEG / 2)
    if zero_infinity:
        loss = where(impossible, 0.0, loss)
    else:  # inf, and NaN gradients on the live steps, as torch: -log(0 e) is inf, its gradient 0 / 0
        loss = where(impossible, neg(log(mul(e, le(nll, -_CTC_NEG / 2).to(dt)))), loss)
    if reduction == "mean":
        return reduce.mean(div(loss, from_numpy(np.maximum(tl, 1).astype(dt))))
    if reduction == "sum":
        return _sum(loss)
    return loss if batched else loss.reshape(())


__all__ = ["binary_cross_entropy", "binary_cross_entropy_with_logits", "cosine_embedding_loss", "ctc_loss",
           "huber_loss", "kl_div",
           "l1_loss", "margin_ranking_loss", "mse_loss", "poisson_nll_loss", "smooth_l1_loss", "triplet_margin_loss"]
