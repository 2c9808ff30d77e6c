"""StarPU's own FxT trace beside tiletrain's: convert it with starpu_fxt_tool and count its
tasks per kernel against a tiletrain trace of the same step.

A session started with ``tiletrain.init(fxt=True)`` (or ``TILETRAIN_FXT=1``) on a StarPU
built ``--with-fxt`` (tiletrain's own, `make setup`) writes ``prof_file_<user>_<rank>`` into
its ``fxt_dir`` at shutdown.  ``tiletrain trace run --fxt DIR`` records one step both ways
(FxT only for that step, ``Runtime.fxt_record``) and ``tiletrain trace fxt DIR`` converts
and compares: starpu_fxt_tool writes ``paje.trace`` (ViTE), ``tasks.rec``, ``dag.dot`` ...
into DIR."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import time
from collections import Counter

from ..runtime.hetero import starpu_prefix
from ..runtime.registry import KERNELS

#: tiletrain's trace of the same step, written beside the FxT files by `trace run --fxt`
TILETRAIN_TRACE = "tiletrain-trace.json"


def prof_files(directory: str) -> list[str]:
    """The FxT files StarPU wrote into ``directory`` (one per MPI rank)."""
    return sorted(glob.glob(os.path.join(directory, "prof_file_*")))


def fxt_tool() -> str:
    """starpu_fxt_tool of the StarPU tiletrain was built against (else the one on PATH)."""
    prefix = starpu_prefix()
    if prefix and os.access(os.path.join(prefix, "bin", "starpu_fxt_tool"), os.X_OK):
        return os.path.join(prefix, "bin", "starpu_fxt_tool")
    found = shutil.which("starpu_fxt_tool")
    if not found:
        raise RuntimeError("starpu_fxt_tool not found: it comes with a StarPU built --with-fxt (tiletrain's own, "
                           "`make setup`; Debian's libstarpu-dev has no FxT)")
    return found


def convert(directory: str) -> list[str]:
    """Run starpu_fxt_tool on the FxT files in ``directory``; its outputs go there too.
    Returns the files it wrote."""
    files = prof_files(directory)
    if not files:
        raise FileNotFoundError(f"no FxT trace (prof_file_*) in {directory}: run with tiletrain.init(fxt=True, "
                                f"fxt_dir={directory!r}) or TILETRAIN_FXT=1 TILETRAIN_FXT_DIR={directory}, or "
                                f"`tiletrain trace run --fxt {directory}`")
    t0 = time.time()
    cmd = [fxt_tool(), "-d", os.path.abspath(directory)]
    for f in files:
        cmd += ["-i", os.path.abspath(f)]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=directory)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-2000:]}")
    return sorted(p for p in (os.path.join(directory, f) for f in os.listdir(directory))
                  if os.path.getmtime(p) >= t0 - 1 and not os.path.basename(p).startswith("prof_file_"))


def read_rec(path: str) -> list[dict]:
    """A recutils file (tasks.rec): one dict per record (blank-line separated ``Key: value``)."""
    records, cur = [], {}
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                if cur:
                    records.append(cur)
                cur = {}
                continue
            key, _, value = line.partition(": ")
            cur[key] = value
    if cur:
        records.append(cur)
    return records


def task_counts(tasks_rec: str) -> Counter:
    """Tasks that ran, per name, in StarPU's tasks.rec (its control records and the tasks that
    never ran left out).  StarPU names a task by its performance model, ``tiletrain_<kernel>``
    for tiletrain's (csrc/gen_kernels.py): those are counted under the kernel's name."""
    kernels = KERNELS
    counts = Counter()
    for r in read_rec(tasks_rec):
        if "JobId" in r and "Control" not in r and "EndTime" in r:
            name = r.get("Name", "?")
            counts[name.removeprefix("tiletrain_") if name.removeprefix("tiletrain_") in kernels else name] += 1
    return counts


def compare(fxt: Counter, trace) -> tuple[list[list], bool]:
    """Rows (kernel, FxT tasks, tiletrain tasks) and whether every count is equal.  StarPU's
    own tasks (names that are no tiletrain kernel) are listed and not compared."""
    mine = Counter(str(k) for k in trace.tasks["kernel"])
    kernels = KERNELS
    rows, equal = [], True
    for name in sorted(set(fxt) | set(mine)):
        ours = name in kernels or name in mine
        rows.append([name, fxt.get(name, 0), mine.get(name, 0) if ours else "(StarPU's)"])
        equal &= not ours or fxt.get(name, 0) == mine.get(name, 0)
    return rows, equal


__all__ = ["TILETRAIN_TRACE", "prof_files", "fxt_tool", "convert", "read_rec", "task_counts", "compare"]
