"""Scheduling experiment: policy x tile size x workers x priority mode over a workload.

For each configuration a fresh runtime with profiling, perf-model calibration steps first,
then --reps recorded steps; prints a table of medians (makespan, GFLOP/s, lower bound,
efficiency = bound / makespan, idle %) and writes CSV + PNG under --out
(benchmarks/results/, gitignored).  Same as `tiletrain bench sched`.

    python benchmarks/sched_sweep.py [--workload gemm|block|pipeline|gpt] [--scheds eager lws dmda tt-cp]
                                     [--tiles 256 512] [--ncpu 1 2] [--prio none hints bottom-level]
                                     [--reps 5] [--calib 3] [--param n=2048]

The workload `gpt` (a full GPT step) is a hook waiting for tiletrain.nn's GPT model.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from _common import environment  # noqa: E402

from tiletrain.cli import main  # noqa: E402

if __name__ == "__main__":
    print(environment(), flush=True)
    sys.exit(main(["bench", "sched", *sys.argv[1:]]))
