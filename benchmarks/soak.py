"""Fault soak (issue 29): `tiletrain train` under `mpirun -np 2` (a tiny float64 GPT, a
checkpoint every few steps) killed with SIGKILL at random moments -- one rank, both ranks, or
while a checkpoint is written -- and resumed, until N kills; then the losses and tensors of
every checkpoint are compared with an uninterrupted run's, every checkpoint is verified and no
temporary may be left (tests/reliability/soak.py says exactly what is checked).  Prints a
table; exits 1 on any failure.  Not in `make test` (tests/reliability/test_soak.py runs 5 kills).

    .venv/bin/python benchmarks/soak.py [--kills 50] [--seed 0] [--steps 24] [--every 3] [--verbose]
"""
from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reliability"))
from soak import SoakConfig, format_report, have_mpi, run_soak  # noqa: E402


def main() -> int:
    d = SoakConfig()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=d.kills, help=f"SIGKILLs in all (default {d.kills})")
    ap.add_argument("--seed", type=int, default=d.seed, help=f"seed of the kill schedule (default {d.seed})")
    ap.add_argument("--steps", type=int, default=d.steps, help=f"steps of each training (default {d.steps})")
    ap.add_argument("--every", type=int, default=d.every, help=f"checkpoint every N steps (default {d.every})")
    ap.add_argument("--workdir", help="where the checkpoints go (default: a temporary directory, removed)")
    ap.add_argument("--verbose", action="store_true", help="a line per kill and per training")
    a = ap.parse_args()
    if a.kills < 1 or a.steps < 1 or a.every < 1:
        ap.error("--kills, --steps and --every must be positive")
    if not have_mpi():
        print("benchmarks/soak.py needs mpirun and a StarPU-MPI build of tiletrain", file=sys.stderr)
        return 1
    cfg = SoakConfig(kills=a.kills, seed=a.seed, steps=a.steps, every=a.every)
    for sig in (signal.SIGINT, signal.SIGTERM):  # stopped (even from a background shell): the job goes too
        signal.signal(sig, lambda signum, _frame: sys.exit(128 + signum))
    with tempfile.TemporaryDirectory(prefix="tiletrain-soak-") as tmp:
        report = run_soak(cfg, Path(a.workdir or tmp), log=print if a.verbose else None)
    print(format_report(report), flush=True)
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
