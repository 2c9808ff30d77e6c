"""Activation recomputation: ``checkpoint(fn, *args)`` with torch.utils.checkpoint's
non-reentrant semantics.

The forward runs ``fn`` without recording anything inside it: its intermediate activations
are freed by dataflow as soon as their readers have run, and one "checkpoint" node holding
only the arguments is attached to the outputs.  When backward reaches that node, it
submits ``fn`` again with autograd on (the default generator restored to its state at the
forward, so dropout draws the same seeds and masks) and back-propagates the outputs'
gradients through the recomputed graph.  Nothing waits: the recompute depends by dataflow, tile
by tile, on the gradient arriving at the checkpoint's output (a no-op `after` task per tile
orders the checkpoint's activation arguments after it), so it overlaps the rest of the
backward of the layer above (its weight gradients, the other tiles) without starting at the
beginning of the backward pass, when every checkpoint's arguments are ready and running all
recomputes at once would bring back the memory they save.  Its priority keeps it just ahead
of its use: the k-th checkpoint a backward pass recomputes runs below the backward of the
(k-1)-th and above its own.

``add_gradient(t, g)``, called by the function while it is recomputed, makes a tensor it
computed a root of the recompute's backward too: a gradient that reached it from outside
the function's outputs (a later sequence chunk's attention that read the chunk's keys and
values, tiletrain.pipeline.model.PrefixKV)."""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable

from .. import distribution as _dist
from ..ops.autograd import (REBUILD, Node, backward_from, backward_rule, enable_grad, grad_enabled, next_recompute,
                            next_seq, no_grad)
from ..ops.activations import dropout_positions, dropout_window
from ..ops.basic import copy
from ..ops.creation import zeros
from ..runtime import current, priority
from ..runtime.context import get_priority
from ..runtime.kernels import run_map
from ..tensors import Tensor, TensorTraits
from ..tensors.creation import default_generator
from ..tensors.tensor import is_float
from ..trace.tags import tag

__all__ = ["checkpoint", "add_gradient", "recomputing"]

_active = threading.local()   # .segments: the checkpoints being recomputed, innermost last


def recomputing() -> bool:
    """True while backward recomputes a checkpointed function (inside the function)."""
    return bool(getattr(_active, "segments", None))


def add_gradient(tensor: Tensor, grad: Tensor) -> None:
    """Inside a checkpointed function while backward recomputes it: ``tensor``, computed by
    the function, also receives ``grad`` (from outside the function's outputs); the
    recompute's backward starts from the outputs' gradients and these."""
    stack = getattr(_active, "segments", None)
    if not stack:
        raise RuntimeError("checkpoint.add_gradient: only inside a checkpointed function while backward "
                           "recomputes it")
    if not isinstance(tensor, Tensor) or not isinstance(grad, Tensor):
        raise TypeError("checkpoint.add_gradient: expected two Tensors")
    if (grad.shape, grad.tiles, grad.dtype) != (tensor.shape, tensor.tiles, tensor.dtype):
        raise ValueError(f"checkpoint.add_gradient: a gradient of shape {grad.shape}, tiles {grad.tiles}, dtype "
                         f"{grad.dtype} for a tensor of {tensor.shape}, {tensor.tiles}, {tensor.dtype}")
    if not tensor.requires_grad:
        raise RuntimeError("checkpoint.add_gradient: the tensor does not require grad")
    stack[-1].extra.append((tensor, grad))


def checkpoint(function: Callable, *args, use_reentrant: bool | None = None, context_fn=None,
               determinism_check: str = "default", debug: bool = False, preserve_rng_state: bool = True,
               **kwargs) -> Any:
    """``function(*args, **kwargs)`` without saving its activations for backward; backward
    recomputes them (torch.utils.checkpoint.checkpoint).  Results and gradients are bitwise
    those of the plain call.

    function must return a Tensor or a tuple/list of Tensors.  Tensors that require grad
    must be direct arguments (or parameters / leaves the function reads); a tensor computed
    by a recorded op outside ``function`` and read by it without being an argument raises a
    RuntimeError at backward.  use_reentrant: None, False or True all run the non-reentrant
    algorithm (True gives the same results).  preserve_rng_state=True replays the dropout
    seeds of the forward.  context_fn must be None; determinism_check "default" compares the
    recomputed outputs' shapes, tiles and dtypes with the forward's ("none": no check);
    debug is accepted and ignored."""
    if not callable(function):
        raise TypeError(f"checkpoint: function must be callable, got {type(function).__name__}")
    flags = (("use_reentrant", use_reentrant), ("debug", debug), ("preserve_rng_state", preserve_rng_state))
    for name, v in flags:
        if not isinstance(v, bool) and not (name == "use_reentrant" and v is None):
            raise TypeError(f"checkpoint: {name} must be a bool, got {v!r}")
    if context_fn is not None:
        raise NotImplementedError("checkpoint: context_fn is not supported (must be None)")
    if determinism_check not in ("default", "none"):
        raise ValueError(f"checkpoint: determinism_check must be 'default' or 'none', "
                         f"got {determinism_check!r}")
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, (list, tuple, dict)):
            for b in (a.values() if isinstance(a, dict) else a):
                if isinstance(b, Tensor) and b.requires_grad:
                    raise ValueError("checkpoint: a tensor that requires grad is nested in a list, tuple or "
                                     "dict argument; pass it as a direct argument")
    if not grad_enabled():
        return function(*args, **kwargs)
    seg = _Segment(function, args, kwargs, preserve_rng_state, determinism_check == "default")
    with no_grad():
        out = function(*args, **kwargs)
        outs = seg.outputs(out, "forward")
        # an output the function did not create (an argument, a parameter) gets its own copy,
        # which carries the checkpoint node
        ins = {id(a) for a in list(args) + list(kwargs.values())}
        outs = [o if id(o) not in ins and not o.requires_grad and o._base is None else copy(o) for o in outs]
    seg.meta = [(o.shape, o.tiles, o.dtype) for o in outs]
    inputs = tuple(a if isinstance(a, Tensor) and a.requires_grad else None for a in seg.tensor_args())
    grads = [j for j, o in enumerate(outs) if is_float(o.dtype)]
    if len(grads) == 1:
        seg.index = grads[0]
        _attach(outs[grads[0]], Node("checkpoint", inputs, ctx=dict(segment=seg)))
    elif grads:  # several outputs meet in one hub, whose node recomputes once all their gradients are in
        seg.grads = {}
        hub = Tensor(TensorTraits((1,), (1,)), outs[grads[0]].dtype)
        _attach(hub, Node("checkpoint", inputs, ctx=dict(segment=seg)))
        for j in grads:
            _attach(outs[j], Node("checkpoint_output", (hub,), ctx=dict(segment=seg, index=j)))
    if isinstance(out, Tensor):
        return outs[0]
    return type(out)(outs)


def _attach(t: Tensor, node: Node) -> None:
    node.place = _dist._explicit[-1] if _dist._explicit else None
    t._node, t.requires_grad = node, True


class _Segment:
    """What the recompute needs: the function, its arguments, the generator state."""

    def __init__(self, function, args, kwargs, preserve_rng_state: bool, check: bool):
        self.function, self.args, self.kwargs, self.check = function, args, kwargs, check
        self.rng = default_generator.get_state() if preserve_rng_state else None
        self.window = dropout_window() if preserve_rng_state else None   # a sequence chunk's dropout
        self.extra: list = []           # (tensor, gradient) given by add_gradient during the recompute
        self.meta: list = []
        self.grads: dict | None = None  # several outputs: index -> gradient, filled by their nodes
        self.index = 0                  # one output: its index
        self.rebuilt: list | None = None  # the outputs recomputed with a graph (grad(), create_graph)
        self.spent = False              # backward() ran (and dropped the arguments)

    def tensor_args(self) -> list:
        return [a for a in list(self.args) + list(self.kwargs.values()) if isinstance(a, Tensor)]

    def outputs(self, out, when: str) -> list[Tensor]:
        outs = [out] if isinstance(out, Tensor) else list(out) if isinstance(out, (tuple, list)) else None
        if not outs or not all(isinstance(o, Tensor) for o in outs):
            raise TypeError("checkpoint: function must return a Tensor or a non-empty tuple/list of "
                            f"Tensors, got {_describe(out)} ({when})")
        return outs

    def run(self, args, kwargs) -> list[Tensor]:
        """The function's outputs recomputed with autograd on from ``args``, the forward's
        dropout seeds replayed, checked against the forward's (shape, tiles, dtype)."""
        state = default_generator.get_state()
        stack = _active.__dict__.setdefault("segments", [])
        stack.append(self)
        try:
            if self.rng is not None:
                default_generator.set_state(self.rng)
            window = dropout_positions(*self.window) if self.window else contextlib.nullcontext()
            with enable_grad(), window:
                outs = self.outputs(self.function(*args, **kwargs), "recompute")
        finally:
            stack.pop()
            default_generator.set_state(state)
        if self.check:
            meta = [(o.shape, o.tiles, o.dtype) for o in outs]
            if meta != self.meta:
                raise RuntimeError(f"checkpoint: the recomputed outputs (shape, tiles, dtype) {meta} differ "
                                   f"from the forward's {self.meta}")
        return outs

    def rebuild(self) -> list[Tensor]:
        """grad() and create_graph=True: the outputs recomputed (once) from the arguments
        themselves, so that their graph joins the enclosing one (and the parameters the function
        reads); add_gradient is not available then."""
        if self.rebuilt is None:
            if self.spent:
                raise RuntimeError("checkpoint: the arguments were released by an earlier backward() through "
                                   "this checkpoint; grad() or create_graph=True must come first")
            self.rebuilt = self.run(self.args, self.kwargs)
            if self.extra:
                raise NotImplementedError("checkpoint.add_gradient under grad() or create_graph=True is not "
                                          "supported")
        return self.rebuilt

    def backward(self, grads: dict) -> tuple:
        """Recompute the function with autograd on, back-propagate ``grads`` (output index ->
        gradient) through it; the gradients of the tensor arguments."""
        k = next_recompute()
        # start tile by tile as the output gradient arrives (while the layer above still
        # computes its weight gradients), not as soon as the backward pass starts: a task that
        # reads the gradient's tile and "writes" (leaves as it was) the same tile of each
        # activation argument of its layout
        g = next(iter(grads.values()))
        for a in self.tensor_args():
            if (a._node is not None or not a.requires_grad) and (a.shape, a.tiles, a.dtype) == \
                    (g.shape, g.tiles, g.dtype):
                run_map("after", g, a)
        base = get_priority()
        detached = {id(a): a.detach().requires_grad_() for a in self.tensor_args() if a.requires_grad}
        args = [detached.get(id(a), a) if isinstance(a, Tensor) else a for a in self.args]
        kwargs = {n: detached.get(id(a), a) if isinstance(a, Tensor) else a for n, a in self.kwargs.items()}
        since = next_seq()
        with tag(phase="recompute"), _priority(base - 2 * k - 1):
            outs = self.run(args, kwargs)
        roots = [(outs[j], g) for j, g in grads.items() if outs[j].requires_grad] + self.extra
        self.extra = []
        if roots:
            with _priority(base - 2 * k - 2):
                backward_from([r for r, _ in roots], [g for _, g in roots], since)
        out = []
        for a in self.tensor_args():  # an argument given twice gets its gradient once
            d = detached.pop(id(a), None)
            out.append(None if d is None else d.grad)
        self.args, self.kwargs = (), {}  # released with the node (the engine drops its inputs too)
        self.spent = True
        return tuple(out)


def _describe(v) -> str:
    if isinstance(v, (tuple, list)):
        return f"a {type(v).__name__} of ({', '.join(type(x).__name__ for x in v)})"
    return type(v).__name__


@contextlib.contextmanager
def _priority(p: int):
    """Tasks inside get priority p, clamped to the policy's range (none for eager/random)."""
    lo, hi = current().priority_range()
    if lo == hi:
        yield
        return
    with priority(max(lo, min(hi, p))):
        yield


@backward_rule("checkpoint")
def _checkpoint_bwd(node, g):
    seg = node.ctx["segment"]
    return seg.backward({seg.index: g} if seg.grads is None else seg.grads)


def _rebuild(t: Tensor) -> bool:
    """REBUILD for grad() / create_graph=True: t's checkpoint node replaced by an identity
    (copy) node from the recomputed output (a multi-output hub: nothing, its outputs are
    rebuilt themselves and no longer lead to it)."""
    node = t._node
    seg = node.ctx["segment"]
    if node.op == "checkpoint" and seg.grads is not None:
        return False
    out = seg.rebuild()[node.ctx["index"] if node.op == "checkpoint_output" else seg.index]
    t._node = Node("copy", (out if out.requires_grad else None,), place=node.place)
    return True


REBUILD["checkpoint"] = REBUILD["checkpoint_output"] = _rebuild


@backward_rule("checkpoint_output")
def _checkpoint_output_bwd(node, g):
    # hold this output's gradient for the hub's node; the hub's own gradient is a dummy
    node.ctx["segment"].grads[node.ctx["index"]] = g
    hub = node.inputs[0]
    return (zeros(hub.traits, dtype=hub.dtype),)
