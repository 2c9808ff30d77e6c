"""A 16-layer residual GCN, two training steps on 4 node chunks: alone, the plain loop
(reference_step); under mpirun -np 2, ModelPipeline with 1F1B over the two ranks (the model
placed by pipeline_plan).  Saves the losses and every gradient (as seen by this rank) to
<out>/<tag>-rank<r>.npz: they must agree."""
import sys

import numpy as np

import tiletrain as tt
from tiletrain.geometric import sbm
from tiletrain.geometric.nn import DeepGCN
from tiletrain.parallel import place
from tiletrain.pipeline import ModelPipeline, node_chunks, pipeline_plan, schedules
from tiletrain.pipeline.gnn import reference_step

out, tag = sys.argv[1], sys.argv[2]
tt.init()
d = sbm(48, 3, 0.25, 0.03, 5, seed=3)
chunks = node_chunks(d.x, d.edge_index, d.y, np.ones(48, bool), 4)
model = DeepGCN(5, 6, 3, 16, dtype=np.float64, rng=np.random.default_rng(0))
sch = schedules.get("1f1b", 2, 4)
pipe = None
if tt.world_size() > 1:
    place(model, pipeline_plan(model, sch))
    pipe = ModelPipeline(model, sch)
opt = tt.optim.SGD(model.parameters(), lr=0.05)
res = {}
for step in range(2):
    opt.zero_grad()
    losses = pipe.step(chunks).losses if pipe else reference_step(model, chunks)
    res[f"losses {step}"] = np.array([float(v) for v in losses])
    for n, p in model.named_parameters():
        res[f"grad {step} {n}"] = p.grad.numpy()
    opt.step()
tt.wait()
np.savez(f"{out}/{tag}-rank{tt.rank()}.npz", **res)
tt.shutdown()
