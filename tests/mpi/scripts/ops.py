"""Tensor ops on block-cyclic tensors; saves every result (as seen by this rank) to
<out>/<tag>-rank<r>.npz.  Run alone and under mpirun: the results must agree."""
import sys

import numpy as np

import tiletrain as tt
from tiletrain.distribution import BlockCyclic, SingleRank

out, tag = sys.argv[1], sys.argv[2]
rt = tt.init()
r, w = tt.rank(), tt.world_size()
rng = np.random.default_rng(42)
a, b = rng.standard_normal((7, 5)), rng.standard_normal((7, 5))
m = rng.standard_normal((5, 6))
row = BlockCyclic((w, 1))
col = BlockCyclic((1, w))
res = {}
A = tt.from_numpy(a, (3, 2), dist=BlockCyclic())      # 1-D cyclic over the first axis
B = tt.from_numpy(b, (3, 2), dist=col)                # another layout: StarPU-MPI moves tiles
M = tt.from_numpy(m, (2, 4), dist=row)
res["owners_A"] = A.owners()
res["owners_B"] = B.owners()
res["add"] = tt.add(A, B, alpha=2.0).numpy()
res["mul"] = (A * B).numpy()
res["matmul"] = tt.matmul(A, M).numpy()               # k split over 3 tiles, owners mixed
res["matmul_tn"] = tt.matmul(A, B, transpose_a=True).numpy()
res["sum0"] = tt.sum(A, dim=0).numpy()
res["sum1"] = tt.sum(B, dim=1).numpy()
res["sum_all"] = np.array(float(tt.sum(A)))
# a tensor owned by the last rank only, combined with distributed ones
L = tt.from_numpy(b, (3, 2), dist=SingleRank(w - 1))
res["add_last"] = tt.add(L, A).numpy()
# numpy-written tensor rewritten in place by from-numpy-like writes after use
with tt.distribution.use(BlockCyclic((w, 1))):
    Z = tt.zeros((7, 5), tiles=(3, 2), dtype=np.float64)
    res["owners_Z"] = Z.owners()
    res["z_plus_a"] = tt.add(Z, A).numpy()
tt.wait()
res["executed"] = np.array(sum(rt.executed_tasks().values()))
np.savez(f"{out}/{tag}-rank{r}.npz", **res)
print(f"rank {r}/{w} ok", flush=True)
tt.shutdown()
