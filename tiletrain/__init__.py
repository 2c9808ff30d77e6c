"""tiletrain: task-based heterogeneous training on StarPU.

Tensors are split into tiles; every operation becomes tile tasks that StarPU schedules
over all workers, starting each task as soon as the tiles it reads are ready."""
from ._version import __version__
from .config import RuntimeConfig
from .runtime import Runtime, current, init, is_initialized, priority, rank, shutdown, wait, world_size
from .trace.tags import tag
from .tensors import TensorTraits, bfloat16, bool_, empty, float16, from_numpy
from .tensors.api import Tensor
# creation functions (torch's names and signatures), dtypes, seeding, the tile-count limit
from .tensors import (Generator, empty_like, float32, float64, get_max_tiles, int64, manual_seed, set_max_tiles,
                      tensor)
from .ops.creation import (arange, full, full_like, linspace, ones, ones_like, rand, rand_like, randint, randn,
                           randn_like, zeros, zeros_like)
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
    "randn", "randn_like", "set_max_tiles", "tensor", "zeros_like", "bool",
    "device", "get_default_dtype", "set_default_dtype", "long", "float", "double", "half", "save", "load",
    "is_tensor", "softmax", "log_softmax",
] + _ops.__all__
bool = bool_  # noqa: A001 - tiletrain.bool is the bool dtype, as torch.bool
long, float, double, half = int64, float32, float64, float16  # noqa: A001 - torch's dtype aliases


def is_tensor(obj) -> bool:  # noqa: E302
    return isinstance(obj, Tensor)


from . import functional, nn, optim  # noqa: E402  (tiletrain.functional as F, tiletrain.nn, tiletrain.optim)
from . import distribution, pipeline, trace  # noqa: E402  (traces and metrics; priorities, affinity, pipeline experiments)
from . import utils  # noqa: E402  (tiletrain.utils.checkpoint: activation recomputation)
from . import autograd  # noqa: E402  (tiletrain.autograd.grad: torch.autograd's functions, double backward)
from . import inference  # noqa: E402  (key/value cache, generate)
from .serialization import load, save  # noqa: E402  (torch.save / torch.load of state dicts)
