"""tiletrain.autograd: torch.autograd's entry points over tiletrain's tape
(tiletrain/ops/autograd.py): ``grad`` and ``backward`` (tiletrain/autograd/engine.py), the
grad-mode context managers, and ``functional`` (jacobian, hessian, vjp, jvp, vhp, hvp:
tiletrain/autograd/functional.py)."""
from . import functional
from .engine import backward, enable_grad, grad, inference_mode, no_grad

__all__ = ["grad", "backward", "no_grad", "enable_grad", "inference_mode", "functional"]
