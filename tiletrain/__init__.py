"""tiletrain: task-based heterogeneous training on StarPU.

Tensors are split into tiles; every operation becomes tile tasks that StarPU schedules
over all workers, starting each task as soon as the tiles it reads are ready."""
import math as _math

from ._version import __version__
from .config import RuntimeConfig
from .runtime import Runtime, current, init, is_initialized, priority, rank, shutdown, time, wait, world_size
from .trace.tags import tag
from .tensors import TensorTraits, bfloat16, bool_, empty, float16, from_numpy
from .tensors.api import Tensor
# creation functions (torch's names and signatures), dtypes, seeding, the tile-count limit
from .tensors import (Generator, empty_like, float32, float64, get_max_tiles, int64, manual_seed, set_max_tiles,
                      tensor)
from .tensors.creation import default_generator, get_rng_state, initial_seed, seed, set_rng_state
from .ops.creation import (arange, bernoulli, full, full_like, linspace, ones, ones_like, rand, rand_like, randint,
                           randn, randn_like, zeros, zeros_like)
from .tensors.cupy_interop import from_cupy
from .tensors.device import device
from .ops.softmax import log_softmax, softmax
from .tensors.tensor import get_default_dtype, set_default_dtype
from .ops import *  # noqa: F401,F403  (every op: tiletrain.ops.__all__)
from . import ops as _ops

__all__ = [
    "__version__", "RuntimeConfig", "Runtime", "current", "init", "is_initialized", "priority", "shutdown",
    "wait", "Tensor", "TensorTraits", "empty", "from_cupy", "from_numpy", "full", "ones", "zeros", "tag", "rank",
    "world_size", "distribution", "bfloat16", "float16", "Generator", "arange", "empty_like", "float32", "float64",
    "full_like", "get_max_tiles", "int64", "linspace", "manual_seed", "ones_like", "rand", "rand_like", "randint",
    "randn", "randn_like", "set_max_tiles", "tensor", "zeros_like", "bool", "bernoulli", "default_generator",
    "get_rng_state", "initial_seed", "seed", "set_rng_state",
    "device", "get_default_dtype", "set_default_dtype", "long", "float", "double", "half", "save", "load",
    "is_tensor", "softmax", "log_softmax", "pi", "e", "inf", "nan", "newaxis",
] + _ops.__all__
bool = bool_  # noqa: A001 - tiletrain.bool is the bool dtype, as torch.bool
long, float, double, half = int64, float32, float64, float16  # noqa: A001 - torch's dtype aliases
pi, e, inf, nan, newaxis = _math.pi, _math.e, _math.inf, _math.nan, None  # torch's constants (torch.pi, ...)


def is_tensor(obj) -> bool:  # noqa: E302
    return isinstance(obj, Tensor)


from . import functional, nn, optim  # noqa: E402  (tiletrain.functional as F, tiletrain.nn, tiletrain.optim)
from . import distribution, pipeline, trace  # noqa: E402  (traces and metrics; priorities, affinity, pipeline experiments)
from . import utils  # noqa: E402  (tiletrain.utils.checkpoint: activation recomputation)
from . import autograd  # noqa: E402  (tiletrain.autograd.grad: torch.autograd's functions, double backward)
from . import func  # noqa: E402  (torch.func: functional_call, grad, vjp, jvp, jacrev, jacfwd, hessian, vmap)
from . import inference  # noqa: E402  (key/value cache, generate)
from .serialization import load, save  # noqa: E402  (torch.save / torch.load of state dicts)
# torch.cuda and torch.backends answered; torch.distributions and torch.linalg
from . import backends, cuda, distributions, linalg, special  # noqa: E402


class Size(tuple):
    """torch.Size: a tuple of ints (tensor shapes are plain tuples, equal to it)."""


def numel(input) -> int:  # noqa: A002 - torch's names
    return input.numel()


def clone(input, *, memory_format=None):  # noqa: A002
    return input.clone()


def is_floating_point(input) -> bool:  # noqa: A002
    return input.is_floating_point()


def std_mean(input, dim=None, *, correction=1, keepdim=False):  # noqa: A002
    return std(input, dim, correction=correction, keepdim=keepdim), mean(input, dim, keepdim=keepdim)


def var_mean(input, dim=None, *, correction=1, keepdim=False):  # noqa: A002
    return var(input, dim, correction=correction, keepdim=keepdim), mean(input, dim, keepdim=keepdim)


def broadcast_shapes(*shapes):
    import numpy as _np
    return Size(_np.broadcast_shapes(*shapes))


def as_tensor(data, dtype=None, device=None):
    """The tensor itself (cast when dtype differs), else tensor(data, dtype=dtype)."""
    if isinstance(data, Tensor):
        return data if dtype is None else data.to(dtype)
    return tensor(data, dtype=dtype)


asarray = as_tensor


class _BFloat16Info:
    bits, eps, max, min, tiny, smallest_normal, resolution, dtype = (
        16, 2.0 ** -7, 3.3895313892515355e38, -3.3895313892515355e38, 2.0 ** -126, 2.0 ** -126, 0.01, "bfloat16")


def finfo(type=None):  # noqa: A002 - torch's name
    """torch.finfo of a float dtype (default: the default dtype): bits, eps, max, min, tiny."""
    import numpy as _np
    dt = get_default_dtype() if type is None else type
    return _BFloat16Info() if dt == bfloat16 else _np.finfo(dt)


def iinfo(type):  # noqa: A002
    import numpy as _np
    return _np.iinfo(type)


_NO_DTYPE = {"int32": "int64", "int16": "int64", "int8": "int64", "uint8": "bool or int64", "int": "int64",
             "short": "int64", "complex64": None, "complex128": None, "cfloat": None, "cdouble": None}


def __getattr__(name):
    if name in _NO_DTYPE:
        alt = _NO_DTYPE[name]
        raise AttributeError(f"tiletrain has no {name} dtype" + (f": use tiletrain.{alt}" if alt else
                                                                  " (complex tensors are not supported)"))
    raise AttributeError(f"module 'tiletrain' has no attribute {name!r}")


from . import amp  # noqa: E402  (torch.amp.GradScaler, disabled as without CUDA; autocast refused when enabled)
from .amp import autocast  # noqa: E402


def compile(model=None, **kwargs):  # noqa: A001 - torch's name
    """torch.compile: the model (or function) itself -- tiletrain's graph is the task graph
    StarPU schedules; there is nothing to compile.  As a decorator factory too."""
    if model is None:
        return lambda m: m
    return model


def set_float32_matmul_precision(precision: str) -> None:
    """Accepted ("highest", "high", "medium"): tiletrain's float32 products are float32."""
    if precision not in ("highest", "high", "medium"):
        raise RuntimeError(f"Invalid precision: {precision}")


def set_num_threads(n: int) -> None:
    """torch.set_num_threads: the number of CPU workers.  Before the runtime starts, it starts
    with n CPU workers; after, a different n is a warning (tiletrain.shutdown() and
    tiletrain.init(ncpu=n) change it)."""
    import warnings as _w
    if not is_initialized():
        init(ncpu=int(n))
        return
    have = get_num_threads()
    if have != n:
        _w.warn(f"set_num_threads({n}): the runtime already runs {have} CPU workers; call tiletrain.shutdown() "
                f"and tiletrain.init(ncpu={n}) to change them", RuntimeWarning, stacklevel=2)


def get_num_threads() -> int:
    """The number of CPU workers (of the running runtime; os.cpu_count() before it starts)."""
    import os as _os
    if not is_initialized():
        return _os.cpu_count() or 1
    import builtins as _b  # (sum, max ... are tiletrain's ops in this module)
    return _b.sum(1 for w in current().workers() if w.kind == "cpu")
