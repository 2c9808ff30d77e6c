"""Creation functions -- constants (full, zeros, ones) and ranges (arange, linspace) filled
by kernels, random tensors (rand, randn, randint: torch's draws, tiletrain/tensors/rng.py)
and their *_like -- with
torch's names, signatures, defaults and dtype inference.  The ones that need no kernel (from
data, empty) and the argument rules are tiletrain/tensors/creation.py's."""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..runtime.kernels import run_map
from ..tensors import Tensor, TensorTraits, from_numpy
from ..tensors.device import device_arg
from ..tensors.creation import F32, I64, _drawn, _dtype, _generator, _like, _new, _real, _size
from ..tensors.rng import NormalStream
from .basic import fill_

# -- constant tensors ----------------------------------------------------------------

@device_arg
def full(size, fill_value, dtype=None, requires_grad: bool = False, tiles=None, dist=None) -> Tensor:
    """torch.full: dtype from fill_value when not given (int -> int64, float -> float32)."""
    if isinstance(fill_value, bool) or not isinstance(fill_value, numbers.Real):
        raise TypeError(f"full: fill_value must be a real number, "
                        f"got {type(fill_value).__name__} ({fill_value!r})")
    if not isinstance(size, (tuple, list, TensorTraits)):
        raise TypeError(f"full: size must be a tuple of ints, not {type(size).__name__}")
    size = _size("full", (size,))
    default = I64 if isinstance(fill_value, numbers.Integral) else F32
    t = _new("full", size, _dtype("full", dtype, default), tiles, dist, requires_grad)
    fill_(t, fill_value)
    return t


@device_arg
def zeros(*args, size=None, dtype=None, requires_grad: bool = False, tiles=None, dist=None) -> Tensor:
    return full(_size("zeros", args, size), 0.0, dtype=_dtype("zeros", dtype, F32),
                requires_grad=requires_grad, tiles=tiles, dist=dist)


@device_arg
def ones(*args, size=None, dtype=None, requires_grad: bool = False, tiles=None, dist=None) -> Tensor:
    return full(_size("ones", args, size), 1.0, dtype=_dtype("ones", dtype, F32),
                requires_grad=requires_grad, tiles=tiles, dist=dist)


# -- ranges --------------------------------------------------------------------------

@device_arg
def arange(start=0, end=None, step=1, dtype=None, requires_grad: bool = False, tiles=None) -> Tensor:
    """torch.arange: arange(end), arange(start, end), arange(start, end, step); int64 when every
    argument is an int, else float32; ceil((end - start) / step) elements."""
    if end is None:
        start, end = 0, start
    for name, v in (("start", start), ("end", end), ("step", step)):
        _real("arange", name, v)
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    if not all(math.isfinite(v) for v in (start, end, step)):
        raise ValueError(f"arange: start, end and step must be finite, got {start}, {end}, {step}")
    if (end - start) * step < 0:
        raise ValueError(f"arange: upper bound and lower bound inconsistent with step sign "
                         f"(start={start}, end={end}, step={step})")
    ints = all(isinstance(v, numbers.Integral) for v in (start, end, step))
    dt = _dtype("arange", dtype, I64 if ints else F32)
    n = -((start - end) // step) if ints else math.ceil((end - start) / step)
    if n == 0:
        raise ValueError(f"arange: start == end ({start}) gives an empty tensor; "
                         "tiletrain has no empty tensors")
    t = _new("arange", (int(n),), dt, tiles, None, requires_grad)
    run_map("arange", t, ts=t.tiles[0], start=float(start), step=float(step))
    return t


@device_arg
def linspace(start, end, steps, dtype=None, requires_grad: bool = False, tiles=None) -> Tensor:
    """torch.linspace: ``steps`` values from start to end, float32 unless dtype says otherwise
    (torch's formula: the step in the element type, the second half counted down from end)."""
    _real("linspace", "start", start), _real("linspace", "end", end)
    if not isinstance(steps, numbers.Integral) or isinstance(steps, bool):
        raise TypeError(f"linspace: steps must be an int, got {type(steps).__name__}")
    if steps < 0:
        raise ValueError(f"linspace: number of steps must be non-negative, got {steps}")
    if steps == 0:
        raise ValueError("linspace: steps = 0 gives an empty tensor; tiletrain has no empty tensors")
    t = _new("linspace", (int(steps),), _dtype("linspace", dtype, F32), tiles, None, requires_grad)
    run_map("linspace", t, ts=t.tiles[0], steps=int(steps), start=float(start), end=float(end))
    return t


# -- random --------------------------------------------------------------------------

def _numel(size) -> int:
    shape = size.shape if isinstance(size, TensorTraits) else size
    return int(math.prod(shape))


@device_arg
def rand(*args, size=None, generator=None, dtype=None, requires_grad: bool = False, tiles=None,
         dist=None) -> Tensor:
    """Uniform on [0, 1): torch's draws for the generator's seed."""
    dtype = _dtype("rand", dtype, F32, floats_only=True)
    g = _generator("rand", generator)
    return _drawn("rand", _size("rand", args, size), dtype, tiles, dist, requires_grad,
                  lambda k: g.uniform(k, dtype))


@device_arg
def randn(*args, size=None, generator=None, dtype=None, requires_grad: bool = False, tiles=None,
          dist=None) -> Tensor:
    """Standard normal: torch's draws for the generator's seed (Box-Muller, as torch's CPU)."""
    dtype = _dtype("randn", dtype, F32, floats_only=True)
    size = _size("randn", args, size)
    stream = NormalStream(_generator("randn", generator), _numel(size), dtype)
    return _drawn("randn", size, dtype, tiles, dist, requires_grad, stream.take)


def uniform_values(like: Tensor, low: float = 0.0, high: float = 1.0, generator=None) -> Tensor:
    """A new tensor of ``like``'s shape, tiling and dtype holding what torch's
    ``like.uniform_(low, high, generator=)`` writes."""
    if not low <= high:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={low} > to={high}")
    g = _generator("uniform_", generator)
    return _drawn("uniform_", like.traits, like.dtype, None, None, False, lambda k: g.uniform(k, like.dtype, low, high))


def normal_values(like: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    """A new tensor of ``like``'s shape, tiling and dtype holding what torch's
    ``like.normal_(mean, std, generator=)`` writes."""
    if not std >= 0.0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    stream = NormalStream(_generator("normal_", generator), like.numel(), like.dtype, mean, std)
    return _drawn("normal_", like.traits, like.dtype, None, None, False, stream.take)


def exponential_values(like: Tensor, lambd: float = 1.0, generator=None) -> Tensor:
    """What torch's ``like.exponential_(lambd, generator=)`` writes."""
    if not lambd > 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
    g = _generator("exponential_", generator)
    return _drawn("exponential_", like.traits, like.dtype, None, None, False, lambda k: g.exponential(k, like.dtype, lambd))


def bernoulli_values(like: Tensor, p=0.5, generator=None) -> Tensor:
    """What torch's ``like.bernoulli_(p, generator=)`` writes: 1 with probability p (a number:
    float64 uniforms; a tensor broadcast to like's shape: uniforms of its dtype), else 0."""
    probs = np.broadcast_to(p.numpy(force=True), like.shape) if isinstance(p, Tensor) else np.full(like.shape, float(p))
    if not ((probs >= 0) & (probs <= 1)).all():
        raise RuntimeError("bernoulli_ expects p to be in [0, 1]")
    values = _generator("bernoulli_", generator).bernoulli(np.ascontiguousarray(probs))
    return from_numpy(np.ascontiguousarray(values.astype(like.dtype)), tiles=like.tiles if like.ndim else None)


def bernoulli(input: Tensor, p=None, *, generator=None) -> Tensor:  # noqa: A002
    """torch.bernoulli: 0/1 drawn with the probabilities in ``input`` (or a number ``p``),
    input's dtype and shape."""
    if not isinstance(input, Tensor):
        raise TypeError(f"bernoulli(): argument 'input' must be Tensor, not {type(input).__name__}")
    return bernoulli_values(input, input if p is None else p, generator)


@device_arg
def randint(*args, size=None, generator=None, dtype=None, requires_grad: bool = False, tiles=None,
            dist=None) -> Tensor:
    """torch.randint(high, size) or randint(low, high, size): integers uniform on [low, high),
    int64 unless dtype says otherwise (high - low at most 2**53)."""
    if size is not None:
        args = args + (size,)
    if len(args) == 2:
        args = (0,) + args
    if len(args) != 3:
        raise TypeError("randint: expected randint(high, size) or randint(low, high, size)")
    low, high, size = args
    for name, v in (("low", low), ("high", high)):
        if not isinstance(v, numbers.Integral) or isinstance(v, bool):
            raise TypeError(f"randint: {name} must be an int, got {type(v).__name__} ({v!r})")
    if high <= low:
        raise ValueError(f"randint: random_ expects 'from' to be less than 'to', "
                         f"but got from={low} >= to={high}")
    if high - low > 2**53 or abs(low) > 2**53 or abs(high) > 2**53:
        raise ValueError(f"randint: low and high must lie within +-2**53, got [{low}, {high})")
    if not isinstance(size, (tuple, list)):
        raise TypeError(f"randint: size must be a tuple of ints, got {type(size).__name__}")
    dtype = _dtype("randint", dtype, I64)
    g = _generator("randint", generator)
    return _drawn("randint", _size("randint", (), size), dtype, tiles, dist, requires_grad,
                  lambda k: g.integers(k, low, high))


# -- *_like: x's shape and tiling by default ---------------------------------------------

@device_arg
def full_like(input, fill_value, dtype=None, requires_grad: bool = False, tiles=None) -> Tensor:
    return _like(full, "full_like", input, dtype, requires_grad, tiles, fill_value)


@device_arg
def zeros_like(input, dtype=None, requires_grad: bool = False, tiles=None) -> Tensor:
    return _like(zeros, "zeros_like", input, dtype, requires_grad, tiles)


@device_arg
def ones_like(input, dtype=None, requires_grad: bool = False, tiles=None) -> Tensor:
    return _like(ones, "ones_like", input, dtype, requires_grad, tiles)


@device_arg
def rand_like(input, dtype=None, requires_grad: bool = False, tiles=None) -> Tensor:
    return _like(rand, "rand_like", input, dtype, requires_grad, tiles)


@device_arg
def randn_like(input, dtype=None, requires_grad: bool = False, tiles=None) -> Tensor:
    return _like(randn, "randn_like", input, dtype, requires_grad, tiles)

__all__ = ["bernoulli", "bernoulli_values", "exponential_values", "normal_values", "uniform_values", "arange", "full", "full_like", "linspace", "ones", "ones_like", "rand", "rand_like", "randint", "randn",
           "randn_like", "zeros", "zeros_like"]
