from .tensor import (DTYPES, FLOAT_DTYPES, HALF_DTYPES, Tensor, as_dtype, bfloat16, bool_, empty, float16, from_numpy,
                     from_value_, full, is_float, is_half, ones, zeros)
from .traits import DEFAULT_TILE, TensorTraits

__all__ = ["DTYPES", "DEFAULT_TILE", "FLOAT_DTYPES", "HALF_DTYPES", "Tensor", "TensorTraits", "as_dtype", "bfloat16",
           "bool_", "empty", "float16", "from_numpy", "from_value_", "full", "is_float", "is_half", "ones", "zeros"]
