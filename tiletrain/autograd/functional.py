"""torch.autograd.functional: vjp, jvp, jacobian, hessian, vhp and hvp of a Python function,
built on tiletrain.autograd.grad (reverse mode; jvp and hvp by torch's double-backward trick,
so they need the ops' differentiable backward forms).  The inputs are detached copies that
require grad (with ``create_graph=True`` an input that requires grad keeps its graph);
results are detached unless ``create_graph=True``.  The Jacobian is built one row per output
element (one backward pass each): for small outputs."""
from __future__ import annotations

from ..ops.autograd import enable_grad
from ..ops.basic import fill_
from ..ops.index import index_get
from ..ops.shape import reshape, stack
from ..tensors import Tensor
from .engine import grad as _grad

__all__ = ["vjp", "jvp", "jacobian", "hessian", "vhp", "hvp"]


def _as_tuple(x, what: str, name: str) -> tuple[bool, tuple]:
    """(was a tuple or list, the tensors as a tuple)."""
    if isinstance(x, Tensor):
        return False, (x,)
    if not isinstance(x, (tuple, list)) or not all(isinstance(t, Tensor) for t in x):
        raise TypeError(f"The {name} given to {what} must be either a Tensor or a tuple of Tensors but the value "
                        f"got is a {type(x).__name__}.")
    return True, tuple(x)


def _prepare(inputs: tuple, create_graph: bool) -> tuple:
    out = []
    for x in inputs:
        if create_graph and x.requires_grad:
            out.append(x.view_as(x))  # keeps the graph to x
        else:
            out.append(x.detach().requires_grad_(True))
    return tuple(out)


def _finish(ts, create_graph: bool):
    if isinstance(ts, tuple):
        return tuple(_finish(t, create_graph) for t in ts)
    return ts if ts is None or create_graph else ts.detach()


def _zeros_like(x: Tensor) -> Tensor:
    return fill_(Tensor(x.traits, x.dtype), 0.0)


def _grads(outputs, inputs, seeds, create_graph: bool, strict: bool, what: str) -> tuple:
    """grad with unused inputs as zeros (strict=True: a RuntimeError naming the input)."""
    outs = [o for o in outputs if o.requires_grad]
    if not outs:
        gs = (None,) * len(inputs)
    else:
        keep = [s for o, s in zip(outputs, seeds) if o.requires_grad] if seeds is not None else None
        gs = _grad(outs, inputs, keep, retain_graph=True, create_graph=create_graph, allow_unused=True)
    res = []
    for i, (x, g) in enumerate(zip(inputs, gs)):
        if g is None:
            if strict:
                raise RuntimeError(f"The output of the user-provided function is independent of input {i}. This is "
                                   f"not allowed in strict mode.")
            g = _zeros_like(x)
        res.append(g)
    return tuple(res)


def _call(func, inputs: tuple, what: str) -> tuple[bool, tuple]:
    with enable_grad():
        return _as_tuple(func(*inputs), what, "outputs of the user-provided function")


def vjp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """(func(inputs), v^T J): the vector-Jacobian product (v may be None for a scalar output)."""
    is_t, inputs = _as_tuple(inputs, "vjp", "inputs")
    inputs = _prepare(inputs, create_graph)
    out_t, outputs = _call(func, inputs, "vjp")
    if v is not None:
        v = _as_tuple(v, "vjp", "v")[1]
    elif any(o.numel() != 1 for o in outputs):
        raise RuntimeError("The vector v can only be None if the user-provided function returns a single Tensor "
                           "with a single element.")
    with enable_grad():
        res = _grads(outputs, inputs, v, create_graph, strict, "vjp")
    outs = _finish(outputs, create_graph)
    res = _finish(res, create_graph)
    return (outs if out_t else outs[0]), (res if is_t else res[0])


def jvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """(func(inputs), J v): the Jacobian-vector product, by differentiating u -> u^T J with
    respect to u (the double-backward trick, as torch's)."""
    is_t, inputs = _as_tuple(inputs, "jvp", "inputs")
    inputs = _prepare(inputs, create_graph)
    if v is None:
        if any(x.numel() != 1 for x in inputs):
            raise RuntimeError("The vector v can only be None if the input to the user-provided function is a single "
                               "Tensor with a single element.")
        v = tuple(fill_(Tensor(x.traits, x.dtype), 1.0) for x in inputs)
    else:
        v = _as_tuple(v, "jvp", "v")[1]
    out_t, outputs = _call(func, inputs, "jvp")
    with enable_grad():
        us = tuple(_zeros_like(o).requires_grad_(True) for o in outputs)
        g = _grads(outputs, inputs, us, True, strict, "jvp")
        used = [(gi, vi) for gi, vi in zip(g, v) if gi.requires_grad]
        res = _grads([gi for gi, _ in used], us, [vi for _, vi in used], create_graph, strict, "jvp") if used \
            else tuple(_zeros_like(o) for o in outputs)
    outs = _finish(outputs, create_graph)
    res = _finish(res, create_graph)
    return (outs if out_t else outs[0]), (res if out_t else res[0])


def jacobian(func, inputs, create_graph: bool = False, strict: bool = False, vectorize: bool = False,
             strategy: str = "reverse-mode"):
    """The Jacobian of func at inputs: for one input and one output a tensor of shape
    output.shape + input.shape; a tuple over inputs, inside a tuple over outputs, when they
    are tuples.  vectorize is accepted (the rows are computed one by one); strategy
    "forward-mode" is not supported."""
    if strategy not in ("reverse-mode", "forward-mode"):
        raise ValueError('Expected strategy to be either "forward-mode" or "reverse-mode".')
    if strategy == "forward-mode":
        raise NotImplementedError('jacobian: strategy="forward-mode" is not supported (tiletrain has reverse mode)')
    is_t, inputs = _as_tuple(inputs, "jacobian", "inputs")
    inputs = _prepare(inputs, create_graph)
    out_t, outputs = _call(func, inputs, "jacobian")
    table = []
    with enable_grad():
        for o in outputs:
            flat = reshape(o, (o.numel(),))
            rows = [_grads([index_get(flat, j)], inputs, None, create_graph, strict, "jacobian")
                    for j in range(o.numel())]
            table.append(tuple(reshape(stack([r[i] for r in rows], 0), tuple(o.shape) + tuple(x.shape))
                               for i, x in enumerate(inputs)))
    table = _finish(tuple(table), create_graph)
    per_out = [row if is_t else row[0] for row in table]
    return tuple(per_out) if out_t else per_out[0]


def hessian(func, inputs, create_graph: bool = False, strict: bool = False, vectorize: bool = False,
            outer_jacobian_strategy: str = "reverse-mode"):
    """The Hessian of a scalar function: the Jacobian of its gradient (a tuple of tuples for
    several inputs: H[i][j] = d2 f / dx_i dx_j)."""
    is_t, inputs = _as_tuple(inputs, "hessian", "inputs")

    def gradient(*xs):
        with enable_grad():
            out = func(*xs)
            if not isinstance(out, Tensor) or out.numel() != 1:
                raise RuntimeError("The Tensor returned by the function given to hessian should contain a single "
                                   "element")
            return _grads([reshape(out, ())], xs, None, True, strict, "hessian")

    res = jacobian(gradient, inputs, create_graph=create_graph, strict=strict, vectorize=vectorize,
                   strategy=outer_jacobian_strategy)
    return res if is_t else res[0][0]


def vhp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """(func(inputs), v^T H) of a scalar function."""
    is_t, inputs = _as_tuple(inputs, "vhp", "inputs")
    inputs = _prepare(inputs, create_graph)
    v = _as_tuple(v, "vhp", "v")[1] if v is not None else None
    if v is None and any(x.numel() != 1 for x in inputs):
        raise RuntimeError("The vector v can only be None if the input to the user-provided function is a single "
                           "Tensor with a single element.")
    with enable_grad():
        out = func(*inputs)
        if not isinstance(out, Tensor) or out.numel() != 1:
            raise RuntimeError("The Tensor returned by the function given to vhp should contain a single element")
        g = _grads([out], inputs, None, True, strict, "vhp")
        v = v if v is not None else tuple(fill_(Tensor(x.traits, x.dtype), 1.0) for x in inputs)
        used = [(gi, vi) for gi, vi in zip(g, v) if gi.requires_grad]
        res = _grads([gi for gi, _ in used], inputs, [vi for _, vi in used], create_graph, strict, "vhp") if used \
            else tuple(_zeros_like(x) for x in inputs)
    res = _finish(res, create_graph)
    return _finish(out, create_graph), (res if is_t else res[0])


def hvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """(func(inputs), H v) of a scalar function (H is symmetric: computed as v^T H)."""
    return vhp(func, inputs, v, create_graph, strict)
