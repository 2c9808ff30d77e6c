"""Simulated machines (docs/simulation.md): the same program, run by the SimGrid flavour of
StarPU against calibrated perf models and a platform description.

    tiletrain machine calibrate [--name here]      # measure this computer's kernels
    tiletrain machine derive big --from here --cpus 32 --cpu-speed 1.5
    tiletrain machine list | show NAME
    tiletrain simulate --machine big [--json] -- python train.py

A machine is a folder (tiletrain/sim/machine.py); a process runs on one machine when
TILETRAIN_SIMULATE names it (``tiletrain simulate`` sets it; ``tt.init(simulate=NAME)``
checks it)."""
from .calibrate import calibrate
from .machine import SCALING_RULE, Machine, MachineError, derive, describe, list_machines, load
from .run import Summary, UncalibratedKernel, simulate

__all__ = ["Machine", "MachineError", "SCALING_RULE", "load", "list_machines", "describe", "derive", "calibrate",
           "simulate", "Summary", "UncalibratedKernel"]
