"""NumPy references for the softmax kernels (merged into references.REFERENCES)."""
from __future__ import annotations

REFERENCES: dict = {}
