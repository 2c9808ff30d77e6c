"""A float64 GPT (4 blocks) trained 2 AdamW steps of 4 micro-batches with each pipeline
schedule (tiletrain.pipeline.model.ModelPipeline, ranks as stages, argv[3] the mechanism),
or, alone (no MPI), with the plain gradient-accumulation loop; two schedules and the plain
loop with dropout too.  Saves the losses per
schedule to <out>/<tag>-rank<r>.npz."""
import sys
from dataclasses import replace

import numpy as np

import tiletrain as tt
from tiletrain.nn import GPT
from tiletrain.nn.gpt import GPTConfig, Tiling
from tiletrain.optim import AdamW
from tiletrain.parallel import place
from tiletrain.pipeline import schedules
from tiletrain.pipeline.model import ModelPipeline, pipeline_plan

out, tag, mechanism = sys.argv[1], sys.argv[2], sys.argv[3]
tt.init()
r, w = tt.rank(), tt.world_size()
cfg = GPTConfig(vocab_size=16, block_size=8, n_layer=4, n_head=2, n_embd=8, dropout=0.0)
tiling = Tiling(batch=2, time=4, width=4, hidden=16, vocab=8)
m = 4
rng = np.random.default_rng(3)
data = [[rng.integers(0, 16, size=(2, 9)) for _ in range(m)] for _ in range(2)]
SCHEDULES = {"gpipe": {}, "1f1b": {}, "interleaved-1f1b": {"virtual": 2}, "zb-h1": {}, "zb-v": {},
             "dualpipe-v": {}, "emergent": {}, "emergent-zb": {}, "emergent-v": {}, "seq1f1b": {"chunks": 2}}


def train(name, dropout=0.0):
    tt.manual_seed(5)
    model = GPT(replace(cfg, dropout=dropout), tiling, dtype=np.float64, seed=1)
    pp = None
    if name is not None:
        s = schedules.get(name, w, m, **SCHEDULES[name])
        place(model, pipeline_plan(model, s))
        pp = ModelPipeline(model, s, mechanism)
    opt = AdamW(list(model.parameters()), lr=1e-2, weight_decay=0.1)
    losses = []
    for batch in data:
        if pp is None:
            micro = []
            for ids in batch:
                loss = model.loss(ids[:, :-1], ids[:, 1:])
                tt.scale(loss, 1.0 / m).backward()
                micro.append(loss)
        else:
            micro = pp.step([ids[:, :-1] for ids in batch], [ids[:, 1:] for ids in batch]).losses
        opt.step()
        opt.zero_grad()
        losses.append([float(v) for v in micro])
    return np.array(losses)


DROPOUT = ("zb-v", "seq1f1b")   # with dropout 0.3 too: the masks follow layer, micro-batch, position
if w == 1:
    res = {"reference": train(None), "reference-dropout": train(None, 0.3)}
else:
    res = {name: train(name) for name in SCHEDULES} | {f"{n}-dropout": train(n, 0.3) for n in DROPOUT}
np.savez(f"{out}/{tag}-rank{r}.npz", **res)
print(f"rank {r}/{w} {mechanism}: " + ", ".join(f"{k} {v[-1, -1]:.6f}" for k, v in res.items()), flush=True)
tt.shutdown()
