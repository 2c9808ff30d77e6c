"""`tiletrain train` (TrainArgs, from Python) on a tiny float64 GPT with dropout: 2 steps of
4 micro-batches.  argv: out tag data [key=value ...] (TrainArgs fields: dist, schedule, stages,
micro_batches).  Saves the train losses to <out>/<tag>-rank<r>.npz."""
import sys

import numpy as np

from tiletrain.distribution import rank
from tiletrain.train import TrainArgs, train

out, tag, data = sys.argv[1:4]
kw = dict(n_layer=2, n_head=2, n_embd=16, seq_len=8, batch=2, micro_batches=4, steps=2, warmup=1, eval_every=0,
          sample_tokens=0, progress=False, val_fraction=0.1, lr=3e-3, tiles=(2, 8, 8), seed=5, dtype="float64",
          dropout=0.1, data=[data], run_dir=f"{out}/{tag}-run")
for item in sys.argv[4:]:
    k, v = item.split("=", 1)
    kw[k] = int(v) if k in ("stages", "micro_batches", "ncpu") else v
res = train(TrainArgs(**kw))
np.savez(f"{out}/{tag}-rank{rank()}.npz", losses=np.array(res.train_losses))
print(f"rank {rank()} {kw.get('dist', 'single')} {kw.get('schedule', '')} losses {res.train_losses}", flush=True)
