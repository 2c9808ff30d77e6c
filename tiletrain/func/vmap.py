"""torch.func.vmap by a loop: the mapped inputs are sliced along their in_dims, ``func`` runs
once per sample, and its outputs are stacked along out_dims.

There are no batching rules: a batch of B samples costs B calls of ``func`` (each submitting
its own, smaller, tile tasks) plus one slice per mapped input and sample and one stack per
output.  The results, their gradients (slicing and stacking are recorded ops, so gradients
flow through vmap to the inputs) and the argument rules and errors are torch's.

``randomness``: "error" raises torch's RuntimeError when a sample draws from the default
generator (rand, randn, dropout, ...); "different" lets each sample draw its own numbers (the
loop's natural behaviour); "same" gives each sample the same numbers (the default generator
is rewound before each sample).  Draws from an explicit ``generator=`` are not watched."""
from __future__ import annotations

import contextlib
import functools
import numbers

import numpy as np

from ..ops.index import index_get
from ..ops.shape import stack
from ..tensors import Tensor
from ..tensors.creation import get_rng_state, set_rng_state
from .pytree import broadcast_prefix, flatten, is_container, unflatten

__all__ = ["vmap"]

RANDOMNESS = ("error", "different", "same")
RANDOM_ERROR = ("vmap: called random operation while in randomness error mode. Please either use the 'same' or "
                "'different' randomness flags on vmap or perform the randomness operation out of vmap")


def check_randomness(randomness) -> None:
    if randomness not in RANDOMNESS:
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or 'same'. Got {randomness}")


@contextlib.contextmanager
def draws_refused():
    """Raises torch's randomness-error RuntimeError when the body drew from the default generator."""
    before = get_rng_state()
    yield
    if get_rng_state() != before:
        raise RuntimeError(RANDOM_ERROR)


def _name(func) -> str:
    return getattr(func, "__name__", repr(func))


def _is_dim(d) -> bool:
    return d is None or (isinstance(d, numbers.Integral) and not isinstance(d, bool))


def vmap(func, in_dims=0, out_dims=0, randomness: str = "error", *, chunk_size=None):
    """torch.func.vmap: ``func`` mapped over a dimension of its inputs.  ``in_dims``: an int
    (every input mapped along it), None (not mapped), or a tuple with one entry per positional
    argument, each an int, None or a nested tuple/list/dict matching that argument; keyword
    arguments are not mapped.  ``out_dims``: where the mapped dimension goes in each output
    (an int, or a tree matching the outputs; None: an output that is the same for every
    sample, returned as is).  ``chunk_size`` is checked and accepted (samples run one by one
    anyway).  This runs ``func`` once per sample: see the module's docstring for the cost."""
    check_randomness(randomness)
    if chunk_size is not None:
        if not isinstance(chunk_size, numbers.Integral):
            raise TypeError(f"vmap: chunk_size must be an int or None, got {type(chunk_size).__name__}")
        if chunk_size <= 0:
            raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got {chunk_size})")

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        return _call(func, in_dims, out_dims, randomness, args, kwargs)

    return wrapped


def _in_dims(func, in_dims, args) -> tuple[list, object, list]:
    """(the leaves of args, their Spec, one in_dim per leaf), in_dims checked as torch does."""
    head = f"vmap({_name(func)}, in_dims={in_dims}, ...)(<inputs>)"
    if not (_is_dim(in_dims) or isinstance(in_dims, tuple)):
        raise ValueError(f"{head}: expected `in_dims` to be int or a (potentially nested) tuple matching the "
                         f"structure of inputs, got: {type(in_dims)}.")
    if not args:
        raise ValueError(f"vmap({_name(func)})(<inputs>): got no inputs. Maybe you forgot to add inputs, or you are "
                         "trying to vmap over a function with no inputs. The latter is unsupported.")
    leaves, spec = flatten(args)
    dims = broadcast_prefix(in_dims, args)
    if dims is None:
        raise ValueError(f"{head}: in_dims is not compatible with the structure of `inputs`. in_dims has structure "
                         f"{flatten(in_dims)[1]} but inputs has structure {spec}.")
    for x, d in zip(leaves, dims):
        if d is None:
            continue
        if not _is_dim(d):
            raise ValueError(f"{head}: Got in_dim={d} for an input but in_dim must be either an integer dimension "
                             "or None.")
        if not isinstance(x, Tensor):
            raise ValueError(f"{head}: Got in_dim={d} for an input but the input is of type {type(x)}. We cannot "
                             "vmap over non-Tensor arguments, please use None as the respective in_dim")
        if not -x.ndim <= d < x.ndim:
            raise ValueError(f"{head}: Got in_dim={d} for some input, but that input is a Tensor of dimensionality "
                             f"{x.ndim} so expected in_dim to satisfy -{x.ndim} <= in_dim < {x.ndim}.")
    return leaves, spec, [None if d is None else int(d) % x.ndim for x, d in zip(leaves, dims)]


def _batch_size(leaves, dims) -> int:
    sizes = [x.shape[d] for x, d in zip(leaves, dims) if d is not None]
    if not sizes:
        raise ValueError("vmap: Expected at least one Tensor to vmap over")
    if any(s != sizes[0] for s in sizes):
        raise ValueError(f"vmap: Expected all tensors to have the same size in the mapped dimension, got sizes "
                         f"{sizes} for the mapped dimension")
    return sizes[0]


def _call(func, in_dims, out_dims, randomness, args, kwargs):
    leaves, spec, dims = _in_dims(func, in_dims, args)
    size = _batch_size(leaves, dims)
    start = get_rng_state() if randomness == "same" else None
    results = []
    for i in range(size):
        sample = [x if d is None else index_get(x, (slice(None),) * d + (i,)) for x, d in zip(leaves, dims)]
        if start is not None:
            set_rng_state(start)
        with draws_refused() if randomness == "error" else contextlib.nullcontext():
            out = func(*unflatten(sample, spec), **kwargs)
        results.append(flatten(out))
    return _outputs(func, out_dims, results)


def _out_dims(func, out_dims, out_spec, first) -> list:
    """One out_dim per output leaf."""
    name = _name(func)
    if not all(_is_dim(d) for d in flatten(out_dims)[0]):
        raise ValueError(f"vmap({name}, ..., out_dims={out_dims}): `out_dims` must be an int, None or a python "
                         "collection of ints representing where in the outputs the vmapped dimension should appear.")
    od = out_dims
    if isinstance(od, tuple) and len(od) == 1 and not is_container(first):
        od = od[0]  # out_dims=(d,) for a function that returns one tensor
    dims = broadcast_prefix(od, first)
    if dims is None:
        raise ValueError(f"vmap({name}, ..., out_dims={out_dims})(<inputs>): out_dims is not compatible with the "
                         f"structure of `outputs`. out_dims has structure {flatten(out_dims)[1]} but outputs has "
                         f"structure {out_spec}.")
    return dims


def _outputs(func, out_dims, results):
    """The per-sample outputs stacked along out_dims (or, for out_dim None, returned once)."""
    name = _name(func)
    spec = results[0][1]
    for _, s in results[1:]:
        if s != spec:
            raise ValueError(f"vmap({name}, ...): `{name}` returned outputs of different structures for different "
                             f"samples: {spec} and {s}")
    dims = _out_dims(func, out_dims, spec, unflatten(results[0][0], spec))
    outs = []
    for j, d in enumerate(dims):
        vals = [leaves[j] for leaves, _ in results]
        outs.append(_unmapped(name, vals) if d is None else _stacked(name, vals, int(d)))
    return unflatten(outs, spec)


def _stacked(name: str, vals: list, d: int) -> Tensor:
    for v in vals:
        if not isinstance(v, Tensor):
            raise ValueError(f"vmap({name}, ...): `{name}` must only return Tensors, got type {type(v)}. Did you mean "
                             "to set out_dims= to None for output?")
    n = vals[0].ndim + 1
    if not -n <= d < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})")
    return stack(vals, d % n)


def _unmapped(name: str, vals: list):
    """The output of out_dim None: the same for every sample (the same object, or equal
    values), else torch's ValueError."""
    first = vals[0]
    if all(v is first for v in vals):
        return first
    if isinstance(first, Tensor):
        ref = first.numpy(force=True)
        same = all(isinstance(v, Tensor) and v.shape == first.shape and np.array_equal(v.numpy(force=True), ref)
                   for v in vals[1:])
    else:
        same = all(not isinstance(v, Tensor) and v == first for v in vals[1:])
    if not same:
        raise ValueError(f"vmap({name}, ...): `{name}` can not return a BatchedTensor when out_dim is None")
    return first
