"""torch.einsum, torch.outer and torch.tril / torch.triu, written with the other ops (so autograd comes
with them): einsum contracts its operands pairwise, left to right, each pair as one batched
matmul after permute/reshape; tril/triu are a ``where`` with a NumPy-made triangle mask."""
from __future__ import annotations

import numbers
import string

import numpy as np

from ..tensors import Tensor, from_numpy
from ..tensors.tensor import is_float
from .basic import _tensor
from .elementwise import mul, where
from .linalg import matmul
from .reduce import sum as _sum
from .shape import expand, permute, reshape


def _c(a) -> np.ndarray:
    """a as a C-contiguous array that keeps 0-d arrays 0-d (np.ascontiguousarray makes them 1-d)."""
    return np.array(a, order="C")


def _parse(equation: str, n: int) -> tuple[list[str], str]:
    if not isinstance(equation, str):
        raise TypeError(f"einsum: equation must be a string, got {type(equation).__name__}")
    eq = equation.replace(" ", "")
    if "." in eq:
        raise ValueError(f"einsum: invalid subscripts in {equation!r} (an ellipsis is three dots)")
    lhs, arrow, out = eq.partition("->")
    ins = lhs.split(",")
    if len(ins) != n:
        raise ValueError(f"einsum: the equation names {len(ins)} operand(s), {n} were given")
    for s in ins + [out]:
        if not all(c.isalpha() for c in s):
            raise ValueError(f"einsum: invalid subscripts {s!r} in {equation!r}")
    if not arrow:  # implicit output: the letters used once, in alphabetical order
        counts = {c: lhs.count(c) for c in lhs if c.isalpha()}
        out = "".join(sorted(c for c, k in counts.items() if k == 1))
    if len(set(out)) != len(out):
        raise ValueError(f"einsum: output subscript {out!r} names a dimension twice")
    for s in ins:
        if len(set(s)) != len(s):
            raise NotImplementedError(f"einsum: repeated subscript in {s!r} (a diagonal) is not supported")
    missing = set(out) - set("".join(ins))
    if missing:
        raise ValueError(f"einsum: output subscript(s) {sorted(missing)} appear in no operand")
    return ins, out


def _ellipsis_counts(ins: list, ops_: list) -> list:
    """How many dimensions the '...' of each operand stands for (0 without one)."""
    counts = []
    for i, (s, t) in enumerate(zip(ins, ops_)):
        if s.count("...") > 1 or s.replace("...", "").count("."):
            raise ValueError(f"einsum: operand {i}'s subscripts {s!r} have more than one ellipsis or a stray '.'")
        n = t.ndim - (len(s) - 3) if "..." in s else 0
        if n < 0:
            raise RuntimeError(f"einsum: subscripts {s!r} name {len(s) - 3} dimension(s), the operand has {t.ndim}")
        counts.append(n)
    return counts


def _ellipsis(equation: str, ops_: list) -> tuple[str, list]:
    """An equation with '...' rewritten with fresh letters for the ellipsis dimensions
    (right-aligned and broadcast across operands, as torch's; size-1 ones expanded), and the
    operands to go with it.  Implicit output: the ellipsis dimensions, then the letters used
    once in alphabetical order."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(ops_):
        raise ValueError(f"einsum: the equation names {len(ins)} operand(s), {len(ops_)} were given")
    counts = _ellipsis_counts(ins, ops_)
    k = max(counts)
    letters = "".join([c for c in string.ascii_letters if c not in eq][:k])
    sizes = [1] * k
    for s, t, n in zip(ins, ops_, counts):
        start = s.find("...")
        for j in range(n):
            d = t.shape[start + j]
            if d != 1 and sizes[k - n + j] not in (1, d):
                raise RuntimeError(f"einsum: the operands' ellipsis dimensions do not broadcast "
                                   f"({sizes[k - n + j]} and {d})")
            sizes[k - n + j] = d if d != 1 else sizes[k - n + j]
    new_ins, new_ops = [], []
    for s, t, n in zip(ins, ops_, counts):
        if "..." in s:
            start = s.find("...")
            want = t.shape[:start] + tuple(sizes[k - n:]) + t.shape[start + n:]
            t = expand(t, *want) if want != t.shape else t
            s = s.replace("...", letters[k - n:])
        new_ins.append(s)
        new_ops.append(t)
    if arrow:
        if "..." in out and not any(counts) and "..." not in lhs:
            raise ValueError("einsum: output subscript '...' without an ellipsis in the operands")
        out = out.replace("...", letters)
    else:
        plain = lhs.replace("...", "")
        out = letters + "".join(sorted(c for c in set(plain) if c.isalpha() and plain.count(c) == 1))
    return ",".join(new_ins) + "->" + out, new_ops


def _reduce_to(x: Tensor, s: str, keep: set) -> tuple[Tensor, str]:
    """Sum x over the letters of s not in keep."""
    drop = [i for i, c in enumerate(s) if c not in keep]
    if drop:
        x = _sum(x, dim=tuple(drop))
        s = "".join(c for c in s if c in keep)
    return x, s


def _pair(a: Tensor, sa: str, b: Tensor, sb: str, keep: set) -> tuple[Tensor, str]:
    """a and b contracted over their shared letters not in keep; the result's subscripts."""
    a, sa = _reduce_to(a, sa, keep | set(sb))
    b, sb = _reduce_to(b, sb, keep | set(sa))
    batch = [c for c in sa if c in sb and c in keep]
    contract = [c for c in sa if c in sb and c not in keep]
    left = [c for c in sa if c not in sb]
    right = [c for c in sb if c not in sa]
    size = {c: a.shape[i] for i, c in enumerate(sa)} | {c: b.shape[i] for i, c in enumerate(sb)}
    for c in set(sa) & set(sb):
        if a.shape[sa.index(c)] != b.shape[sb.index(c)]:
            raise RuntimeError(f"einsum: operands do not broadcast: subscript {c!r} has sizes "
                               f"{a.shape[sa.index(c)]} and {b.shape[sb.index(c)]}")
    if not contract:  # an outer product over the free letters, batched: broadcast multiply
        s_out = "".join(batch + left + right)
        ax = permute(a, *[sa.index(c) for c in batch + left]) if sa else a
        bx = permute(b, *[sb.index(c) for c in batch + right]) if sb else b
        ax = reshape(ax, tuple(size[c] for c in batch + left) + (1,) * len(right))
        bx = reshape(bx, tuple(size[c] for c in batch) + (1,) * len(left) + tuple(size[c] for c in right))
        return mul(ax, bx), s_out
    prod = lambda cs: int(np.prod([size[c] for c in cs], dtype=np.int64))  # noqa: E731
    ap = permute(a, *[sa.index(c) for c in batch + left + contract])
    bp = permute(b, *[sb.index(c) for c in batch + contract + right])
    ap = reshape(ap, (prod(batch), prod(left), prod(contract)))
    bp = reshape(bp, (prod(batch), prod(contract), prod(right)))
    y = matmul(ap, bp)
    s_out = "".join(batch + left + right)
    return reshape(y, tuple(size[c] for c in s_out)), s_out


def einsum(equation: str, *operands) -> Tensor:
    """torch.einsum: the sum of products the equation names (explicit ``->`` or implicit
    output), any number of float operands, '...' for broadcast leading or middle dimensions.
    Not supported: repeated subscripts within one operand (diagonals)."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise ValueError("einsum: needs at least one operand")
    ops_ = [_tensor(t, "einsum", f"operand {i}") for i, t in enumerate(operands)]
    if isinstance(equation, str) and "..." in equation:
        equation, ops_ = _ellipsis(equation, ops_)
    ins, out = _parse(equation, len(ops_))
    for t, s in zip(ops_, ins):
        if t.ndim != len(s):
            raise RuntimeError(f"einsum: subscripts {s!r} name {len(s)} dimension(s), the operand has {t.ndim}")
    x, sx = ops_[0], ins[0]
    for i in range(1, len(ops_)):
        keep = set(out) | set("".join(ins[i + 1:]))
        x, sx = _pair(x, sx, ops_[i], ins[i], keep)
    x, sx = _reduce_to(x, sx, set(out))
    if sx != out:
        x = permute(x, *[sx.index(c) for c in out])
    return x


def _triangle(what: str, input, diagonal, lower: bool) -> Tensor:
    x = _tensor(input, what, "input")
    if x.ndim < 2:
        raise RuntimeError(f"{what}: input tensor must have at least 2 dimensions, got {x.ndim}")
    if isinstance(diagonal, bool) or not isinstance(diagonal, numbers.Integral):
        raise TypeError(f"{what}: diagonal must be an int, got {type(diagonal).__name__}")
    n, m = x.shape[-2:]
    tri = np.tri(n, m, k=int(diagonal), dtype=bool)
    mask = tri if lower else ~np.tri(n, m, k=int(diagonal) - 1, dtype=bool)
    if not is_float(x.dtype):
        a = x.numpy(force=True)
        return from_numpy(_c(np.where(mask, a, np.zeros((), a.dtype))))
    return where(from_numpy(mask), x, 0.0)


def tril(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002
    """torch.tril: the elements on and below the ``diagonal``-th diagonal of the last two
    dimensions, zeros elsewhere."""
    return _triangle("tril", input, diagonal, True)


def triu(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002
    """torch.triu: the elements on and above the ``diagonal``-th diagonal, zeros elsewhere."""
    return _triangle("triu", input, diagonal, False)


def outer(input, vec2) -> Tensor:  # noqa: A002
    """torch.outer: the (n, m) outer product of two 1-D tensors, input[i] * vec2[j] (a
    broadcast multiply, so autograd comes with it)."""
    a, b = _tensor(input, "outer", "input"), _tensor(vec2, "outer", "vec2")
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"outer: both operands must be 1-D, got shapes {a.shape} and {b.shape}")
    return mul(reshape(a, (a.shape[0], 1)), reshape(b, (1, b.shape[0])))


ger = outer

__all__ = ["einsum", "ger", "outer", "tril", "triu"]
