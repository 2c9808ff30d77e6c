"""tiletrain: task-based heterogeneous training on StarPU.

Tensors are split into tiles; every operation becomes tile tasks that StarPU schedules
over all workers, starting each task as soon as the tiles it reads are ready."""
from ._version import __version__
from .config import RuntimeConfig
from .runtime import Runtime, current, init, is_initialized, priority, rank, shutdown, wait, world_size
from .trace.tags import tag
from .tensors import Tensor, TensorTraits, bfloat16, empty, float16, from_numpy, full, ones, zeros
# creation functions (torch's names and signatures), dtypes, seeding, the tile-count limit
from .tensors import (Generator, arange, empty_like, float32, float64, full_like, get_max_tiles, int64,
                      linspace, manual_seed, ones_like, rand, rand_like, randint, randn, randn_like,
                      set_max_tiles, tensor, zeros_like)
from .tensors.cupy_interop import from_cupy
from .ops import (abs, add, add_broadcast, add_scalar, astype, backward, broadcast, clamp, clip, copy, cos, div,
                  divide, enable_grad, exp, fill_, grad_enabled, log, matmul, max, maximum, minimum, mul, multiply, neg,
                  negative, no_grad, pow, rdiv_scalar, reciprocal, relu, rsqrt, scale, sigmoid, sign, sin, sqrt, sub,
                  subtract, sum, tanh, true_divide, broadcast_to, cat, chunk, expand, flatten, permute, reshape,
                  retile, split, squeeze, stack, t, transpose, unsqueeze, view, eq, ne, lt, le, gt, ge, greater,
                  greater_equal, less, less_equal, not_equal, where, masked_fill, logical_and, logical_not,
                  logical_or, logical_xor)

__all__ = [
    "__version__", "RuntimeConfig", "Runtime", "current", "init", "is_initialized", "priority", "shutdown",
    "wait", "Tensor", "TensorTraits", "empty", "from_cupy", "from_numpy", "full", "ones", "zeros", "add", "add_broadcast",
    "add_scalar", "backward", "broadcast", "copy", "div", "enable_grad", "fill_", "grad_enabled", "matmul", "max",
    "mul", "neg", "no_grad", "rdiv_scalar", "scale", "sub", "sum", "tag", "rank", "world_size", "distribution",
    "astype", "bfloat16", "float16", "abs", "clamp", "clip", "cos", "divide", "exp", "log", "maximum", "minimum",
    "multiply", "negative", "pow", "reciprocal", "relu", "rsqrt", "sigmoid", "sign", "sin", "sqrt", "subtract",
    "tanh", "true_divide", "broadcast_to", "cat", "chunk", "expand", "flatten", "permute", "reshape", "retile",
    "split", "squeeze", "stack", "t", "transpose", "unsqueeze", "view", "eq", "ne", "lt", "le", "gt", "ge", "greater",
    "greater_equal", "less", "less_equal", "not_equal", "where", "masked_fill", "logical_and", "logical_not",
    "logical_or", "logical_xor",
    "Generator", "arange", "empty_like", "float32", "float64", "full_like", "get_max_tiles", "int64", "linspace",
    "manual_seed", "ones_like", "rand", "rand_like", "randint", "randn", "randn_like", "set_max_tiles", "tensor",
    "zeros_like",
]

from . import functional, nn, optim  # noqa: E402  (tiletrain.functional as F, tiletrain.nn, tiletrain.optim)
from . import distribution, pipeline, trace  # noqa: E402  (traces and metrics; priorities, affinity, pipeline experiments)
