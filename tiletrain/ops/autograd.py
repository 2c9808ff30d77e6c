"""Tape-based reverse-mode autograd.

An op that has an input requiring gradients records a Node on its output: the op name,
the inputs, what the backward rule needs (saved tensors and plain values).  Backward
rules live in one table, BACKWARD, keyed by op name; each op registers its rule next to
its forward with ``@backward_rule("name")``.  ``backward()`` walks the recorded graph in
reverse topological order and submits every rule's tile tasks without waiting; leaf
gradients accumulate into ``.grad`` (beta = 1 into the existing tiles).  Each node is
released once used (unless ``retain_graph``), so saved activations are freed by dataflow
and a second backward through the same graph raises.

Double backward: an op whose backward rule is written with recorded ops only registers it
with ``differentiable=True``; an op whose rule uses raw kernels may register a second,
differentiable form with ``@double_backward_rule("name")``.  ``backward(create_graph=True)``
and ``grad(..., create_graph=True)`` (``differentiate``) run those forms with grad mode on,
so the gradients they return have a graph; an op with neither raises NotImplementedError.
Activation checkpointing's nodes are rebuilt (REBUILD) before such a pass: the function is
recomputed with a graph joined to the enclosing one.

Two traversals: ``_run_backward`` (backward() without create_graph: in-place accumulation
where a gradient is exclusive, split-heads partial gradients, leaves placed on their owners
under MPI, defer_grads' split) and ``differentiate`` (grad(), create_graph, backward(inputs=):
only the nodes that lead to the wanted tensors, out-of-place sums, gradients handed back).
They share the rule table and _apply_rule; what differs is the policy at every edge, so one
loop would pay a policy dispatch per edge on the training hot path for no gain."""
from __future__ import annotations

import contextlib
import itertools
import threading
import weakref

import numpy as np
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .. import distribution as _dist
from ..runtime import mpi
from ..runtime.kernels import run_map
from ..tensors import Tensor
from ..tensors.tensor import migrate_
from ..trace.tags import tag

_state = threading.local()
_seq = itertools.count()  # creation order of nodes (checkpoint's recompute tells its own nodes apart)


def grad_enabled() -> bool:
    return getattr(_state, "enabled", True)


@contextlib.contextmanager
def no_grad():
    """Ops inside record nothing (inference, optimizer updates)."""
    old = grad_enabled()
    _state.enabled = False
    try:
        yield
    finally:
        _state.enabled = old


@contextlib.contextmanager
def inference_mode(mode: bool = True):
    """torch.inference_mode: no_grad (mode=True), or nothing changed (mode=False); a context
    manager and, called, a decorator."""
    old = grad_enabled()
    _state.enabled = old and not mode
    try:
        yield
    finally:
        _state.enabled = old


@contextlib.contextmanager
def enable_grad():
    old = grad_enabled()
    _state.enabled = True
    try:
        yield
    finally:
        _state.enabled = old


class set_grad_enabled:
    """torch.set_grad_enabled(mode): sets grad mode at once; as a context manager (or a
    decorator) the previous mode comes back on exit."""

    def __init__(self, mode: bool) -> None:
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled: mode must be a bool, got {type(mode).__name__}")
        self.prev, self.mode = grad_enabled(), mode
        _state.enabled = mode

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        _state.enabled = self.prev

    def __call__(self, fn):
        import functools
        _state.enabled = self.prev  # as a decorator, the mode applies inside the function only

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with set_grad_enabled(self.mode):
                return fn(*args, **kwargs)
        return wrapped


is_grad_enabled = grad_enabled


@contextlib.contextmanager
def collect_leaf_grads():
    """Inside, leaf gradients are not added into ``.grad``: each leaf's gradient stays where
    it was made, summed in the yielded dict ``{id(leaf): (leaf, gradient)}`` (one
    data-parallel replica's partial gradients: ``parallel.shard_backward`` reduces them
    on the parameters' owners afterwards)."""
    old = getattr(_state, "collect", None)
    _state.collect = parts = {}
    try:
        yield parts
    finally:
        _state.collect = old


@dataclass(eq=False)
class Node:
    op: str
    inputs: tuple            # input tensors (None where an input needs no gradient)
    saved: tuple = ()        # tensors the rule reads
    ctx: dict = field(default_factory=dict)  # plain values (axes, scalars, flags)
    released: bool = False
    place: Any = None        # the use() distribution the op ran under (backward runs there too)
    seq: int = field(default_factory=lambda: next(_seq))  # creation order

    def name(self) -> str:
        """torch's grad_fn name: ``MulBackward0`` for the op ``mul``."""
        return "".join(w.capitalize() for w in self.op.split("_")) + "Backward0"

    def __repr__(self) -> str:
        return f"<{self.name()}>"


BackwardRule = Callable[[Node, Tensor], Sequence["Tensor | None"]]
BACKWARD: dict[str, BackwardRule] = {}
DOUBLE_BACKWARD: dict[str, BackwardRule] = {}  # the differentiable forms (create_graph=True)


def backward_rule(op: str, differentiable: bool = False):
    """Register the backward rule of ``op``: rule(node, grad_out) -> one gradient per input.
    ``differentiable``: the rule computes with recorded ops only (no raw kernel into a new
    tensor), so run with grad mode on its gradients have a graph: it is also op's
    double-backward form."""
    def deco(fn: BackwardRule) -> BackwardRule:
        if op in BACKWARD:
            raise RuntimeError(f"backward rule for {op!r} registered twice")
        BACKWARD[op] = fn
        if differentiable:
            double_backward_rule(op)(fn)
        return fn
    return deco


def double_backward_rule(op: str):
    """Register the differentiable form of ``op``'s backward rule (same signature as the
    rule, written with recorded ops): used instead of the rule under create_graph=True."""
    def deco(fn: BackwardRule) -> BackwardRule:
        if op in DOUBLE_BACKWARD:
            raise RuntimeError(f"double backward rule for {op!r} registered twice")
        DOUBLE_BACKWARD[op] = fn
        return fn
    return deco


def needs_grad(*tensors) -> bool:
    return grad_enabled() and any(isinstance(t, Tensor) and t.requires_grad for t in tensors)


def record(op: str, out: Tensor, inputs: Sequence, saved: Sequence = (), **ctx: Any) -> Tensor:
    """Attach a node to ``out`` if any input requires gradients (and grad mode is on)."""
    if not getattr(_state, "enabled", True) or not needs_grad(*inputs):  # (no_grad: the inference hot path)
        return out
    if op not in BACKWARD:
        raise RuntimeError(f"op {op!r} has no backward rule")
    ins = tuple(t if isinstance(t, Tensor) and t.requires_grad else None for t in inputs)
    node = out._node = Node(op, ins, tuple(saved), ctx, place=_dist._explicit[-1] if _dist._explicit else None)
    ref = None
    for t in (*ins, *saved):
        # its readers: an in-place op on it later hands them its old value (Tensor's _inplace).
        # A leaf that requires grad refuses in-place ops: its readers are not kept.
        if isinstance(t, Tensor) and (t._node is not None or not t.requires_grad):
            ref = ref or weakref.ref(node)
            _add_reader(t, ref)
    out.requires_grad = True
    return out


def _add_reader(t: Tensor, ref) -> None:
    readers = getattr(t, "_read", None)
    if not readers:
        t._read = [ref]
        return
    if readers[-1] is ref:   # (an op reading t twice)
        return
    n = len(readers)
    if n >= 32 and not n & (n - 1):   # a long-lived tensor read step after step: drop the readers gone
        readers[:] = [r for r in readers if (node := r()) is not None and not node.released]
    readers.append(ref)


def rename(node: Node, a: Tensor, b: Tensor) -> None:
    """node's references to tensor a (inputs, saved tensors, ctx values and weak references)
    name b instead."""
    node.inputs = tuple(b if t is a else t for t in node.inputs)
    node.saved = tuple(b if t is a else t for t in node.saved)
    for k, v in node.ctx.items():
        if isinstance(v, weakref.ref) and v() is a:
            node.ctx[k] = weakref.ref(b)
        elif v is a:
            node.ctx[k] = b


def _topological(*roots: Tensor) -> list[Tensor]:
    """Tensors with nodes, each after every tensor that consumes it (iterative DFS)."""
    order: list[Tensor] = []
    seen: set[int] = set()
    stack: list[tuple[Tensor, bool]] = [(r, False) for r in reversed(roots)]
    while stack:
        t, done = stack.pop()
        if done:
            order.append(t)
            continue
        if id(t) in seen or t._node is None:
            continue
        seen.add(id(t))
        stack.append((t, True))
        for inp in t._node.inputs:
            if inp is not None and inp._node is not None and id(inp) not in seen:
                stack.append((inp, False))
    order.reverse()
    return order


class _Placer:
    """Puts gradients where they belong without aliasing: a gradient tensor is stored in one
    place only (a second placement of the same object gets a copy), so that accumulating
    in place (beta = 1) never changes another tensor's gradient."""

    def __init__(self, foreign: Sequence[Tensor] = ()):
        self.mpi = mpi.enabled()
        self.placed: set[int] = {id(f) for f in foreign}
        self.keep: list[Tensor] = list(foreign)  # keep ids unique while used
        self.pending_refs: dict[int, int] = {}  # id -> how many pending entries hold that tensor

    # Pending (non-leaf) gradients are shared rather than copied: a rule that hands the same
    # gradient to two inputs (add, the residual stream) costs no copy.  Accumulating into a
    # pending gradient is done in place only when no other entry, leaf or caller holds it;
    # otherwise out of place (one add task per tile, as many as the in-place axpy).
    def share(self, g: Tensor) -> Tensor:
        self.pending_refs[id(g)] = self.pending_refs.get(id(g), 0) + 1
        self.keep.append(g)
        return g

    def release(self, g: Tensor) -> None:
        self.pending_refs[id(g)] -= 1

    def exclusive(self, g: Tensor, refs: int = 0) -> bool:
        """No other pending entry, leaf or caller holds g (it may be changed in place)."""
        return (self.pending_refs.get(id(g), 0) == refs and id(g) not in self.placed and g._base is None
                and g._node is None and not g.requires_grad)

    def accumulate(self, acc: Tensor, g: Tensor) -> Tensor:
        if self.exclusive(acc, refs=1):
            _add_into(acc, g)
            return acc
        self.release(acc)
        total = Tensor(acc.traits, acc.dtype)
        run_map("add", acc, g, total, alpha=1.0, beta=1.0)
        return self.share(total)

    def own(self, g: Tensor) -> Tensor:
        if not self.exclusive(g):
            g = _copy(g)
        self.placed.add(id(g))
        self.keep.append(g)
        return g

    def leaf(self, leaf: Tensor, g: Tensor) -> None:
        parts = getattr(_state, "collect", None)
        if parts is not None:   # collect_leaf_grads()
            if id(leaf) in parts:
                _add_into(parts[id(leaf)][1], g)
            else:
                parts[id(leaf)] = (leaf, self.own(g))
            return
        if leaf.grad is None:
            if self.mpi:
                owners = leaf.owners()
                if not np.array_equal(owners, g.owners()):
                    # a partial gradient made elsewhere (a data-parallel shard, another
                    # stage): the sum lives on the leaf's owners, so that later partials
                    # are reduced there (axpy tasks run where .grad lives) and the
                    # optimizer update stays local.  A gradient nobody else holds is
                    # handed over whole (StarPU-MPI moves it; no task), else copied there.
                    if self.exclusive(g):
                        leaf.grad = _migrate(g, owners.reshape(-1))
                    else:
                        leaf.grad = _copy_to(g, owners.reshape(-1))
                    self.placed.add(id(leaf.grad))
                    self.keep.append(leaf.grad)
                    return
            leaf.grad = self.own(g)
        else:
            _add_into(leaf.grad, g)


# Gradient sums and copies: kernel calls (the engine runs under no_grad: nothing to record).
def _add_into(acc: Tensor, g: Tensor) -> None:
    """acc += g in place (axpy tasks)."""
    if g.shape != acc.shape or g.tiles != acc.tiles or g.dtype != acc.dtype:
        raise RuntimeError(f"backward: a gradient of shape {g.shape}, tiles {g.tiles}, dtype {g.dtype} for one of "
                           f"{acc.shape}, {acc.tiles}, {acc.dtype}")
    run_map("axpy", g, acc, alpha=1.0, beta=1.0)


def _copy(g: Tensor) -> Tensor:
    y = Tensor(g.traits, g.dtype)
    run_map("copy", g, y)
    return y


def _migrate(g: Tensor, owners) -> Tensor:
    """g itself, its tile i handed to rank owners[i] (collective; StarPU-MPI moves the data)."""
    return migrate_(g, owners)


def _copy_to(g: Tensor, owners) -> Tensor:
    """A copy of g in a new tensor whose tile i is owned by owners[i]."""
    y = Tensor(g.traits, g.dtype, _owners=np.ascontiguousarray(owners, dtype=np.int32))
    run_map("copy", g, y)
    return y


@tag(phase="bwd")
def backward(root: Tensor, grad: Tensor | None = None, retain_graph: bool | None = None,
             create_graph: bool = False, inputs=None) -> None:
    """Submit the backward pass of ``root`` (no waiting).  ``retain_graph`` (default:
    ``create_graph``) keeps the graph for another backward; ``create_graph`` computes the
    gradients with recorded ops (double backward): ``.grad`` then has a graph.  ``inputs``
    (a tensor or a sequence of them): only their ``.grad`` accumulates (``backward_into``)."""
    if not isinstance(root, Tensor):
        raise TypeError(f"backward: expected a Tensor, got {type(root).__name__}")
    if inputs is not None:
        inputs = backward_inputs(inputs)
    root._handle("backward")
    if not root.requires_grad:
        raise RuntimeError("backward: this tensor does not require grad (no input had requires_grad=True)")
    if grad is None:
        if root.numel() != 1:
            raise RuntimeError(f"backward: a seed gradient is needed for a non-scalar output of shape {root.shape}")
        grad = Tensor(root.traits, root.dtype)
        run_map("fill", grad, value=1.0)
    else:
        if not isinstance(grad, Tensor):
            raise TypeError(f"backward: the seed gradient must be a Tensor, got {type(grad).__name__}")
        if grad.shape != root.shape or grad.tiles != root.tiles or grad.dtype != root.dtype:
            raise ValueError(f"backward: seed gradient has shape {grad.shape}, tiles {grad.tiles}, dtype "
                             f"{grad.dtype}; expected {root.shape}, {root.tiles}, {root.dtype}")
    if retain_graph is None:
        retain_graph = create_graph
    if inputs is None and _retained:
        inputs = _with_retained(root)
    if inputs is not None:
        backward_into([root], [grad], inputs, create_graph=create_graph, retain_graph=bool(retain_graph))
        return
    if create_graph:
        differentiate([root], [grad], None, create_graph=True, retain_graph=bool(retain_graph))
        return
    if root._node is None:
        _Placer((grad,)).leaf(root, grad)
        return
    if root._node.released:
        raise RuntimeError("backward: the graph was already released by an earlier backward()")
    order = _topological(root)
    for t in order:
        if t._node.released:
            raise RuntimeError(f"backward: the graph through op {t._node.op!r} was already released by an "
                               "earlier backward()")
    placer = _Placer((grad,))
    pending: dict[int, Tensor] = {id(root): placer.share(grad)}
    if not _dist._in_backward:
        _state.recomputes = 0
    _dist._in_backward += 1
    try:
        _run_backward(order, pending, placer, retain=bool(retain_graph))
    finally:
        _dist._in_backward -= 1


_retained: "weakref.WeakSet[Tensor]" = weakref.WeakSet()  # non-leaves whose .grad is kept (retain_grad)


def retain_grad(t: Tensor) -> None:
    """t (an op's output) gets its .grad in the next backward passes through it."""
    _retained.add(t)


def _with_retained(root: Tensor) -> list[Tensor] | None:
    """The inputs of a backward with retained non-leaves: every leaf that requires grad and
    every retained tensor of root's graph (None when none is retained there)."""
    order = _topological(root)
    inside = {id(t) for t in order}
    kept = [t for t in _retained if id(t) in inside]
    if not kept:
        return None
    leaves, seen = [], set()
    for t in order:
        for inp in t._node.inputs:
            if inp is not None and inp._node is None and inp.requires_grad and id(inp) not in seen:
                seen.add(id(inp))
                leaves.append(inp)
    return leaves + kept


def backward_inputs(inputs) -> list[Tensor]:
    """The ``inputs=`` of backward checked as torch checks them."""
    seq = [inputs] if isinstance(inputs, Tensor) else inputs
    try:
        seq = list(seq)
    except TypeError:
        raise TypeError(f"backward: inputs must be a Tensor or a sequence of Tensors, got "
                        f"{type(inputs).__name__}") from None
    if not seq:
        raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
    for t in seq:
        if not isinstance(t, Tensor):
            raise RuntimeError(f"all inputs have to be Tensors, but got {type(t).__name__}")
        if not t.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        t._handle("backward")
    return seq


def backward_into(roots: Sequence[Tensor], seeds: Sequence[Tensor], inputs: Sequence[Tensor], *,
                  create_graph: bool, retain_graph: bool) -> None:
    """``backward(..., inputs=)``: the gradients of ``roots`` (seeds checked by the caller)
    accumulated into the ``.grad`` of ``inputs`` only (a non-leaf input's too, an input given
    twice once, one not reached left alone), through the nodes that lead to them; other
    leaves' ``.grad`` is not touched."""
    if mpi.enabled():
        raise NotImplementedError("backward(inputs=...) is not supported under MPI")
    if getattr(_state, "defer", None) is not None or getattr(_state, "collect", None) is not None:
        raise NotImplementedError("backward(inputs=...) inside defer_grads() or collect_leaf_grads() is not supported")
    unique = list({id(t): t for t in inputs}.values())
    grads = differentiate(roots, seeds, unique, create_graph=create_graph, retain_graph=retain_graph)
    with (enable_grad() if create_graph else no_grad()):
        for t, g in zip(unique, grads):   # (each g a tensor of its own: differentiate hands none out twice)
            if g is None:
                continue
            if t.grad is None:
                t.grad = g
            elif t.grad.shape != g.shape or t.grad.tiles != g.tiles or t.grad.dtype != g.dtype:
                raise RuntimeError(f"backward: a gradient of shape {g.shape}, tiles {g.tiles}, dtype {g.dtype} "
                                   f"for .grad of {t.grad.shape}, {t.grad.tiles}, {t.grad.dtype}")
            elif create_graph or t.grad.requires_grad:
                t.grad = _sum_grads(t.grad, g)
            else:
                _add_into(t.grad, g)


def next_seq() -> int:
    """A creation number below that of every node recorded from now on."""
    return next(_seq)


def next_recompute() -> int:
    """0, 1, 2, ...: the how-many-th checkpoint this backward pass recomputes (priorities)."""
    k = getattr(_state, "recomputes", 0)
    _state.recomputes = k + 1
    return k


def backward_from(roots: Sequence[Tensor], grads: Sequence[Tensor], since: int) -> None:
    """Submit the backward pass of several roots with their seed gradients (no waiting), over
    the nodes created since node number ``since`` only (checkpoint's recompute: an older node
    is a tensor of the enclosing graph that the function did not take as an argument)."""
    order = _topological(*(r for r in roots if r._node is not None))
    for t in order:
        if t._node.seq < since:
            raise RuntimeError(f"checkpoint: the function used a tensor computed by op {t._node.op!r} outside "
                               "it that requires grad without taking it as an argument; pass it as an argument")
    placer = _Placer(grads)
    pending: dict[int, Tensor] = {}
    if not _dist._in_backward:   # a backward pass of its own (not a checkpoint's recompute): count anew
        _state.recomputes = 0
    for r, g in zip(roots, grads):
        if r._node is None:
            placer.leaf(r, g)
        elif id(r) in pending:
            pending[id(r)] = placer.accumulate(pending[id(r)], g)
        else:
            pending[id(r)] = placer.share(g)
    _dist._in_backward += 1
    try:
        _run_backward(order, pending, placer)
    finally:
        _dist._in_backward -= 1


class PartialGradient:
    """A gradient that is zero outside one of ``nparts`` disjoint blocks of its input's tiles
    (split_heads' backward on a fused q|k|v projection).  Not built as a tensor: the engine
    writes each part straight into the input's pending gradient and zeroes only the blocks
    no part wrote, instead of one zero-padded tensor per part added together.

    write(acc): write this part's elements of acc (the others untouched); fill(acc, mask):
    zero the blocks whose bit is not set in mask.  ``group``: the partition the parts belong
    to (parts of different partitions of one input are not combined: summed densely)."""

    __slots__ = ("traits", "dtype", "part", "nparts", "write", "fill", "group")

    def __init__(self, traits, dtype, part: int, nparts: int, write, fill, group):
        self.traits, self.dtype, self.part, self.nparts = traits, dtype, part, nparts
        self.write, self.fill, self.group = write, fill, group

    @property
    def shape(self):
        return self.traits.shape

    @property
    def tiles(self):
        return self.traits.tiles

    def dense(self) -> Tensor:
        acc = Tensor(self.traits, self.dtype)
        self.write(acc)
        self.fill(acc, 1 << self.part)
        return acc


def _apply_rule(node: Node, g: Tensor, table: dict = BACKWARD) -> tuple:
    """The gradients of node's inputs for its output gradient g, computed where the forward
    ran (a pipeline stage, a data shard); ``table``: BACKWARD or DOUBLE_BACKWARD."""
    rule = table.get(node.op)
    if rule is None:
        raise NotImplementedError(f"double backward through op {node.op!r} is not implemented")
    if node.place is None:
        grads = rule(node, g)
    else:
        with _dist.use(node.place):
            grads = rule(node, g)
    if len(grads) != len(node.inputs):
        raise RuntimeError(f"backward rule of {node.op!r} returned {len(grads)} gradients for "
                           f"{len(node.inputs)} inputs")
    return grads


def _run_backward(order, pending, placer, retain: bool = False) -> None:
    # pending gradients built part by part: id -> (bit mask of the parts written, a part)
    parts: dict[int, tuple[int, PartialGradient]] = {}

    def complete(key: int) -> None:  # zero the blocks no part wrote, before a dense use
        info = parts.pop(key, None)
        if info is not None and info[0] != (1 << info[1].nparts) - 1:
            info[1].fill(pending[key], info[0])

    with no_grad():
        for t in order:
            node = t._node
            if id(t) in pending:
                complete(id(t))
            g = pending.pop(id(t), None)
            if g is not None:
                placer.release(g)
                deferred = getattr(_state, "defer", None)
                if deferred is not None:   # split backward: the weight-gradient part waits for run()
                    node = deferred._split(node, g, placer)
            if g is not None and node is not None:
                grads = _apply_rule(node, g)
                for inp, gi in zip(node.inputs, grads):
                    if inp is None or gi is None:
                        continue
                    if gi.shape != inp.shape or gi.tiles != inp.tiles:
                        raise RuntimeError(f"backward rule of {node.op!r} gave a gradient of shape {gi.shape} "
                                           f"tiles {gi.tiles} for an input of shape {inp.shape} tiles {inp.tiles}")
                    if isinstance(gi, PartialGradient):
                        key = id(inp)
                        info = parts.get(key)
                        if inp._node is None:
                            gi = gi.dense()
                        elif key not in pending:
                            acc = Tensor(gi.traits, gi.dtype)
                            gi.write(acc)
                            pending[key] = placer.share(acc)
                            parts[key] = (1 << gi.part, gi)
                            continue
                        elif (info is not None and info[1].group == gi.group and not (info[0] >> gi.part) & 1
                              and placer.exclusive(pending[key], refs=1)):
                            gi.write(pending[key])
                            parts[key] = (info[0] | (1 << gi.part), gi)
                            continue
                        else:
                            gi = gi.dense()
                    if inp._node is None:
                        placer.leaf(inp, gi)
                    elif id(inp) in pending:
                        complete(id(inp))
                        pending[id(inp)] = placer.accumulate(pending[id(inp)], gi)
                    else:
                        pending[id(inp)] = placer.share(gi)
            if not retain:  # release the tape: saved activations go when their last reader has run
                _release(t._node)


def _release(node: Node) -> None:
    node.saved = ()
    node.inputs = tuple(None for _ in node.inputs)
    node.released = True


# Ops whose rule places leaf gradients itself (activation checkpointing: a backward pass
# of its own): differentiate() cannot hand their leaves' gradients back.  Such an op may
# register a rebuild, REBUILD[op](t) -> bool: it recomputes the graph the node stands for,
# recorded, and gives t a node into it (True; False: nothing to do for this node), so that
# differentiate() runs through the rebuilt graph instead.
_PLACES_LEAVES = frozenset(("checkpoint", "checkpoint_output"))
REBUILD: dict[str, Callable[[Tensor], bool]] = {}


def _rebuilt_order(roots: Sequence[Tensor]) -> list[Tensor]:
    """_topological(roots) after every node reached that REBUILD covers is rebuilt (again
    for the nodes a rebuilt graph holds: a nested checkpoint).  A rebuilt node that does not
    lead to the wanted inputs was recomputed for nothing (its inputs do not tell: the function
    may read parameters that are not its arguments)."""
    while True:
        order = _topological(*(r for r in roots if r._node is not None))
        todo = [t for t in order if t._node.op in REBUILD and not t._node.released]
        if not any([REBUILD[t._node.op](t) for t in todo]):
            return order


def _sum_grads(a: Tensor, b: Tensor) -> Tensor:
    """a + b out of place, recorded under grad mode (create_graph) as the add op's node."""
    c = Tensor(a.traits, a.dtype)
    run_map("add", a, b, c, alpha=1.0, beta=1.0)
    return record("add", c, (a, b), alpha=1.0, beta=1.0)


def _copy_recorded(g: Tensor) -> Tensor:
    """A copy of g, recorded under grad mode as the copy op's node."""
    return record("copy", _copy(g), (g,))


def differentiate(roots: Sequence[Tensor], seeds: Sequence[Tensor], inputs: Sequence[Tensor] | None, *,
                  create_graph: bool, retain_graph: bool, stop_at_inputs: bool = False) -> list | None:
    """The engine of ``grad`` and ``backward(create_graph=True)``: the backward pass of
    ``roots`` with gradients ``seeds`` (checked by the caller), run only through the nodes
    that lead to ``inputs``.  Returns the gradients of ``inputs`` (None for one not reached),
    without touching ``.grad``; ``inputs`` None: every leaf reached accumulates into ``.grad``
    (out of place).  ``create_graph``: the rules' differentiable forms, with grad mode on;
    ``stop_at_inputs``: the inputs' own nodes are not followed (the gradients of one op's
    inputs, not of what computed them).  Gradients are summed out of place and never handed
    out twice as one object (a copy), so nothing here changes a tensor in place."""
    if create_graph and mpi.enabled():
        raise NotImplementedError("create_graph=True is not supported under MPI")
    if create_graph and (getattr(_state, "defer", None) is not None or getattr(_state, "collect", None) is not None):
        raise NotImplementedError("backward(create_graph=True) inside defer_grads() or collect_leaf_grads() is not "
                                  "supported")
    order = _rebuilt_order(roots) if REBUILD else _topological(*(r for r in roots if r._node is not None))
    wanted = None if inputs is None else {id(t) for t in inputs}
    runs, released = _plan(order, wanted, stop_at_inputs)
    table = DOUBLE_BACKWARD if create_graph else BACKWARD
    pending: dict[int, Tensor] = {}
    tensors: dict[int, Tensor] = {}   # id -> the tensor a pending gradient belongs to (leaves)
    handed: set[int] = {id(s) for s in seeds}   # gradient objects the caller or a leaf holds
    keep = list(seeds)                # keep those ids unique

    def deliver(t: Tensor, g: Tensor) -> None:
        if id(t) in pending:
            pending[id(t)] = _sum_grads(pending[id(t)], g)
        else:
            pending[id(t)] = g
            tensors[id(t)] = t

    def hand_out(g: Tensor) -> Tensor:
        if id(g) in handed:
            g = _copy_recorded(g)
        handed.add(id(g))
        keep.append(g)
        return g

    results: dict[int, Tensor] = {}
    if not _dist._in_backward:
        _state.recomputes = 0
    _dist._in_backward += 1
    try:
        with (enable_grad() if create_graph else no_grad()):
            for r, g in zip(roots, seeds):
                deliver(r, g)
            for t in order:
                if wanted is not None and id(t) in wanted and id(t) in pending:
                    results[id(t)] = pending[id(t)]
                if id(t) in released and id(t) in pending:
                    raise RuntimeError(f"backward: the graph through op {t._node.op!r} was already released by an "
                                       "earlier backward() or grad(); pass retain_graph=True to the first call to "
                                       "differentiate through it again")
                node = runs.get(id(t))
                g = pending.pop(id(t), None) if node is not None or wanted is None else None
                if node is None or g is None:
                    continue
                grads = _apply_rule(node, g, table)
                for inp, gi in zip(node.inputs, grads):
                    if inp is None or gi is None:
                        continue
                    if isinstance(gi, PartialGradient):
                        gi = gi.dense()
                    if gi.shape != inp.shape or gi.tiles != inp.tiles:
                        raise RuntimeError(f"backward rule of {node.op!r} gave a gradient of shape {gi.shape} "
                                           f"tiles {gi.tiles} for an input of shape {inp.shape} tiles {inp.tiles}")
                    deliver(inp, gi)
                if not retain_graph:
                    _release(t._node)
            if wanted is not None:
                for key, g in pending.items():   # leaves (and inputs whose nodes were not followed)
                    if key in wanted and key not in results:
                        results[key] = g
                return [None if id(t) not in results else hand_out(results[id(t)]) for t in inputs]
            _accumulate_leaves(pending, tensors, hand_out, handed)
            return None
    finally:
        _dist._in_backward -= 1


def _plan(order: list, wanted: set | None, stop_at_inputs: bool) -> tuple[dict, set]:
    """``differentiate``'s nodes to run (id -> the node, its inputs that lead to a wanted
    tensor kept, the others None) and the released nodes met (their inputs are gone: they may
    lead anywhere, an error if a gradient reaches one)."""
    runs: dict[int, Node] = {}
    leads: set[int] = set() if wanted is None else set(wanted)
    released: set[int] = set()
    for t in reversed(order):   # inputs before their consumers
        node = t._node
        if stop_at_inputs and id(t) in wanted:
            continue
        if node.released:
            if wanted is None or id(t) not in wanted:
                leads.add(id(t))
                released.add(id(t))
            continue
        ins = node.inputs if wanted is None else tuple(
            i if i is not None and id(i) in leads else None for i in node.inputs)
        if any(i is not None for i in ins):
            leads.add(id(t))
            if node.op in _PLACES_LEAVES:
                raise NotImplementedError(f"grad() and create_graph=True through op {node.op!r} (activation "
                                          "checkpointing) are not supported: use backward()")
            runs[id(t)] = node if ins is node.inputs else Node(node.op, ins, node.saved, node.ctx, place=node.place,
                                                              seq=node.seq)
    return runs, released


def _accumulate_leaves(pending: dict, tensors: dict, hand_out: Callable, handed: set) -> None:
    """``backward(create_graph=True)``: the leaves' gradients summed into ``.grad`` out of place."""
    for key, g in pending.items():
        leaf = tensors[key]
        if leaf._node is not None or not leaf.requires_grad:
            continue
        if leaf.grad is None:
            leaf.grad = hand_out(g)
            continue
        if leaf.grad.shape != g.shape or leaf.grad.tiles != g.tiles or leaf.grad.dtype != g.dtype:
            raise RuntimeError(f"backward: a gradient of shape {g.shape}, tiles {g.tiles}, dtype {g.dtype} "
                               f"for .grad of {leaf.grad.shape}, {leaf.grad.tiles}, {leaf.grad.dtype}")
        leaf.grad = _sum_grads(leaf.grad, g)
        handed.add(id(leaf.grad))


def composite_grads(node: Node, g: Tensor, forward: Callable, *values: Tensor) -> tuple:
    """A differentiable backward form from a forward written with recorded ops: the gradients
    of ``forward(*values)`` for output gradient ``g``, with respect to the inputs of ``node``
    that need one (``values``: one tensor per input of node, the input itself where
    node.inputs has it).  The graph of what computed the inputs is not followed."""
    values = [v if i is None else i for v, i in zip(values, node.inputs)]
    wanted = [i for i in node.inputs if i is not None]
    y = forward(*values)
    grads = iter(differentiate([y], [g], wanted, create_graph=True, retain_graph=True, stop_at_inputs=True))
    return tuple(next(grads) if i is not None else None for i in node.inputs)


class DeferredGrads:
    """The weight-gradient (dW) parts of a backward pass, left for later: inside
    ``defer_grads(weights)``, backward() submits only the gradients of the other inputs (the
    input gradient dX, what the previous pipeline stage waits for) of every op that has one
    of ``weights`` as an input, and records the rest here; ``run()`` submits them (the same
    backward rules, asked only for the weights' gradients) and accumulates into ``.grad``.
    The rule's saved tensors and output gradient live until then."""

    def __init__(self, weights):
        self._ids = {id(w) for w in weights}
        self._weights = list(weights)   # keep the ids unique while recording
        self._parts: list[tuple[Node, Tensor]] = []

    def __len__(self) -> int:
        return len(self._parts)

    def __repr__(self) -> str:
        return f"<DeferredGrads: {len(self._parts)} weight-gradient part(s) pending>"

    def _split(self, node: Node, g: Tensor, placer: "_Placer") -> Node | None:
        """The part of ``node`` to run now (None: nothing), recording the deferred part."""
        w = [inp is not None and id(inp) in self._ids for inp in node.inputs]
        if not any(w):
            return node
        later = tuple(inp if wi else None for inp, wi in zip(node.inputs, w))
        if id(g) in placer.placed:   # already some leaf's .grad, which later gradients accumulate into
            g = _copy(g)
        # g is held for the deferred part: the engine must not accumulate into it in place
        self._parts.append((Node(node.op, later, node.saved, node.ctx, place=node.place, seq=node.seq),
                            placer.share(g)))
        now = tuple(None if wi else inp for inp, wi in zip(node.inputs, w))
        if all(inp is None for inp in now):
            return None
        return Node(node.op, now, node.saved, node.ctx, place=node.place, seq=node.seq)

    @tag(phase="wgrad")
    def run(self) -> None:
        """Submit the deferred weight-gradient parts (no waiting); afterwards empty."""
        placer = _Placer()
        parts, self._parts = self._parts, []
        _dist._in_backward += 1
        try:
            with no_grad():
                for node, g in parts:
                    for inp, gi in zip(node.inputs, _apply_rule(node, g)):
                        if inp is None or gi is None:
                            continue
                        placer.leaf(inp, gi.dense() if isinstance(gi, PartialGradient) else gi)
        finally:
            _dist._in_backward -= 1


@contextlib.contextmanager
def defer_grads(weights):
    """``with defer_grads(model.parameters()) as dw: loss.backward()`` submits the input
    gradients only; ``dw.run()`` later submits the weights' gradients (split backward:
    zero-bubble pipeline schedules' I and W actions)."""
    d = DeferredGrads(weights)
    old = getattr(_state, "defer", None)
    _state.defer = d
    try:
        yield d
    finally:
        _state.defer = old
