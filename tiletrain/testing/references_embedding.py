"""NumPy references for the embedding kernels (merged into references.REFERENCES)."""
from __future__ import annotations

REFERENCES: dict = {}
