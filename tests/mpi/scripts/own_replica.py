"""Data mode under mpirun: a float64 GPT with dropout trained 3 AdamW steps of 2
micro-batches through ``parallel.shard_backward``, each rank submitting its own replica only
(argv[3] 'own', the default walk) or every rank walking every replica ('all').  argv[3]
'stray': the model's loss also reads a tensor of rank 0 that is neither a parameter nor a
buffer (the shard on rank 1 cannot get it); 'read': the loss is read inside the shard's
forward (both print FAULT-AT when the faulty loss is called: the test times the job's exit
from the first).  Saves the losses, the parameters and the tag counter to
<out>/<tag>-rank<r>.npz."""
import sys
import time

import numpy as np

import tiletrain as tt
from tiletrain import parallel
from tiletrain._ffi import lib
from tiletrain.nn import GPT
from tiletrain.nn.gpt import GPTConfig, Tiling
from tiletrain.optim import AdamW

out, tag, mode = sys.argv[1], sys.argv[2], sys.argv[3]
tt.init()
r = tt.rank()
parallel.OWN_REPLICA_ONLY = mode != "all"
cfg = GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=8, dropout=0.25)
model = GPT(cfg, Tiling(batch=1, time=4, width=4, hidden=16, vocab=8), dtype=np.float64, seed=1)
parallel.place(model, "data")
opt = AdamW(list(model.parameters()), lr=1e-2, weight_decay=0.1)
rng = np.random.default_rng(3)
if mode in ("stray", "read"):
    extra = tt.from_numpy(np.ones(1)) if mode == "stray" else None
    inner = model.loss

    def loss(xs, ys):
        print(f"FAULT-AT {time.time():.3f}", file=sys.stderr, flush=True)
        v = inner(xs, ys)
        if mode == "read":
            float(v)
            return v
        return tt.add(v, tt.sum(extra))   # extra lives on rank 0
    model.loss = loss
tt.manual_seed(5)
losses = []
for step in range(3):
    ids = rng.integers(0, 16, size=(4, 9))
    micro = []
    for k in range(2):
        part = ids[2 * k:2 * k + 2]
        micro += parallel.shard_backward(model, part[:, :-1], part[:, 1:], k, 2)
    opt.step()
    opt.zero_grad()
    losses.append([float(v) for v in micro])
params = {n: p.detach().numpy() for n, p in model.named_parameters()}
np.savez(f"{out}/{tag}-rank{r}.npz", losses=np.array(losses), next_tag=lib.tt_mpi_next_tag(), **params)
print(f"rank {r} {mode} losses {losses}", flush=True)
tt.shutdown()
