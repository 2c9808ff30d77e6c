"""torch.nn.utils: clip_grad_norm_ (tiletrain/optim's tile tasks)."""
from ..optim import clip_grad_norm_

__all__ = ["clip_grad_norm_"]
