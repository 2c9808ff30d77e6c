"""A collective checkpoint save whose write fails on rank 0 (disk full after the header):
every rank raises CheckpointWriteError, the ranks stay in step (rank 0 still receives every
tile the others send), and the next save succeeds; then save_pretrained (collective).
argv: out tag path.  Saves <out>/<tag>-rank<r>.json: the first save's error and when this rank
raised it (error_at; rank 0 prints FAULT-AT when its write fails), and whether the second save's
file holds the model's values (step, equal; hf_equal: the save_pretrained
folder's)."""
import contextlib
import errno
import json
import sys
import time

import numpy as np

import tiletrain as tt
import tiletrain.checkpoint as ck
from tiletrain.nn import GPT, GPTConfig
from tiletrain.nn.gpt import Tiling
from tiletrain.nn.pretrained import model_tensors
from tiletrain.parallel import place

out, tag, path = sys.argv[1:4]
tt.init(ncpu=1)
model = GPT(GPTConfig(vocab_size=512, block_size=16, n_layer=2, n_head=2, n_embd=64),
            tiling=Tiling(width=32, hidden=64, vocab=128), seed=0)
place(model, "data")
res = {}

real_atomic_file = ck._atomic_file


class FullDisk:
    def __init__(self, f):
        self.f, self.writes = f, 0

    def write(self, data):
        self.writes += 1
        if self.writes > 1:  # the header, then nothing
            print(f"FAULT-AT {time.time():.3f}", file=sys.stderr, flush=True)
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.f.write(data)

    def __getattr__(self, name):
        return getattr(self.f, name)


@contextlib.contextmanager
def full_disk(p, _before_rename=None):
    with real_atomic_file(p, _before_rename) as f:
        yield FullDisk(f)


if tt.rank() == 0:
    ck._atomic_file = full_disk
try:
    ck.save(path, model_tensors(model), {"step": 1})
    res["error"] = None
except ck.CheckpointWriteError as exc:
    res["error"], res["error_at"] = str(exc), time.time()
ck._atomic_file = real_atomic_file
ck.save(path, model_tensors(model), {"step": 2})
stored, meta = ck.load(path)
res["step"] = meta["step"]
res["equal"] = all(np.array_equal(p.detach().numpy(), stored[n]) for n, p in model.named_parameters())
folder = model.save_pretrained(f"{out}/{tag}-hf")  # collective too: rank 0 writes the folder
stored = ck.SafetensorsFile(folder / "model.safetensors")
res["hf_equal"] = all(np.array_equal(p.detach().numpy(), stored[n].numpy()) for n, p in model.named_parameters())
with open(f"{out}/{tag}-rank{tt.rank()}.json", "w") as f:
    json.dump(res, f)
tt.shutdown()
