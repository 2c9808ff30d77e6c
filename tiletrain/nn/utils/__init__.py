"""torch.nn.utils: clip_grad_norm_ (tiletrain/optim's tile tasks), clip_grad_value_,
parameters_to_vector, vector_to_parameters, weight_norm / remove_weight_norm and
spectral_norm / remove_spectral_norm (the hook forms; nn/utils/weight_norm.py and
spectral_norm.py), the parametrizations/parametrize modules and stateless.functional_call."""
from ...ops import cat, clamp, no_grad, reshape
from ...ops.index import assign_, index_get
from ...optim import clip_grad_norm_

from . import rnn  # noqa: E402,F401  (torch.nn.utils.rnn)
from . import parametrizations, parametrize  # noqa: E402,F401
from . import stateless  # noqa: E402,F401  (torch.nn.utils.stateless.functional_call)
from .spectral_norm import remove_spectral_norm, spectral_norm  # noqa: E402
from .weight_norm import remove_weight_norm, weight_norm  # noqa: E402

__all__ = ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector", "vector_to_parameters", "rnn",
           "weight_norm", "remove_weight_norm", "spectral_norm", "remove_spectral_norm", "parametrizations", "parametrize",
           "stateless"]


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient to [-clip_value, clip_value] in place."""
    from ...tensors import Tensor
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    v = float(clip_value)
    with no_grad():
        for p in params:
            if p.grad is not None:
                assign_(p.grad, clamp(p.grad, -v, v))


def parameters_to_vector(parameters):
    """The parameters flattened and concatenated into one 1-d tensor (differentiable)."""
    return cat([reshape(p, (-1,)) for p in parameters], 0)


def vector_to_parameters(vec, parameters) -> None:
    """Write consecutive slices of vec into the parameters (their values, not their identity)."""
    from ...tensors import Tensor
    if not isinstance(vec, Tensor) or vec.ndim != 1:
        raise TypeError(f"expected a 1-d tiletrain Tensor, got {type(vec).__name__}")
    start = 0
    with no_grad():
        for p in parameters:
            n = p.numel()
            assign_(p, reshape(index_get(vec, slice(start, start + n)), p.shape))
            start += n
