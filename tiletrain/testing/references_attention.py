"""NumPy references for the attention kernels (merged into references.REFERENCES)."""
from __future__ import annotations

REFERENCES: dict = {}
