"""examples/cosmoflow.py's model, one float64 training step on 32^3 volumes split in space
(Spatial(dims=(2,), grid=(world,))): saves the loss and, for every activation of the forward
(each conv, leaky ReLU and pool output), the bytes each rank holds of it from its tile owners,
to <out>/<tag>-rank<r>.npz.  Run alone and under mpirun: the losses must agree and each rank
must hold its share of every activation.  Usage: cosmoflow_shares.py OUT TAG"""
import importlib.util
import sys
from pathlib import Path

import numpy as np

import tiletrain as tt
import tiletrain.functional as F
from tiletrain.data.volume import gaussian_random_fields
from tiletrain.distribution import Spatial

spec = importlib.util.spec_from_file_location("cosmoflow_example",
                                              Path(__file__).resolve().parents[3] / "examples" / "cosmoflow.py")
ex = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ex)

out, tag = sys.argv[1], sys.argv[2]
tt.init()
r, world = tt.rank(), tt.world_size()
model = ex.CosmoFlow(32, 4, np.float64, rng=np.random.default_rng(5))
x, y = gaussian_random_fields(2, 32, seed=5)
sp = Spatial(dims=(2,), grid=(world,))
X = tt.from_numpy(x.astype(np.float64), sp.tiles(x.shape), dist=sp)
Y = tt.from_numpy(y.astype(np.float64), (2, 4))
acts = {}
with tt.distribution.use(sp):
    h = X
    for i, conv in enumerate(model.convs):       # the model's forward, its activations kept
        acts[f"conv{i}"] = c = conv(h)
        acts[f"act{i}"] = a = ex.leaky_relu(c)
        acts[f"pool{i}"] = h = F.max_pool3d(a, 2)
    h = F.flatten(h, 1)
    loss = F.mse_loss(model.out(ex.leaky_relu(model.fc2(ex.leaky_relu(model.fc1(h))))), Y)
    loss.backward()
res = {"loss": np.array([float(loss)])}
for name, a in acts.items():
    per = np.zeros(world)
    for i, o in enumerate(a.owners().ravel()):
        per[o] += np.prod(a.traits.tile_shape_at(np.unravel_index(i, a.grid))) * 8
    res[f"share_{name}"] = per
    res[f"depth_{name}"] = np.array([a.shape[2]])
np.savez(f"{out}/{tag}-rank{r}.npz", **res)
print(f"rank {r}/{world} loss {res['loss'][0]}", flush=True)
tt.shutdown()
