"""A tiny float64 GPT trained 3 AdamW steps; argv[3]: 'rank0' (default distribution: every
tile on rank 0) or 'cyclic' (model built and trained under BlockCyclic(): tiles dealt over
the ranks along their first axis).  Saves the losses to <out>/<tag>-rank<r>.npz."""
import sys

import numpy as np

import tiletrain as tt
from tiletrain.distribution import BlockCyclic, default, use
from tiletrain.nn import GPT
from tiletrain.nn.gpt import GPTConfig, Tiling
from tiletrain.optim import AdamW

out, tag, mode = sys.argv[1], sys.argv[2], sys.argv[3]
tt.init()
r, w = tt.rank(), tt.world_size()
dist = BlockCyclic() if mode == "cyclic" else default()
cfg = GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=8)
rng = np.random.default_rng(3)
ids = rng.integers(0, 16, size=(4, 9))
losses = []
with use(dist):
    model = GPT(cfg, Tiling(batch=2, time=4, width=4, hidden=16, vocab=8), dtype=np.float64, seed=1)
    opt = AdamW(list(model.parameters()), lr=1e-2, weight_decay=0.1)
    for step in range(3):
        opt.zero_grad()
        loss = model.loss(ids[:, :-1], ids[:, 1:])
        loss.backward()
        opt.step()
        losses.append(float(loss))
np.savez(f"{out}/{tag}-rank{r}.npz", losses=np.array(losses),
         wte=model.transformer.wte.weight.detach().numpy(), owners=model.transformer.wte.weight.owners())
ncpu = sum(wk.kind == "cpu" for wk in tt.current().workers())
print(f"rank {r}/{w} {mode} losses {losses} cpu_workers {ncpu}", flush=True)
tt.shutdown()
