"""One rank fails mid-flow while the others wait for it in a collective read; the job must
exit non-zero quickly.  argv[1]: 'raise' (a Python exception) or 'kill' (SIGKILL)."""
import os
import signal
import sys
import time

import numpy as np

import tiletrain as tt
from tiletrain.distribution import BlockCyclic

mode = sys.argv[1]
tt.init()
r, w = tt.rank(), tt.world_size()
A = tt.from_numpy(np.ones((6, 4)), (2, 2), dist=BlockCyclic())
B = tt.add(A, A)
if r == w - 1:
    print(f"FAULT-AT {time.time():.3f}", file=sys.stderr, flush=True)  # the test times the exit from here
    if mode == "raise":
        raise ValueError(f"deliberate failure on rank {r}")
    os.kill(os.getpid(), signal.SIGKILL)
print(B.numpy().sum(), flush=True)  # the other ranks wait here for the failed one
print(float(tt.sum(B)), flush=True)
tt.shutdown()
