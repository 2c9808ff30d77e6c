"""torch.backends for programs that set its flags: tiletrain keeps them (they select nothing:
its kernels are its own) and reports no cuDNN, MPS or MKL-DNN."""
from __future__ import annotations

from types import SimpleNamespace

cudnn = SimpleNamespace(benchmark=False, deterministic=False, enabled=False, allow_tf32=False,
                        is_available=lambda: False)
mps = SimpleNamespace(is_available=lambda: False, is_built=lambda: False)
cuda = SimpleNamespace(matmul=SimpleNamespace(allow_tf32=False), is_built=lambda: False)
mkldnn = SimpleNamespace(is_available=lambda: False, enabled=False)

__all__ = ["cuda", "cudnn", "mkldnn", "mps"]
