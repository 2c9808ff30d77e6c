"""Tensor ops with autograd.  Element-wise ops come from one table (elementwise.py), shape
ops from one region-copy expander (shape.py), reductions from span expanders (reduce.py),
matrix products from the gemm expander (linalg.py); the torch-shaped functions (broadcasting,
scalars, dtype promotion, any tiling) are the public ones, and basic.py holds the
same-layout kernel ops and the operand checks they all use.

Inside the package, modules import one way: autograd < basic < creation < shape < linalg <
elementwise < reduce < the rest (softmax, norm, conv, embedding, attention, activations;
mathfns, torch functions composed of composite's and the others; specialfns, the gamma family and
Bessel functions' torch signatures)."""
from . import composite, elementwise, mathfns, index, reduce, shape, sparse, specialfns
from .autograd import backward, enable_grad, grad_enabled, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from .basic import HALF_OPS, add_broadcast, add_scalar, astype, axpy_, broadcast, copy, fill_, scale
from .elementwise import *  # noqa: F401,F403
from .elementwise import rdiv_scalar
from .index import *  # noqa: F401,F403
from .contract import einsum, ger, outer, tril, triu
from .sparse import sparse_csr_tensor
from .linalg import matmul, matmul_leading
from .matfun import matrix_exp
from .reduce import *  # noqa: F401,F403
from .shape import *  # noqa: F401,F403
from .composite import *  # noqa: F401,F403
from .mathfns import *  # noqa: F401,F403
from .specialfns import *  # noqa: F401,F403

__all__ = (["HALF_OPS", "add_broadcast", "add_scalar", "astype", "axpy_", "backward", "broadcast", "copy",
            "enable_grad", "fill_", "grad_enabled", "inference_mode", "is_grad_enabled", "set_grad_enabled", "einsum", "ger", "outer", "tril", "triu", "matmul", "matmul_leading", "matrix_exp", "no_grad", "rdiv_scalar", "scale"]
           + elementwise.__all__ + composite.__all__ + mathfns.__all__ + specialfns.__all__ + reduce.__all__ + shape.__all__ + index.__all__
           + ["sparse", "sparse_csr_tensor"])
