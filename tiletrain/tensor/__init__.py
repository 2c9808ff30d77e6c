from .tensor import DTYPES, Tensor, as_dtype, empty, from_numpy, from_value_, full, ones, zeros
from .traits import DEFAULT_TILE, TensorTraits

__all__ = ["DTYPES", "DEFAULT_TILE", "Tensor", "TensorTraits", "as_dtype", "empty", "from_numpy",
           "from_value_", "full", "ones", "zeros"]
