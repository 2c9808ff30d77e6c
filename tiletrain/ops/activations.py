"""(filled in by the activations work: ops with forward tile kernels, autograd records and backward rules)"""
from __future__ import annotations

__all__: list[str] = []
