"""Creation functions with torch's names, signatures, defaults and dtype inference: the ones
that need no kernel (from data, empty), their argument checks, and the seed generators.

The ones that fill their tiles with kernels (full, zeros, ones, arange, linspace, rand, randn,
randint and their *_like) are in tiletrain/ops/creation.py, above the kernel-call layer; the
same rules below hold for them.

Every function takes ``tiles=`` (the tile shape; default: tiletrain.tensors.DEFAULT_TILE per
axis) after torch's arguments, and the whole-tensor ones ``dist=`` (tile owners under MPI).
Random tensors are torch's: drawn on the host from a Generator (tiletrain/tensors/rng.py; default:
the one ``manual_seed`` seeds) in torch's order and written tile row by tile row, so a seed
gives torch's values, the same for any tiling.  Dropout's tasks draw their own numbers from a
per-call seed taken from the same generator.

Not supported: tensors with a zero-size axis (ValueError), bool data (TypeError)."""
from __future__ import annotations

import numbers

import numpy as np

from .tensor import DTYPES, Tensor, as_dtype, bool_, from_numpy, from_rows, get_default_dtype, is_float
from .device import device_arg
from .traits import TensorTraits
from .rng import Generator
from ..config import values_meaningless

F32, F64, I64 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64)


default_generator = Generator().manual_seed(0)  # seeded: a program that never seeds is reproducible


def manual_seed(seed: int) -> Generator:
    """torch.manual_seed: seed the default generator (random tensors, initialisation,
    samplers, and the per-call seeds of dropout draw from it)."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    """torch.seed: a non-deterministic seed for the default generator, returned."""
    return default_generator.seed()


def initial_seed() -> int:
    return default_generator.initial_seed()


def get_rng_state() -> dict:
    """torch.get_rng_state: the default generator's state (a dict here, not a byte tensor)."""
    return default_generator.get_state()


def set_rng_state(new_state: dict) -> None:
    default_generator.set_state(new_state)


def _generator(op: str, generator) -> Generator:
    if generator is None:
        return default_generator
    if not isinstance(generator, Generator):
        raise TypeError(f"{op}: generator must be a tiletrain.Generator, got {type(generator).__name__}")
    return generator


def _seed(op: str, generator) -> int:
    """A per-call seed for the tasks that draw their own numbers (dropout)."""
    return _generator(op, generator).next_seed()


# -- argument checks -----------------------------------------------------------------

def _size(op: str, args: tuple, size=None) -> tuple[int, ...] | TensorTraits:
    """torch's size: ints, one tuple/list, or the keyword ``size=`` (a TensorTraits passes
    through: tiletrain internal)."""
    if size is not None:
        if args:
            raise TypeError(f"{op}: size given both positionally and as size=")
        args = (size,)
    if not args:
        raise TypeError(f"{op}() missing 1 required positional argument: 'size'")
    size = args
    if len(size) == 1 and isinstance(size[0], (tuple, list, TensorTraits)):
        size = size[0]
        if isinstance(size, TensorTraits):
            return size
    for i, d in enumerate(size):
        if not isinstance(d, numbers.Integral) or isinstance(d, bool):
            raise TypeError(f"{op}: size must be ints or one tuple of ints, "
                            f"size[{i}] is {type(d).__name__} ({d!r})")
        if d < 0:
            raise ValueError(f"{op}: size[{i}] = {d}; sizes must be non-negative")
        if d == 0:
            raise ValueError(f"{op}: size[{i}] = 0; tiletrain has no empty tensors")
    return tuple(int(d) for d in size)


def _dtype(op: str, dtype, default: np.dtype, floats_only: bool = False) -> np.dtype:
    if dtype is None:  # F32 stands for the default float dtype (set_default_dtype)
        return get_default_dtype() if default is F32 else default
    try:
        dt = as_dtype(dtype)
    except TypeError as e:
        raise TypeError(f"{op}: {e}") from None
    if floats_only and not is_float(dt):
        raise TypeError(f"{op}: dtype {dt} is not supported (supported: float32, float64)")
    return dt


def _check_grad(op: str, dtype: np.dtype, requires_grad) -> None:
    """requires_grad checked before anything is created (torch's error for a non-float dtype)."""
    if not isinstance(requires_grad, bool):
        raise TypeError(f"{op}: requires_grad must be a bool, got {type(requires_grad).__name__}")
    if requires_grad and not is_float(dtype):
        raise RuntimeError(f"{op}: only Tensors of floating point dtype can require gradients, got {dtype}")


def _new(op, size, dtype, tiles, dist, requires_grad) -> Tensor:
    """A new tensor (tiles allocated on first write); requires_grad is set on it, so callers
    fill it before returning it to the user."""
    _check_grad(op, dtype, requires_grad)
    traits = size if isinstance(size, TensorTraits) else TensorTraits(size, tiles if size else None)
    t = Tensor(traits if dist is None else traits.with_dist(dist), dtype)
    t.requires_grad = requires_grad
    return t


def _drawn(op, size, dtype, tiles, dist, requires_grad, draw) -> Tensor:
    """A new tensor holding ``draw(k)`` for its elements in row-major order, k at a time (one
    block of tile rows in host memory): the values of one whole draw, for any tiling.  In a
    simulation that runs no kernels nothing is drawn (the values are meaningless there, and a
    simulated model of billions of parameters would spend minutes drawing them)."""
    _check_grad(op, dtype, requires_grad)
    traits = size if isinstance(size, TensorTraits) else TensorTraits(size, tiles if size else None)
    skip = values_meaningless()

    def fill(r0, r1, out):
        if not skip:
            out[...] = draw(out.size).reshape(out.shape)
    t = from_rows(traits if dist is None else traits.with_dist(dist), dtype, fill)
    t.requires_grad = requires_grad
    return t


def _real(op: str, name: str, v) -> float | int:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{op}: {name} must be a real number, got {type(v).__name__} ({v!r})")
    return v


# -- from data -----------------------------------------------------------------------

@device_arg
def tensor(data, dtype=None, requires_grad: bool = False, tiles=None) -> Tensor:
    """A new tensor holding a copy of ``data`` (nested lists, a scalar, a NumPy array or a
    tiletrain Tensor).  dtype as torch infers it: Python floats -> the default dtype, ints ->
    int64, bools -> bool, NumPy arrays and scalars keep theirs."""
    if isinstance(data, Tensor):
        data = data._to_numpy()
    numpy_data = isinstance(data, (np.ndarray, np.generic))
    try:
        a = np.asarray(data)
    except (ValueError, TypeError) as e:
        raise ValueError(f"tensor: data is not a rectangular array of numbers ({e})") from None
    if a.dtype.kind not in "biufV":
        raise TypeError(f"tensor: data of type {a.dtype} is not a number array")
    if dtype is not None:
        dt = _dtype("tensor", dtype, None)
    elif not numpy_data:  # Python numbers: torch's defaults
        dt = I64 if a.dtype.kind in "iu" else bool_ if a.dtype.kind == "b" else get_default_dtype()
    elif a.dtype in DTYPES:
        dt = a.dtype
    else:
        raise TypeError(f"tensor: NumPy dtype {a.dtype} is not supported (supported: float32, float64, "
                        "float16, bfloat16, int64, bool); pass dtype= to convert")
    _check_grad("tensor", dt, requires_grad)
    if 0 in a.shape:
        raise ValueError(f"tensor: data has shape {a.shape}; tiletrain has no empty tensors")
    t = from_numpy(np.array(a, dtype=dt, order="C"), tiles=tiles if a.ndim else None)
    t.requires_grad = requires_grad
    return t


# -- uninitialised ----------------------------------------------------------------------

@device_arg
def empty(*args, size=None, dtype=None, requires_grad: bool = False, tiles=None, dist=None) -> Tensor:
    """A tensor whose tiles are allocated on first write (contents undefined until then)."""
    return _new("empty", _size("empty", args, size), _dtype("empty", dtype, F32), tiles, dist, requires_grad)


# -- *_like: x's shape and tiling by default ---------------------------------------------

def _like(make, op: str, x, dtype, requires_grad, tiles, *fill):
    """make(x's shape, *fill) with x's dtype, tiling and distribution unless given."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: input must be a tiletrain Tensor, got {type(x).__name__}")
    return make(x.shape, *fill, dtype=x.dtype if dtype is None else dtype, requires_grad=requires_grad,
                tiles=x.tiles if tiles is None else tiles, dist=x.traits.dist)


@device_arg
def empty_like(input, dtype=None, requires_grad: bool = False, tiles=None) -> Tensor:
    return _like(empty, "empty_like", input, dtype, requires_grad, tiles)


__all__ = ["Generator", "default_generator", "empty", "empty_like", "manual_seed", "tensor"]
