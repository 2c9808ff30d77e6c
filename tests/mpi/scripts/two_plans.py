"""Two float64 GPTs in one script, placed differently -- A in data mode, then B in pipeline
mode (so B's plan is the current one) -- trained 2 AdamW steps each, alternating, each step
inside ``with using(its plan)``.  Saves both models' losses and, for one recorded step of A,
how many attention forwards and backward row statistics (a temporary the attention backward
makes in C) this rank ran, to <out>/<tag>-rank<r>.npz."""
import sys

import numpy as np

import tiletrain as tt
from tiletrain.nn import GPT
from tiletrain.nn.gpt import GPTConfig, Tiling
from tiletrain.optim import AdamW
from tiletrain.parallel import current_plan, n_replicas, place, replica, shards, using

out, tag = sys.argv[1], sys.argv[2]
tt.init(profile=True)
r, w = tt.rank(), tt.world_size()
cfg = GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=8)
tiling = Tiling(batch=1, time=4, width=4, hidden=16, vocab=8)
rng = np.random.default_rng(3)
data = [rng.integers(0, 16, size=(2, 9)) for _ in range(3)]

a = GPT(cfg, tiling, dtype=np.float64, seed=1)
pa = place(a, "data")
opt_a = AdamW(list(a.parameters()), lr=1e-2)
b = GPT(cfg, tiling, dtype=np.float64, seed=2)
pb = place(b, "pipeline")
opt_b = AdamW(list(b.parameters()), lr=1e-2)
assert current_plan() is pb


def step(model, opt, pl, ids):
    with using(pl):
        assert current_plan() is pl
        losses = []
        for d, xs, ys in shards(ids[:, :-1], ids[:, 1:]):
            with replica(d):
                loss = model.loss(xs, ys)
                tt.scale(loss, 1.0 / n_replicas()).backward()
            losses.append(loss)
        opt.step()
        opt.zero_grad()
    assert current_plan() is pb
    return float(np.mean([float(v) for v in losses]))


la, lb = [], []
for ids in data[:2]:
    la.append(step(a, opt_a, pa, ids))
    lb.append(step(b, opt_b, pb, ids))
with tt.trace.recording() as rec:
    la.append(step(a, opt_a, pa, data[2]))
t = rec.trace.tasks
attn = int(((t["kernel"] == "attn_fwd") & (t["rank"] == r)).sum())
rows = int(((t["kernel"] == "attn_bwd_rows") & (t["rank"] == r)).sum())
np.savez(f"{out}/{tag}-rank{r}.npz", a=np.array(la), b=np.array(lb), attn_fwd=attn, attn_bwd_rows=rows)
print(f"rank {r}/{w}: A {la}, B {lb}, attention forwards here {attn}", flush=True)
tt.shutdown()
