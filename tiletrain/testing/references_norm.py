"""NumPy references for the norm kernels (merged into references.REFERENCES)."""
from __future__ import annotations

REFERENCES: dict = {}
