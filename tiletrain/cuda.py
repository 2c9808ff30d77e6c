"""torch.cuda for programs that ask it: tiletrain tensors are not bound to a device (StarPU
runs each task on a CPU or GPU worker and moves its tiles there; GPU workers start with
tiletrain.init(ncuda=...)), so a program that picks its device with
``"cuda" if torch.cuda.is_available() else "cpu"`` keeps "cpu" -- and still uses the GPUs."""
from __future__ import annotations

__all__ = ["device_count", "empty_cache", "is_available", "manual_seed", "manual_seed_all", "synchronize"]


def is_available() -> bool:
    """False: tiletrain has one device, "cpu" (GPUs are StarPU workers, not devices of tensors)."""
    return False


def device_count() -> int:
    return 0


def manual_seed(seed: int) -> None:
    """Nothing to seed: tiletrain's one generator is seeded by tiletrain.manual_seed."""


manual_seed_all = manual_seed


def synchronize(device=None) -> None:
    """Wait for every submitted task (tiletrain.wait)."""
    from .runtime import is_initialized, wait
    if is_initialized():
        wait()


def empty_cache() -> None:
    """Nothing to free: tiles are released by dataflow when their last task ends."""


class amp:  # noqa: N801 - torch.cuda.amp, a namespace
    """torch.cuda.amp.GradScaler / autocast: tiletrain.amp's."""
    from .amp import GradScaler, autocast  # noqa: F401
