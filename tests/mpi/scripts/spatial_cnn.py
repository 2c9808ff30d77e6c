"""A small float64 3D CNN (conv3d -> batch norm -> relu -> max pool -> conv3d -> relu -> avg
pool -> linear, MSE) trained 3 SGD steps with its input volumes split in space over the ranks
(tiletrain.distribution.Spatial, owner-computes); saves the losses, every activation's
bytes per rank (from its tile owners), the halo bytes and the final parameters to
<out>/<tag>-rank<r>.npz.  Run alone and under mpirun: the results must agree.
Usage: spatial_cnn.py OUT TAG [DIMS GRID], e.g. "2" "2" (split D over 2 ranks) or "0,2" "2,2"."""
import sys

import numpy as np

import tiletrain as tt
import tiletrain.functional as F
from tiletrain import nn
from tiletrain.distribution import Spatial
from tiletrain.optim import SGD
from tiletrain.runtime.kernels import conv_halo_stats

out, tag = sys.argv[1], sys.argv[2]
dims = tuple(int(v) for v in (sys.argv[3] if len(sys.argv) > 3 else "2").split(","))
grid = tuple(int(v) for v in (sys.argv[4] if len(sys.argv) > 4 else "2").split(","))
tt.init()
r, world = tt.rank(), tt.world_size()
rng = np.random.default_rng(11)
N, S = 4, 10
x = rng.standard_normal((N, 1, S, S, S))
y = rng.standard_normal((N, 3))
conv1 = nn.Conv3d(1, 4, 3, padding=1, dtype=np.float64, rng=rng)
bn = nn.BatchNorm3d(4, dtype=np.float64)
conv2 = nn.Conv3d(4, 4, 3, padding=1, dtype=np.float64, rng=rng)
head = nn.Linear(4 * 2 * 2 * 2, 3, dtype=np.float64, rng=rng)
params = [conv1.weight, conv1.bias, bn.weight, bn.bias, conv2.weight, conv2.bias, head.weight, head.bias]
opt = SGD(params, lr=0.05, momentum=0.9)
sp = Spatial(dims=dims, grid=grid)
X = tt.from_numpy(x, sp.tiles(x.shape), dist=sp)
Y = tt.from_numpy(y, (X.tiles[0], 3))            # tiled like the head output (batch tiles)
losses, acts = [], {}
for step in range(3):
    opt.zero_grad()
    with tt.distribution.use(sp):                    # every activation placed by its tiles
        a1 = conv1(X)                                 # (N, 4, 10, 10, 10)
        a2 = F.relu(bn(a1))
        a3 = F.max_pool3d(a2, 2)                      # (N, 4, 5, 5, 5)
        a4 = F.relu(conv2(a3))
        a5 = F.avg_pool3d(a4, 2, ceil_mode=True)      # (N, 4, 3, 3, 3) -> crop to 2^3 below
        a6 = F.avg_pool3d(a5, 2, 1)                   # (N, 4, 2, 2, 2)
        loss = F.mse_loss(head(F.flatten(a6, 1)), Y)
        loss.backward()
    opt.step()
    losses.append(float(loss))
    if step == 0:
        acts = {"a1": a1, "a2": a2, "a3": a3, "a4": a4}
res = {"losses": np.array(losses)}
for name, a in acts.items():  # bytes of every activation held by each rank, from its tile owners
    own = a.owners().ravel()
    per = np.zeros(max(world, 1))
    for i, o in enumerate(own):
        idx = np.unravel_index(i, a.grid)
        per[o] += np.prod(a.traits.tile_shape_at(idx)) * 8
    res[f"owners_{name}"] = per
for i, p in enumerate(params):
    res[f"p{i}"] = p.detach().numpy()
res["halo"] = np.array(conv_halo_stats())
np.savez(f"{out}/{tag}-rank{r}.npz", **res)
print(f"rank {r}/{world} losses {losses} halo bytes {res['halo'][0]} slabs {res['halo'][1]}", flush=True)
tt.shutdown()
