"""StarPU's history-based perf-model files, as text: what a machine has calibrated, and the
same models scaled for a derived machine.

A file is ``sampling/codelets/45/<symbol>.<host>`` (StarPU 1.3's format 45): per device
combination and implementation, a regression line, the ``a b c`` of the non-linear model
and a table, one row per footprint (one tile shape):

    # hash  size  flops  mean (us)  dev (us)  sum  sum2  n

Scaling a device type's times by ``1 / speed`` divides mean, dev and sum by ``speed`` and
sum2 by ``speed**2`` (so mean and dev stay consistent with n, sum and sum2), and the
regressions' time coefficients likewise; sizes, footprints and sample counts are kept.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

MODEL_VERSION_DIR = "45"  # StarPU 1.3's perf-model format (its directory under sampling/codelets)
DEVICE_TYPES = {0: "cpu", 1: "cuda", 2: "opencl", 3: "mic", 5: "mpi_ms"}


class ModelFileError(ValueError):
    """A perf-model file that is not in StarPU's format 45."""


def codelets_dir(sampling: str) -> str:
    return os.path.join(sampling, "codelets", MODEL_VERSION_DIR)


def model_files(sampling: str, host: str) -> dict[str, str]:
    """{symbol: path} of the models calibrated for ``host`` under a sampling directory."""
    d = codelets_dir(sampling)
    if not os.path.isdir(d):
        return {}
    suffix = "." + host
    return {name[: -len(suffix)]: os.path.join(d, name) for name in sorted(os.listdir(d))
            if name.endswith(suffix) and not name.startswith(".")}


@dataclass(frozen=True)
class Entry:
    device: str     # cpu, cuda, ...
    footprint: str  # StarPU's hash of the tile shapes
    size: int       # bytes of the task's data
    mean_us: float
    n: int          # samples


def _data(line: str) -> bool:
    s = line.strip()
    return bool(s) and not s.startswith("#")


def entries(text: str, where: str = "model") -> list[Entry]:
    """The table rows of a model file."""
    out = []
    header = ""
    device = "?"
    for lineno, line in enumerate(text.splitlines(), 1):
        if not _data(line):
            if line.strip().startswith("#"):
                header = line.strip()
            continue
        if header.startswith("# device type"):
            try:
                device = DEVICE_TYPES.get(int(line.split()[0]), line.split()[0])
            except ValueError:
                raise ModelFileError(f"{where}:{lineno}: a device type must be an integer, got {line.strip()!r}") \
                    from None
        elif header.startswith("# hash"):
            f = line.split()
            if len(f) != 8:
                raise ModelFileError(f"{where}:{lineno}: a history row has 8 fields (hash size flops mean dev sum "
                                     f"sum2 n), got {len(f)}")
            try:
                out.append(Entry(device, f[0], int(f[1]), float(f[3]), int(f[7])))
            except ValueError:
                raise ModelFileError(f"{where}:{lineno}: not a history row: {line.strip()!r}") from None
    return out


def _fmt(v: float) -> str:
    return f"{v:<15e}"


def scale(text: str, speed: dict[str, float], where: str = "model") -> str:
    """The model with every time of device type ``d`` divided by ``speed[d]`` (types not in
    ``speed`` unchanged)."""
    out = []
    header = ""
    device = "?"
    for lineno, line in enumerate(text.splitlines(), 1):
        if not _data(line):
            if line.strip().startswith("#"):
                header = line.strip()
            out.append(line)
            continue
        f = line.split()
        if header.startswith("# device type"):
            device = DEVICE_TYPES.get(int(f[0]), f[0])
            out.append(line)
            continue
        s = speed.get(device)
        if s is None or s == 1.0:
            out.append(line)
            continue
        try:
            if header.startswith("# hash") and len(f) == 8:
                mean, dev, tot, tot2 = (float(x) for x in (f[3], f[4], f[5], f[6]))
                f[3:7] = [_fmt(mean / s), _fmt(dev / s), _fmt(tot / s), _fmt(tot2 / (s * s))]
            elif header.startswith("# sumlnx") and len(f) >= 9:
                sumlnx, sumlny, sumlnxlny, alpha, n = (float(f[i]) for i in (0, 2, 3, 4, 6))
                ln = math.log(s)
                f[2] = _fmt(sumlny - n * ln)
                f[3] = _fmt(sumlnxlny - ln * sumlnx)
                if not math.isnan(alpha):
                    f[4] = _fmt(alpha / s)
            elif header.startswith("# a") and len(f) == 3:
                a, b, c = (float(x) for x in f)
                f = [_fmt(a / s if not math.isnan(a) else a), _fmt(b), _fmt(c / s if not math.isnan(c) else c)]
        except ValueError:
            raise ModelFileError(f"{where}:{lineno}: cannot read {line.strip()!r}") from None
        out.append("\t".join(f))
    return "\n".join(out) + "\n"


COMB_SEP = "####################"


def _split_combs(text: str, where: str) -> tuple[list[str], list[list[str]]]:
    """(the lines before the first combination, each combination's lines)."""
    lines = text.splitlines()
    starts = [i for i in range(len(lines) - 1)
              if lines[i].strip() == COMB_SEP and lines[i + 1].strip().startswith("# COMB_")]
    if not starts:
        raise ModelFileError(f"{where}: no '# COMB_' section (not a StarPU format-45 history model)")
    head = lines[:starts[0]]
    combs = [lines[a:b] for a, b in zip(starts, starts[1:] + [len(lines)])]
    return head, combs


def _comb_device(comb: list[str], where: str) -> str:
    for i, line in enumerate(comb):
        if line.strip().startswith("# device type"):
            for nxt in comb[i + 1:]:
                if _data(nxt):
                    return DEVICE_TYPES.get(int(nxt.split()[0]), nxt.split()[0])
    raise ModelFileError(f"{where}: a combination without a device type")


def with_cuda(text: str, cpu_speed: float, gpus: int, gpu_speed: float, where: str = "model") -> str:
    """The model of a derived machine with ``gpus`` CUDA devices: its CPU combination scaled by
    ``1 / cpu_speed`` (``scale``), and one CUDA combination per device (ids 0..gpus-1) holding
    the *unscaled* CPU rows divided by ``gpu_speed`` (a GPU's speed is relative to one CPU core
    of the model given).  CUDA combinations already in ``text`` are replaced."""
    head, combs = _split_combs(text, where)
    cpu = [c for c in combs if _comb_device(c, where) == "cpu"]
    if len(cpu) != 1:
        raise ModelFileError(f"{where}: expected one CPU combination, found {len(cpu)}")
    others = [c for c in combs if _comb_device(c, where) not in ("cpu", "cuda")]
    cuda_src = "\n".join(cpu[0])
    new_combs = [scale("\n".join(cpu[0]), {"cpu": cpu_speed}, where).rstrip("\n").splitlines()]
    new_combs += [c for c in others]
    for g in range(gpus):
        c = scale(cuda_src, {"cpu": gpu_speed}, where).rstrip("\n").splitlines()
        out, field = [], None
        for line in c:
            st = line.strip()
            if st.startswith("# device type"):
                field = "type"
            elif st.startswith("# device id"):
                field = "id"
            elif st.startswith("# number of cores"):
                field = "cores"
            elif st.startswith("# Model for"):
                line = f"# Model for cuda{g}_impl0 (simulated; derived from the CPU model)"
            elif _data(line) and field:
                line = {"type": "1", "id": str(g), "cores": "1"}[field]
                field = None
            elif st.startswith("#"):
                field = None if not st.startswith("# DEV_") else field
            out.append(line)
        new_combs.append(out)
    # "# number of combinations" then its count
    for i, line in enumerate(head):
        if line.strip().startswith("# number of combinations"):
            j = next(k for k in range(i + 1, len(head)) if _data(head[k]))
            head[j] = str(len(new_combs))
            break
    else:
        raise ModelFileError(f"{where}: no '# number of combinations'")
    for n, c in enumerate(new_combs):
        c[1] = f"# COMB_{n}"
    return "\n".join(head + [line for c in new_combs for line in c]) + "\n"


__all__ = ["Entry", "ModelFileError", "MODEL_VERSION_DIR", "codelets_dir", "model_files", "entries", "scale",
           "with_cuda"]
