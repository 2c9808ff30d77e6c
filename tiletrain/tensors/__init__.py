from .creation import (Generator, arange, default_generator, empty, empty_like, full, full_like, linspace,
                       manual_seed, ones, ones_like, rand, rand_like, randint, randn, randn_like, tensor,
                       zeros, zeros_like)
from .tensor import (DTYPES, FLOAT_DTYPES, HALF_DTYPES, Tensor, as_dtype, bfloat16, bool_, float16, float32, float64,
                     from_numpy, from_value_, int64, is_float, is_half, reuse_buffers)
from .traits import DEFAULT_TILE, TensorTraits, get_max_tiles, set_max_tiles

__all__ = ["DTYPES", "DEFAULT_TILE", "FLOAT_DTYPES", "Generator", "HALF_DTYPES", "Tensor", "TensorTraits", "arange",
           "as_dtype", "bfloat16", "bool_", "default_generator", "empty", "empty_like", "float16", "float32", "float64",
           "from_numpy", "from_value_", "full", "full_like", "get_max_tiles", "int64", "is_float", "is_half",
           "linspace", "manual_seed", "ones", "ones_like", "rand", "rand_like", "randint", "randn", "randn_like",
           "reuse_buffers", "set_max_tiles", "tensor", "zeros", "zeros_like"]
