"""tiletrain.autograd.grad and backward: torch.autograd's functional entry points over tiletrain's tape
(tiletrain/ops/autograd.py).

- ``grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
  allow_unused=False, materialize_grads=False)``: the gradients of ``outputs`` with respect
  to ``inputs``, returned as a tuple; ``.grad`` is not touched.
- ``backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None)``:
  as ``Tensor.backward`` for one or several outputs (``inputs``: accumulate into these
  tensors' ``.grad`` only).

``create_graph=True`` computes the backward with recorded ops (each op's differentiable
backward form), so the gradients have a graph and can be differentiated again (Hessian-vector
products, gradient penalties); an op without such a form raises NotImplementedError
(docs/howto/porting-from-pytorch.md lists the ops that have one).  ``retain_graph`` defaults
to ``create_graph``; without it the graph is released by the call and a second pass through
it raises a RuntimeError."""
from __future__ import annotations

from ..ops.autograd import backward_inputs, backward_into, differentiate, enable_grad, inference_mode, no_grad
from ..ops.basic import fill_
from ..ops.shape import retile
from ..runtime.kernels import run_map
from ..tensors import Tensor

__all__ = ["grad", "backward", "no_grad", "enable_grad", "inference_mode"]


def _tensors(v, what: str, name: str, allow_none: bool = False) -> list:
    seq = [v] if isinstance(v, Tensor) or (allow_none and v is None) else v
    try:
        seq = list(seq)
    except TypeError:
        raise TypeError(f"{what}: {name} must be a Tensor or a sequence of Tensors, got {type(v).__name__}") from None
    for i, t in enumerate(seq):
        if not isinstance(t, Tensor) and not (allow_none and t is None):
            raise TypeError(f"{what}: {name}[{i}] must be a Tensor{' or None' if allow_none else ''}, got "
                            f"{type(t).__name__}")
        if t is not None:
            t._handle(what)
    return seq


def _seeds(outputs: list, grad_outputs, what: str) -> list:
    """One seed gradient per output: ones for a scalar output given None."""
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    else:
        grad_outputs = _tensors(grad_outputs, what, "grad_outputs", allow_none=True)
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"{what}: grad_outputs has {len(grad_outputs)} tensors for {len(outputs)} outputs")
    seeds = []
    for i, (y, g) in enumerate(zip(outputs, grad_outputs)):
        if not y.requires_grad:
            raise RuntimeError(f"{what}: element {i} of tensors does not require grad and does not have a grad_fn")
        if g is None:
            if y.numel() != 1:
                raise RuntimeError(f"{what}: grad can be implicitly created only for scalar outputs (output {i} has "
                                   f"shape {y.shape})")
            g = Tensor(y.traits, y.dtype)
            run_map("fill", g, value=1.0)
        elif g.shape != y.shape or g.dtype != y.dtype:
            raise ValueError(f"{what}: grad_outputs[{i}] has shape {g.shape} and dtype {g.dtype}; output {i} has "
                             f"shape {y.shape} and dtype {y.dtype}")
        elif g.tiles != y.tiles:
            with no_grad() if not g.requires_grad else enable_grad():
                g = retile(g, y.tiles)
        seeds.append(g)
    return seeds


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=False,
         materialize_grads=False) -> tuple:
    """torch.autograd.grad: the sum of the gradients of ``outputs`` (weighted by
    ``grad_outputs``, default ones for scalar outputs) with respect to each of ``inputs``, as
    a tuple; ``.grad`` is not changed.  ``allow_unused``: an input the outputs do not depend
    on gets None (False: a RuntimeError); ``materialize_grads``: zeros instead of None.
    ``retain_graph`` defaults to ``create_graph``; ``create_graph``: the gradients have a
    graph (double backward)."""
    what = "grad"
    outputs = _tensors(outputs, what, "outputs")
    inputs = _tensors(inputs, what, "inputs")
    if not outputs or not inputs:
        raise ValueError(f"{what}: outputs and inputs must not be empty")
    if materialize_grads:
        allow_unused = True
    for i, x in enumerate(inputs):
        if not x.requires_grad:
            raise RuntimeError(f"{what}: one of the differentiated Tensors (inputs[{i}]) does not require grad")
    seeds = _seeds(outputs, grad_outputs, what)
    if retain_graph is None:
        retain_graph = create_graph
    grads = differentiate(outputs, seeds, inputs, create_graph=bool(create_graph), retain_graph=bool(retain_graph))
    out = []
    for i, (x, g) in enumerate(zip(inputs, grads)):
        if g is None:
            if not allow_unused:
                raise RuntimeError(f"{what}: one of the differentiated Tensors (inputs[{i}]) appears to not have been "
                                   "used in the graph. Set allow_unused=True if this is the desired behavior.")
            if materialize_grads:
                g = fill_(Tensor(x.traits, x.dtype), 0.0)
        out.append(g)
    return tuple(out)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None) -> None:
    """torch.autograd.backward: the backward pass of ``tensors`` (one or several) with seed
    gradients ``grad_tensors`` (default ones for scalars), accumulated into the leaves' ``.grad``
    (``inputs``: into the ``.grad`` of these tensors only, leaves or not)."""
    what = "backward"
    if inputs is not None:
        inputs = backward_inputs(inputs)
    tensors = _tensors(tensors, what, "tensors")
    if len(tensors) == 1:
        g = grad_tensors
        if isinstance(g, (list, tuple)):
            if len(g) != 1:
                raise ValueError(f"{what}: grad_tensors has {len(g)} tensors for 1 tensor")
            g = g[0]
        tensors[0].backward(g, retain_graph=retain_graph, create_graph=create_graph, inputs=inputs)
        return
    seeds = _seeds(tensors, grad_tensors, what)
    if retain_graph is None:
        retain_graph = create_graph
    if inputs is not None:
        backward_into(tensors, seeds, inputs, create_graph=bool(create_graph), retain_graph=bool(retain_graph))
        return
    differentiate(tensors, seeds, None, create_graph=bool(create_graph), retain_graph=bool(retain_graph))

