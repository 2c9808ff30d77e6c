"""Losses with torch.nn.functional's signatures and numerics: mse_loss, l1_loss,
binary_cross_entropy_with_logits (cross_entropy lives in tiletrain/ops/softmax.py).

Each is element-wise kernels (kernels.def, `# --- reductions`: absdiff, bce_logits and their
backward kernels) followed by tiletrain/ops/reduce.py's mean or sum.  input and target have one
shape and tiling (torch broadcasts them with a warning; tiletrain refuses)."""
from __future__ import annotations

from ..ops import basic, reduce
from ..ops.autograd import backward_rule, record
from ..ops.basic import _float_tensor, _same
from ..runtime.kernels import run_map, run_span
from ..tensors import Tensor

_REDUCTIONS = ("none", "mean", "sum")


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    return loss if reduction == "none" else reduce.mean(loss) if reduction == "mean" else reduce.sum(loss)


def _check(what: str, input, target, reduction) -> None:
    _float_tensor(input, what, "input")
    _float_tensor(target, what, "target")
    _same(what, input, target, names=("input", "target"))
    if not isinstance(reduction, str) or reduction not in _REDUCTIONS:
        raise ValueError(f"{what}: reduction must be one of {', '.join(map(repr, _REDUCTIONS))}, got {reduction!r}")


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """torch.nn.functional.mse_loss: (input - target)^2, reduced."""
    _check("mse_loss", input, target, reduction)
    d = basic.sub(input, target)
    return _reduce(basic.mul(d, d), reduction)


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """torch.nn.functional.l1_loss: |input - target|, reduced (gradient sign(input - target),
    0 where they are equal)."""
    _check("l1_loss", input, target, reduction)
    y = Tensor(input.traits, input.dtype)
    run_map("absdiff", input, target, y)
    return _reduce(record("absdiff", y, (input, target), saved=(input, target)), reduction)


@backward_rule("absdiff")
def _absdiff_bwd(node, g):
    a, b = node.saved
    da = Tensor(a.traits, a.dtype)
    run_map("absdiff_bwd", a, b, g, da, alpha=1.0)
    return (da if node.inputs[0] is not None else None,
            basic.neg(da) if node.inputs[1] is not None else None)


def _weight(w, x: Tensor, what: str, name: str, fill: float) -> Tensor:
    """w as a tensor of x's layout: None -> fill, x's shape as is, a 1-D tensor over x's last
    axis broadcast over the others."""
    if w is None:
        t = Tensor(x.traits, x.dtype)
        run_map("fill", t, value=fill)
        return t
    _float_tensor(w, what, name)
    if w.dtype != x.dtype:
        raise TypeError(f"{what}: dtype mismatch, input is {x.dtype} and {name} is {w.dtype}")
    if w.shape == x.shape and w.tiles == x.tiles:
        return w
    if x.ndim >= 1 and w.shape == x.shape[-1:] and w.tiles == x.tiles[-1:]:
        if x.ndim == 1:
            return w
        t = Tensor(x.traits, x.dtype)
        run_span("bcast", 0, x.ndim - 1, [t], [w], reduce=False, alpha=1.0)
        return t
    raise ValueError(f"{what}: {name} must have input's shape {x.shape} and tiles {x.tiles}, or be 1-D of "
                     f"shape {x.shape[-1:]} with tiles {x.tiles[-1:]} (input's last axis); got shape {w.shape} "
                     f"and tiles {w.tiles}")


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight=None, reduction: str = "mean",
                                     pos_weight=None) -> Tensor:
    """torch.nn.functional.binary_cross_entropy_with_logits, in torch's stable form
    (1 - t) x + (1 + (pos_weight - 1) t) (log1p(exp(-|x|)) + max(-x, 0)), times weight.
    weight and pos_weight: input's shape, or 1-D over the last axis.  Gradients flow to input
    and target (not to weight or pos_weight)."""
    what = "binary_cross_entropy_with_logits"
    _check(what, input, target, reduction)
    w = _weight(weight, input, what, "weight", 1.0)
    pw = _weight(pos_weight, input, what, "pos_weight", 1.0)
    y = Tensor(input.traits, input.dtype)
    run_map("bce_logits", input, target, w, pw, y)
    return _reduce(record("bce_logits", y, (input, target), saved=(input, target, w, pw)), reduction)


@backward_rule("bce_logits")
def _bce_logits_bwd(node, g):
    x, t, w, pw = node.saved
    dx, dt = Tensor(x.traits, x.dtype), Tensor(x.traits, x.dtype)
    run_map("bce_logits_bwd", x, t, w, pw, g, dx, dt)
    return (dx if node.inputs[0] is not None else None, dt if node.inputs[1] is not None else None)


__all__ = ["binary_cross_entropy_with_logits", "l1_loss", "mse_loss"]
