"""tiletrain: task-based heterogeneous training on StarPU.

Tensors are split into tiles; every operation becomes tile tasks that StarPU schedules
over all workers, starting each task as soon as the tiles it reads are ready."""
from ._version import __version__
from .config import RuntimeConfig
from .runtime import Runtime, current, init, is_initialized, priority, rank, shutdown, wait, world_size
from .trace.tags import tag
from .tensors import Tensor, TensorTraits, bfloat16, empty, float16, from_numpy, full, ones, zeros
from .tensors.cupy_interop import from_cupy
from .ops import (add, add_broadcast, add_scalar, astype, backward, broadcast, copy, div, enable_grad, fill_,
                  grad_enabled, matmul, mul, neg, no_grad, rdiv_scalar, scale, sub)
from .ops.reduce import (amax, amin, argmax, argmin, logsumexp, max, mean, min, norm, return_types, std,  # noqa: A004
                         sum, var)

__all__ = [
    "__version__", "RuntimeConfig", "Runtime", "current", "init", "is_initialized", "priority", "shutdown",
    "wait", "Tensor", "TensorTraits", "empty", "from_cupy", "from_numpy", "full", "ones", "zeros", "add", "add_broadcast",
    "add_scalar", "backward", "broadcast", "copy", "div", "enable_grad", "fill_", "grad_enabled", "matmul", "max",
    "mul", "neg", "no_grad", "rdiv_scalar", "scale", "sub", "sum", "tag", "rank", "world_size", "distribution",
    "astype", "bfloat16", "float16",
    "amax", "amin", "argmax", "argmin", "logsumexp", "mean", "min", "norm", "return_types", "std", "var",
]

from . import functional, nn, optim  # noqa: E402  (tiletrain.functional as F, tiletrain.nn, tiletrain.optim)
from . import distribution, pipeline, trace  # noqa: E402  (traces and metrics; priorities, affinity, pipeline experiments)
