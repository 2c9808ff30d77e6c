"""The Tensor core: TensorTraits (tile geometry), dtypes, the tensor class every tensor is made
with (TensorBase, also named Tensor here; the user-facing tiletrain.Tensor derives from it in
tensors/api.py, above the ops), data in and out, the creation functions that need no kernel."""
from .creation import Generator, default_generator, empty, empty_like, manual_seed, tensor
from .tensor import (DTYPES, FLOAT_DTYPES, HALF_DTYPES, Tensor, TensorBase, as_dtype, bfloat16, bool_, float16,
                     float32, float64, from_numpy, int64, is_float, is_half)
from .traits import DEFAULT_TILE, TensorTraits, get_max_tiles, set_max_tiles

__all__ = ["DTYPES", "DEFAULT_TILE", "FLOAT_DTYPES", "Generator", "HALF_DTYPES", "Tensor", "TensorBase",
           "TensorTraits", "as_dtype", "bfloat16", "bool_", "default_generator", "empty", "empty_like", "float16",
           "float32", "float64", "from_numpy", "get_max_tiles", "int64", "is_float", "is_half", "manual_seed",
           "set_max_tiles", "tensor"]

