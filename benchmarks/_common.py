"""Shared helpers for benchmark scripts: environment description and medians."""
from __future__ import annotations

import os
import platform
import statistics


def environment() -> str:
    lines = [f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
             f"python {platform.python_version()}"]
    lines.append(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')} "
                 f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}")
    try:
        from tiletrain._ffi import cstr, lib
        lines.append(f"tiletrain blas: {cstr(lib.tt_blas_info())}")
    except ImportError:
        pass
    try:
        from threadpoolctl import threadpool_info
        for lib in threadpool_info():
            if lib.get("user_api") == "blas":
                lines.append(f"blas loaded: {lib.get('internal_api')} {lib.get('version')} "
                             f"({os.path.basename(lib.get('filepath', ''))}), arch {lib.get('architecture')}, "
                             f"threads {lib.get('num_threads')}")
    except ImportError:
        pass
    return "\n".join(lines)


def median(xs) -> float:
    return statistics.median(xs)


def table(headers: list[str], rows: list[list]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    fmt = "  ".join("{:>%d}" % w for w in widths)
    out = [fmt.format(*cells[0]), fmt.format(*["-" * w for w in widths])]
    out += [fmt.format(*r) for r in cells[1:]]
    return "\n".join(out)
