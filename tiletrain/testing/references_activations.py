"""NumPy references for the activations kernels (merged into references.REFERENCES)."""
from __future__ import annotations

REFERENCES: dict = {}
