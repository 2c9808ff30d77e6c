"""Pipelines without a flush on 2 stage modules in float64 (ModelPipeline, optimizer=): pb
(SC+LWP, stored weights; plain, EMA weights), local (with its head) and 1f1b, 8
micro-batches; saves the losses per schedule to <out>/<tag>-rank<r>.npz.  Run alone (2 worker groups) and under mpirun -np 2 (stage s on
rank s): the losses must agree."""
import sys

import numpy as np

import tiletrain as tt
import tiletrain.functional as F
from tiletrain.distribution import SingleRank, use
from tiletrain.nn import Linear, LocalHeads, ReLU, Sequential
from tiletrain.optim import SGD
from tiletrain.pipeline import ModelPipeline, schedules

out, tag = sys.argv[1], sys.argv[2]
tt.init(ncpu=2)
mpi = tt.world_size() > 1
rng = np.random.default_rng(0)
xs, ys = rng.normal(size=(8, 4, 6)), rng.integers(0, 3, size=(8, 4))


def loss_fn(logits, y):
    return F.cross_entropy(logits, tt.from_numpy(np.asarray(y, np.int64)))


def stages(with_head=False):
    r = np.random.default_rng(1)
    parts = []
    for s, make in enumerate([lambda: Sequential(Linear(6, 8, dtype=np.float64, rng=r), ReLU()),
                              lambda: Linear(8, 3, dtype=np.float64, rng=r)]):
        with use(SingleRank(s)) if mpi else use(SingleRank(0)):
            parts.append(make())
    head = None
    if with_head:
        with use(SingleRank(0)):
            head = LocalHeads([8], 3, dtype=np.float64, rng=np.random.default_rng(2))
    return parts, head


res = {}
for key, name, comp, weights in [("pb-sc-lwp", "pb", "sc+lwp", "stored"), ("pb-ema", "pb", None, "ema"),
                                 ("local", "local", None, "stored"), ("1f1b", "1f1b", None, "stored")]:
    parts, head = stages(name == "local")
    pp = ModelPipeline(parts, schedules.get(name, 2, 8), optimizer=lambda ps, d: SGD(ps, lr=0.1, momentum=0.9,
                       compensation=comp, delay=d), loss_fn=loss_fn, heads=head, weights=weights)
    losses = pp.step(xs, ys).losses
    losses += pp.step(xs[::-1], ys[::-1]).losses
    res[key] = np.array([float(v) for v in losses])
np.savez(f"{out}/{tag}-rank{tt.rank()}.npz", **res)
print(f"rank {tt.rank()}: {res}", flush=True)
tt.shutdown()
