"""torch-style printing of tensor values (a port of torch/_tensor_str.py's layout).

Defaults as torch's printoptions: precision 4, threshold 1000 elements (more are summarised
with ``...``), 3 edge items, line width 80."""
from __future__ import annotations

import math

import numpy as np

PRECISION, THRESHOLD, EDGEITEMS, LINEWIDTH = 4, 1000, 3, 80


class _Formatter:
    def __init__(self, values: np.ndarray, floating: bool):
        self.floating, self.int_mode, self.sci_mode, self.width = floating, True, False, 1
        flat = values.reshape(-1)
        if not floating:
            self.width = max([1] + [len(str(v)) for v in flat.tolist()])
            return
        vals = flat[np.isfinite(flat) & (flat != 0)].astype(np.float64)
        if vals.size == 0:
            return
        mag = np.abs(vals)
        lo, hi = mag.min(), mag.max()
        self.int_mode = bool(np.all(vals == np.ceil(vals)))
        self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8 or (not self.int_mode and lo < 1.0e-4)
        if self.sci_mode:
            fmt, extra = f"{{:.{PRECISION}e}}", 0
        elif self.int_mode:
            fmt, extra = "{:.0f}", 1  # the trailing "." of a float tensor's integers
        else:
            fmt, extra = f"{{:.{PRECISION}f}}", 0
        self.width = max(len(fmt.format(v)) + extra for v in vals.tolist())

    def format(self, v) -> str:
        if not self.floating:
            s = str(v)
        elif self.sci_mode:
            s = f"{v:{self.width}.{PRECISION}e}"
        elif self.int_mode:
            s = f"{v:.0f}" + ("" if math.isinf(v) or math.isnan(v) else ".")
        else:
            s = f"{v:.{PRECISION}f}"
        return " " * (self.width - len(s)) + s


def _summarized(a: np.ndarray) -> np.ndarray:
    """The values that a summarised print shows (the first and last edge items of every axis)."""
    if a.ndim == 0:
        return a
    if a.shape[0] > 2 * EDGEITEMS:
        a = np.concatenate((a[:EDGEITEMS], a[-EDGEITEMS:]))
    return a if a.ndim == 1 else np.stack([_summarized(x) for x in a])


def _str(a: np.ndarray, indent: int, summarize: bool, fmt: _Formatter) -> str:
    if a.ndim == 0:
        return fmt.format(a.item())
    cut = summarize and a.shape[0] > 2 * EDGEITEMS
    if a.ndim == 1:
        per_line = max(1, (LINEWIDTH - indent) // (fmt.width + 2))
        vals = a.tolist()
        if cut:
            vals = vals[:EDGEITEMS] + [None] + vals[-EDGEITEMS:]
        data = [" ..." if v is None else fmt.format(v) for v in vals]
        lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    rows = list(range(EDGEITEMS)) + [None] + list(range(a.shape[0] - EDGEITEMS, a.shape[0])) if cut \
        else range(a.shape[0])
    slices = ["..." if i is None else _str(a[i], indent + 1, summarize, fmt) for i in rows]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(slices) + "]"


def format_tensor(values: np.ndarray, floating: bool, suffixes: list[str], prefix: str = "tensor(") -> str:
    """``tensor([...], suffix, ...)`` laid out as torch prints it."""
    indent = len(prefix)
    if floating and values.dtype != np.float64:
        values = values.astype(np.float64 if values.dtype.itemsize > 4 else np.float32)
    summarize = values.size > THRESHOLD
    fmt = _Formatter(_summarized(values) if summarize else values, floating)
    out = prefix + _str(values, indent, summarize, fmt)
    last = len(out) - out.rfind("\n") + 1
    for s in suffixes:
        if last + len(s) + 2 > LINEWIDTH:
            out += ",\n" + " " * indent + s
            last = indent + len(s)
        else:
            out += ", " + s
            last += len(s) + 2
    return out + ")"
