"""Nested Python containers of tensors, as torch.func sees them (torch.utils._pytree's rules):
tuples, lists, dicts and named tuples are containers; everything else (a Tensor, a number,
None) is a leaf.  ``flatten`` lists the leaves in order with a ``Spec`` that ``unflatten``
rebuilds the same containers from; ``broadcast_prefix`` spreads a prefix tree (vmap's
in_dims/out_dims) over a tree's leaves."""
from __future__ import annotations

from collections import OrderedDict

__all__ = ["Spec", "flatten", "unflatten", "broadcast_prefix", "is_container"]


class Spec:
    """The shape of a container tree: kind ("leaf", "tuple", "namedtuple", "list", "dict"),
    context (the named tuple's class; the dict's class and keys) and the children's Specs."""
    __slots__ = ("kind", "context", "children")

    def __init__(self, kind: str, context=None, children: tuple = ()):
        self.kind, self.context, self.children = kind, context, tuple(children)

    @property
    def num_leaves(self) -> int:
        return 1 if self.kind == "leaf" else sum(c.num_leaves for c in self.children)

    def __eq__(self, other) -> bool:
        return (isinstance(other, Spec) and self.kind == other.kind and self.context == other.context
                and self.children == other.children)

    def __hash__(self) -> int:
        return hash((self.kind, self.children))

    def __str__(self) -> str:
        """``*`` for a leaf, ``(*, [*, *], {'a': *})`` for containers."""
        if self.kind == "leaf":
            return "*"
        parts = [str(c) for c in self.children]
        if self.kind == "dict":
            return "{" + ", ".join(f"{k!r}: {p}" for k, p in zip(self.context[1], parts)) + "}"
        if self.kind == "list":
            return "[" + ", ".join(parts) + "]"
        inner = ", ".join(parts) + ("," if len(parts) == 1 else "")
        return (self.context.__name__ if self.kind == "namedtuple" else "") + "(" + inner + ")"

    __repr__ = __str__


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def is_container(x) -> bool:
    return isinstance(x, (tuple, list, dict))


def _children(tree) -> tuple[str, object, list]:
    if isinstance(tree, dict):
        keys = list(tree)
        return "dict", (OrderedDict if isinstance(tree, OrderedDict) else dict, tuple(keys)), [tree[k] for k in keys]
    if _is_namedtuple(tree):
        return "namedtuple", type(tree), list(tree)
    return ("tuple" if isinstance(tree, tuple) else "list"), None, list(tree)


def flatten(tree) -> tuple[list, Spec]:
    """(the leaves in order, the Spec)."""
    if not is_container(tree):
        return [tree], Spec("leaf")
    kind, context, kids = _children(tree)
    leaves, specs = [], []
    for k in kids:
        ls, s = flatten(k)
        leaves.extend(ls)
        specs.append(s)
    return leaves, Spec(kind, context, specs)


def unflatten(leaves, spec: Spec):
    """The tree of ``spec``'s containers holding ``leaves`` (as many as spec has)."""
    leaves = list(leaves)
    if len(leaves) != spec.num_leaves:
        raise ValueError(f"unflatten: {len(leaves)} leaves for a structure of {spec.num_leaves}: {spec}")
    it = iter(leaves)

    def build(s: Spec):
        if s.kind == "leaf":
            return next(it)
        kids = [build(c) for c in s.children]
        if s.kind == "dict":
            cls, keys = s.context
            return cls(zip(keys, kids))
        if s.kind == "namedtuple":
            return s.context(*kids)
        return tuple(kids) if s.kind == "tuple" else kids

    return build(spec)


def broadcast_prefix(prefix, tree) -> list | None:
    """One value of ``prefix`` per leaf of ``tree``: a leaf of prefix (an int, None) covers
    the whole subtree at its place; its containers must match tree's (tuple for a tuple or
    named tuple, list for a list, a dict with the same keys).  None when they do not match."""
    if not is_container(prefix):
        return [prefix] * flatten(tree)[1].num_leaves
    if not is_container(tree):
        return None
    pk, _, pkids = _children(prefix)
    tk, _, tkids = _children(tree)
    if isinstance(prefix, dict):
        if not isinstance(tree, dict) or set(prefix) != set(tree):
            return None
        pkids = [prefix[k] for k in tree]
    elif pk != tk and not (pk == "tuple" and tk == "namedtuple"):
        return None
    if len(pkids) != len(tkids):
        return None
    out = []
    for p, t in zip(pkids, tkids):
        part = broadcast_prefix(p, t)
        if part is None:
            return None
        out.extend(part)
    return out
