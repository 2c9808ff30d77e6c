"""torch.amp for programs that carry it: GradScaler as on a machine without CUDA (torch disables
it there, with a warning: every call passes through), and autocast, which tiletrain does not
run (mixed precision is chosen per model: dtype= and the layers' half types) -- an enabled
autocast raises instead of computing in another precision than the program asked."""
from __future__ import annotations

import warnings

__all__ = ["GradScaler", "autocast"]


class GradScaler:
    """torch.amp.GradScaler(device="cuda", init_scale=2**16, ..., enabled=True): disabled (no
    CUDA device), so scale(loss) is loss, step(optimizer) is optimizer.step(), update() nothing."""

    def __init__(self, device: str = "cuda", init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        if enabled:
            warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.",
                          UserWarning, stacklevel=2)
        self._enabled = False

    def is_enabled(self) -> bool:
        return self._enabled

    def scale(self, outputs):
        return outputs

    def unscale_(self, optimizer) -> None:
        return None

    def step(self, optimizer, *args, **kwargs):
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None) -> None:
        return None

    def get_scale(self) -> float:
        return 1.0

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state_dict) -> None:
        return None


class autocast:  # noqa: N801 - torch's name
    """torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None): enabled=False
    is a no-op context; enabled autocast is not supported (a clear error)."""

    def __init__(self, device_type: str = "cuda", dtype=None, enabled: bool = True, cache_enabled=None):
        if enabled:
            raise NotImplementedError("autocast is not supported: tiletrain computes in the dtypes the program gives "
                                      "(build the model with dtype=tiletrain.bfloat16 or float16 for mixed precision); "
                                      "use autocast(..., enabled=False) or contextlib.nullcontext()")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __call__(self, fn):
        return fn
