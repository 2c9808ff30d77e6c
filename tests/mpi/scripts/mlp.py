"""A small MLP (two Linear layers, GELU, cross-entropy) trained 3 AdamW steps in float64 with
block-cyclic parameters and batch; saves losses and final parameters to
<out>/<tag>-rank<r>.npz.  Run alone and under mpirun: the results must agree."""
import sys

import numpy as np

import tiletrain as tt
import tiletrain.functional as F
from tiletrain import nn
from tiletrain.distribution import BlockCyclic
from tiletrain.optim import AdamW

out, tag = sys.argv[1], sys.argv[2]
tt.init()
r, w = tt.rank(), tt.world_size()
rng = np.random.default_rng(7)
x = rng.standard_normal((8, 6))
y = rng.integers(0, 4, size=8).astype(np.int64)
with tt.distribution.use(BlockCyclic()):  # parameters and data spread over the ranks
    fc1 = nn.Linear(6, 10, tiles=(5, 3), dtype=np.float64, rng=rng)
    fc2 = nn.Linear(10, 4, tiles=(2, 5), dtype=np.float64, rng=rng)
    X = tt.from_numpy(x, (4, 3))
    Y = tt.from_numpy(y, 4)
params = [fc1.weight, fc1.bias, fc2.weight, fc2.bias]
opt = AdamW(params, lr=1e-2, weight_decay=0.1)
losses = []
for step in range(3):
    opt.zero_grad()
    loss = F.cross_entropy(fc2(F.gelu(fc1(X))), Y)
    loss.backward()
    opt.step()
    losses.append(float(loss))
res = {"losses": np.array(losses), "owners_w1": fc1.weight.owners()}
for i, p in enumerate(params):
    res[f"p{i}"] = p.detach().numpy()
np.savez(f"{out}/{tag}-rank{r}.npz", **res)
print(f"rank {r}/{w} losses {losses}", flush=True)
tt.shutdown()
