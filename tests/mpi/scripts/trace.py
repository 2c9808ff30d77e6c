"""Task records under mpirun (profile=True): each rank records the tasks it runs, with its
rank, and the product is right.  argv: out tag."""
import sys

import numpy as np

import tiletrain as tt
from tiletrain.distribution import BlockCyclic

out, tag = sys.argv[1:3]
rt = tt.init(profile=True)
rng = np.random.default_rng(0)
a, b = rng.standard_normal((64, 48)), rng.standard_normal((48, 32))
A = tt.from_numpy(a, (16, 16), dist=BlockCyclic())
B = tt.from_numpy(b, (16, 16), dist=BlockCyclic())
C = tt.matmul(A, B)
got = C.numpy()
tr = rt.records()
np.savez(f"{out}/{tag}-rank{tt.rank()}.npz", err=np.abs(got - a @ b).max(), ranks=tr.tasks["rank"],
         kernels=tr.tasks["kernel"], worker_ranks=np.array([w["rank"] for w in tr.workers]))
tt.shutdown()
print(f"rank {tt.rank()}: {len(tr)} records", flush=True)
