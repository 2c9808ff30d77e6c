"""`tiletrain train` (TrainArgs, from Python) on a tiny GPT for a few steps.
argv: out tag [key=value ...] (TrainArgs fields: dist, dtype, data, n_layer, batch, steps,
stop_after, ckpt_dir, resume, mem_limit, ooc_dir).  Saves to <out>/<tag>-rank<r>.npz: the train losses, how many
times this rank wrote a checkpoint, the tasks this rank's workers executed, and the owners
of a few parameters (first/last block, wte).  Tag 'bad' (options that are rejected) prints
FAULT-AT before train()."""
import sys
import time

import numpy as np

import tiletrain as tt
import tiletrain.checkpoint as ck
import tiletrain.parallel as par
from tiletrain.distribution import rank
from tiletrain.train import TrainArgs, train

out, tag = sys.argv[1:3]
kw = dict(n_layer=2, n_head=2, n_embd=16, seq_len=8, batch=4, steps=4, warmup=1, eval_every=0, sample_tokens=0,
          progress=False, val_fraction=0.1, lr=3e-3, tiles=(2, 8, 8), seed=5)
for item in sys.argv[3:]:
    k, v = item.split("=", 1)
    kw[k] = {"data": lambda s: [s], "resume": lambda s: s == "1", "ckpt_dir": str, "dist": str, "stages": int,
             "dtype": str, "mem_limit": str, "ooc_dir": str}.get(k, int)(v)
if "ckpt_dir" not in kw:
    kw["run_dir"] = f"{out}/{tag}-run"  # metrics.jsonl and run.json (rank 0) go beside the outputs
info = {"saves": 0, "executed": 0, "owners": {}}

_save, _shutdown, _place = ck.save, tt.shutdown, par.place


def counting_save(*a, **k):
    info["saves"] += 1
    return _save(*a, **k)


def recording_shutdown():
    rt = tt.runtime.current() if tt.runtime.is_initialized() else None
    if rt is not None:
        info["executed"] = sum(rt.executed_tasks().values())
    _shutdown()


def recording_place(model, mode, stages=None):
    _place(model, mode, stages)
    tr = model.transformer
    for name, p in (("wte", tr.wte.weight), ("h0", tr.h[0].attn.c_attn.weight),
                    ("hlast", tr.h[-1].mlp.c_proj.weight), ("ln_f", tr.ln_f.weight)):
        info["owners"][name] = int(p.owners().reshape(-1)[0])


ck.save, tt.shutdown, par.place = counting_save, recording_shutdown, recording_place
if tag == "bad":  # train() rejects the options: the test times the job's exit from here
    print(f"FAULT-AT {time.time():.3f}", file=sys.stderr, flush=True)
res = train(TrainArgs(**kw))
np.savez(f"{out}/{tag}-rank{rank()}.npz", losses=np.array(res.train_losses), saves=info["saves"],
         executed=info["executed"], **{f"owner_{k}": v for k, v in info["owners"].items()})
print(f"rank {rank()} {kw.get('dist', 'single')} losses {res.train_losses}", flush=True)
