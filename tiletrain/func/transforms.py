"""torch.func's derivative transforms over tiletrain's reverse-mode autograd
(tiletrain.autograd.grad and tiletrain.autograd.functional): grad, grad_and_value, vjp, jvp,
jacrev, jacfwd, hessian.

Inputs and outputs are trees of tensors (tuples, lists, dicts; tiletrain/func/pytree.py).
The differentiated inputs are fresh leaves that require grad; their results are detached,
as torch's, unless they must stay differentiable: when an input already requires grad, or
when the transform runs inside another transform (``jacrev(grad(f))``, ``hessian``).  Then
the backward passes are recorded (create_graph), so the outer transform or an outer
``backward()`` differentiates through them.  A tensor that ``func`` captures from outside
(a closure) without being an input, outside any transform, is not connected that way.

Forward mode is not a separate engine: ``jvp`` is the double-vjp trick (J v is the gradient,
with respect to u, of the vjp u^T J, seeded with v) and ``jacfwd`` builds the same Jacobian
as ``jacrev``, one backward pass per output element; the values are torch's."""
from __future__ import annotations

import contextlib
import functools
import numbers
import threading

from ..autograd import functional as _functional
from ..autograd.engine import enable_grad, grad as _autograd_grad
from ..ops.autograd import grad_enabled
from ..ops.creation import zeros_like
from ..tensors import Tensor
from .pytree import flatten, unflatten
from .vmap import check_randomness, draws_refused

__all__ = ["grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian"]

_state = threading.local()
_GRAD = "grad_and_value(f)(*args)"
_VJP = "vjp(f, *primals)"
_JVP = "jvp(f, primals, tangents)"


def _depth() -> int:
    return getattr(_state, "depth", 0)


@contextlib.contextmanager
def _inside():
    """The body runs inside a transform: transforms called there keep their graphs."""
    _state.depth = _depth() + 1
    try:
        with enable_grad():
            yield
    finally:
        _state.depth -= 1


def _connected(*trees) -> bool:
    """Whether results must stay differentiable: grad mode on, and inside another transform
    or some input tensor requires grad."""
    if not grad_enabled():
        return False
    return _depth() > 0 or any(isinstance(t, Tensor) and t.requires_grad for tree in trees for t in flatten(tree)[0])


def _finish(tree, connect: bool):
    """tree with its tensors detached (unless connect)."""
    if connect or tree is None:
        return tree
    leaves, spec = flatten(tree)
    return unflatten([t.detach() if isinstance(t, Tensor) else t for t in leaves], spec)


def _argnums(argnums, nargs: int) -> tuple[tuple[int, ...], bool]:
    """(the argument positions, whether argnums was a tuple), checked as torch checks them."""
    is_tuple = isinstance(argnums, tuple)
    nums = argnums if is_tuple else (argnums,)
    if not all(isinstance(a, numbers.Integral) for a in nums):
        raise RuntimeError(f"argnums must be int or Tuple[int, ...], got: {type(argnums)}")
    if not nums:
        raise RuntimeError("argnums must be non-empty")
    for a in nums:
        if not -nargs <= a < nargs:
            raise RuntimeError(f"Got argnum={a}, but only {nargs} positional inputs")
    out = tuple(int(a) % nargs for a in nums)
    if len(set(out)) != len(out):
        raise RuntimeError(f"argnums elements must be unique, got {argnums}")
    return out, is_tuple


def _check_leaves(leaves, forward: bool) -> None:
    for t in leaves:
        if not isinstance(t, Tensor):
            raise ValueError(f"Thing passed to transform API must be Tensor, got {type(t)}")
        if not t.is_floating_point():
            if forward:
                raise ValueError(f"Expected primal to be floating point or complex, but got: {t.dtype}")
            raise RuntimeError("only Tensors of floating point dtype can require gradients")


def _wrap(args: tuple, nums: tuple, connect: bool) -> tuple[list, list, list]:
    """(args with the differentiated ones replaced, those leaves, their Specs): each leaf a
    new tensor that requires grad, joined to its input's graph when connect."""
    args, flat, specs = list(args), [], []
    for a in nums:
        leaves, spec = flatten(args[a])
        _check_leaves(leaves, forward=False)
        leaves = [t.view_as(t) if connect and t.requires_grad else t.detach().requires_grad_(True) for t in leaves]
        args[a] = unflatten(leaves, spec)
        flat.extend(leaves)
        specs.append(spec)
    return args, flat, specs


def _regroup(flat: list, specs: list) -> list:
    """The flat results back into one tree per differentiated argument."""
    out, i = [], 0
    for spec in specs:
        out.append(unflatten(flat[i:i + spec.num_leaves], spec))
        i += spec.num_leaves
    return out


def _split_aux(out, has_aux: bool, what: str):
    """(output, aux): aux checked to be tensors."""
    if not has_aux:
        return out, None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise RuntimeError(f"{what}: output of function f should be a tuple: (output, aux) if has_aux is True")
    for t in flatten(out[1])[0]:
        if not isinstance(t, Tensor):
            raise RuntimeError(f"Expected tensors, got unsupported type {type(t)}")
    return out


def _flat_outputs(out, what: str) -> tuple[list, object]:
    leaves, spec = flatten(out)
    for t in leaves:
        if not isinstance(t, Tensor):
            raise RuntimeError(f"{what}: expected f(*primals) to return only tensors, got unsupported type {type(t)}")
    return leaves, spec


def _gradients(outputs: list, inputs: list, seeds, connect: bool) -> list:
    """sum_k seeds[k]^T d outputs[k] / d inputs (seeds None: scalar outputs), zeros for an
    input the outputs do not depend on; the graph is kept (vjp functions are called again)."""
    if not inputs:
        return []
    seeds = [None] * len(outputs) if seeds is None else list(seeds)
    used = [(o, s) for o, s in zip(outputs, seeds) if o.requires_grad]
    if not used:
        return [zeros_like(x) for x in inputs]
    outs, ss = [o for o, _ in used], [s for _, s in used]
    return list(_autograd_grad(outs, inputs, None if all(s is None for s in ss) else ss, retain_graph=True,
                               create_graph=connect, allow_unused=True, materialize_grads=True))


# -- grad ---------------------------------------------------------------------------------------

def grad_and_value(func, argnums=0, has_aux: bool = False):
    """torch.func.grad_and_value: a function returning (the gradient of ``func``'s scalar
    output with respect to the arguments ``argnums``, the output) -- with has_aux, ``func``
    returns (output, aux) and the value is (output, aux).  The gradient has the structure of
    the argument (a dict of parameters: a dict of gradients); a tuple over argnums when
    argnums is a tuple; zeros for an argument the output does not depend on."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        nums, is_tuple = _argnums(argnums, len(args))
        connect = _connected(args, kwargs)
        args, flat, specs = _wrap(args, nums, connect)
        with _inside():
            out = func(*args, **kwargs)
        out, aux = _split_aux(out, has_aux, _GRAD)
        if not isinstance(out, Tensor):
            raise RuntimeError(f"{_GRAD}: Expected f(*args) to return a Tensor, got {type(out)}")
        if out.ndim != 0:
            raise RuntimeError(f"{_GRAD}: Expected f(*args) to return a scalar Tensor, got tensor with {out.ndim} "
                               "dims. Maybe you wanted to use the vjp or jacrev APIs instead?")
        grads = _regroup(_gradients([out], flat, None, connect), specs)
        g = _finish(tuple(grads) if is_tuple else grads[0], connect)
        return g, _finish((out, aux) if has_aux else out, connect)

    return wrapper


def grad(func, argnums=0, has_aux: bool = False):
    """torch.func.grad: as grad_and_value, returning the gradient only ((gradient, aux) with
    has_aux)."""
    both = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value = both(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return wrapper


# -- vjp, jvp -----------------------------------------------------------------------------------

def vjp(func, *primals, has_aux: bool = False):
    """torch.func.vjp: (func(*primals), vjp_fn[, aux]); ``vjp_fn(cotangents)`` (cotangents with
    the structure of the output) returns the tuple over primals of cotangents^T J, and may be
    called again (the graph is kept while vjp_fn lives)."""
    connect = _connected(primals)
    args, flat, specs = _wrap(primals, tuple(range(len(primals))), connect)
    with _inside():
        out = func(*args)
    out, aux = _split_aux(out, has_aux, _VJP)
    outs, out_spec = _flat_outputs(out, _VJP)

    def vjp_fn(cotangents, retain_graph: bool = True, create_graph=None):
        cts, spec = flatten(cotangents)
        if spec != out_spec:
            raise RuntimeError("Expected pytree structure of cotangents to be the same as pytree structure of outputs "
                               f"to the function. cotangents: {spec}, primal output: {out_spec}")
        for i, (c, o) in enumerate(zip(cts, outs)):
            if not isinstance(c, Tensor):
                raise RuntimeError(f"Expected tensors, got unsupported type {type(c)}")
            if c.shape != o.shape:
                raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of {c.shape} and output[{i}] has "
                                   f"a shape of {o.shape}.")
        conn = (connect or _connected(cts)) if create_graph is None else bool(create_graph)
        return tuple(_finish(g, conn) for g in _regroup(_gradients(outs, flat, cts, conn), specs))

    result = (_finish(out, connect), vjp_fn)
    return result + (_finish(aux, connect),) if has_aux else result


def _jvp_checked(primals, tangents) -> tuple[list, object, list]:
    if not isinstance(primals, tuple):
        raise RuntimeError(f"{_JVP}: Expected primals to be a tuple. E.g. it should be valid to call f(*primals).")
    pl, pspec = flatten(primals)
    tl, tspec = flatten(tangents)
    if pspec != tspec:
        raise RuntimeError(f"{_JVP}: Expected primals and tangents to have the same python structure. For example, if "
                           "primals is a tuple of 3 tensors, tangents also must be. Got primals with structure "
                           f"{pspec} and tangents with structure {tspec}")
    if not pl:
        raise RuntimeError(f"{_JVP}: Expected primals to contain at least one Tensor.")
    for name, leaves in (("primals", pl), ("tangents", tl)):
        for t in leaves:
            if not isinstance(t, Tensor):
                raise RuntimeError(f"{_JVP}: Expected {name} to only contain Tensors, got {type(t)}")
    _check_leaves(pl, forward=True)
    for p, t in zip(pl, tl):
        if p.shape != t.shape:
            raise RuntimeError("Trying to set a forward gradient that has a different size than that of the original "
                               f"Tensor, this is not supported. Tensor is of size {list(p.shape)} while the given "
                               f"forward gradient is of size {list(t.shape)}.")
    return pl, pspec, tl


def jvp(func, primals, tangents, *, strict: bool = False, has_aux: bool = False):
    """torch.func.jvp: (func(*primals), J tangents[, aux]), tangents with the structure of
    primals.  Computed in reverse mode by the double-vjp trick (tiletrain.autograd.functional.jvp:
    two backward passes, the first recorded); the values are forward mode's.  ``strict`` is
    accepted and has no effect, as torch's."""
    pl, pspec, tl = _jvp_checked(primals, tangents)
    connect = _connected(pl, tl)
    box = []

    def flat_func(*leaves):
        out, aux = _split_aux(func(*unflatten(leaves, pspec)), has_aux, _JVP)
        outs, spec = _flat_outputs(out, _JVP)
        box.append((spec, aux))
        return tuple(outs)

    with _inside():
        outs, tans = _functional.jvp(flat_func, tuple(pl), tuple(tl), create_graph=connect)
    spec, aux = box[0]
    result = (unflatten(outs, spec), unflatten(tans, spec))
    return result + (_finish(aux, connect),) if has_aux else result


# -- Jacobians ------------------------------------------------------------------------------------

def _jacobian(func, argnums, has_aux: bool, args: tuple, kwargs: dict, forward: bool, randomness: str):
    """The Jacobian tree: the output's structure, each output leaf replaced by the Jacobians
    (shape output.shape + input.shape) with the structure of the argument (a tuple over
    argnums when argnums is a tuple)."""
    nums, is_tuple = _argnums(argnums, len(args))
    specs, flat = [], []
    for a in nums:
        leaves, spec = flatten(args[a])
        _check_leaves(leaves, forward)
        specs.append(spec)
        flat.extend(leaves)
    connect = _connected(args, kwargs)
    box = []

    def flat_func(*leaves):
        new = list(args)
        for a, tree in zip(nums, _regroup(list(leaves), specs)):
            new[a] = tree
        with draws_refused() if forward and randomness == "error" else contextlib.nullcontext():
            out = func(*new, **kwargs)
        out, aux = _split_aux(out, has_aux, _JVP if forward else _VJP)
        outs, spec = _flat_outputs(out, _JVP if forward else _VJP)
        box.append((spec, aux))
        return tuple(outs)

    with _inside():
        table = _functional.jacobian(flat_func, tuple(flat), create_graph=connect)
    spec, aux = box[0]
    rows = [_regroup(list(row), specs) for row in table]
    jac = unflatten([tuple(r) if is_tuple else r[0] for r in rows], spec)
    return (jac, _finish(aux, connect)) if has_aux else jac


def jacrev(func, argnums=0, *, has_aux: bool = False, chunk_size=None):
    """torch.func.jacrev: the Jacobian of ``func`` with respect to the arguments ``argnums``,
    one backward pass per output element (with has_aux: (jacobian, aux)).  ``chunk_size`` is
    checked and accepted (the rows are computed one by one anyway)."""
    if chunk_size is not None and chunk_size <= 0:
        raise ValueError("jacrev: `chunk_size` should be greater than 0.")

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return _jacobian(func, argnums, has_aux, args, kwargs, False, "different")

    return wrapper


def jacfwd(func, argnums=0, has_aux: bool = False, *, randomness: str = "error"):
    """torch.func.jacfwd: the same Jacobian as jacrev, with jacfwd's argument rules (floating
    inputs, ``randomness``: "error" raises torch's RuntimeError when ``func`` draws random
    numbers).  Built by reverse mode, one backward pass per output element (torch's forward
    mode costs one pass per input element); ``func`` runs once, so "different" and "same"
    both see one draw."""
    check_randomness(randomness)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return _jacobian(func, argnums, has_aux, args, kwargs, True, randomness)

    return wrapper


def hessian(func, argnums=0):
    """torch.func.hessian: jacfwd(jacrev(func, argnums), argnums) -- for a scalar function of
    one tensor x, the (x.shape + x.shape) matrix of second derivatives; a tuple of tuples for a
    tuple of argnums."""
    return jacfwd(jacrev(func, argnums), argnums)
