"""Checkpoint save and load of a GPT placed in data mode (parameters spread over the ranks),
under a memory limit with a disk node: each phase's peak RSS growth on this rank.
argv: out tag mem_limit ooc_dir path.  Prints "RESULT <json>" and saves <out>/<tag>-rank<r>.json:
save/load (bytes of peak RSS growth), model_bytes, owned_bytes (this rank's parameters), used
(StarPU's bytes); the loaded model is saved again to <path>.again."""
import json
import sys

import tiletrain as tt
import tiletrain.checkpoint as ck
from tiletrain.nn import GPT, GPTConfig
from tiletrain.nn.gpt import Tiling
from tiletrain.nn.pretrained import model_tensors
from tiletrain.parallel import place
from tiletrain.testing.memory import peak_growth

# as tests/memory/test_streaming.py: 21 M parameters, 84 MB in float32
CONFIG = GPTConfig(vocab_size=16384, block_size=64, n_layer=4, n_head=4, n_embd=512)
TILING = Tiling(width=256, hidden=512, vocab=256)


out, tag, limit, ooc, path = sys.argv[1:6]
if len(sys.argv) > 6:  # a small model (quick checks)
    CONFIG = GPTConfig(vocab_size=512, block_size=16, n_layer=2, n_head=2, n_embd=64)
    TILING = Tiling(width=32, hidden=64, vocab=128)
tt.init(ncpu=1, mem_limit=None if limit == "none" else limit, ooc_dir=None if ooc == "none" else ooc)
res = {}


def phase(name, fn):
    print(f"rank {tt.rank()}: {name}", flush=True)
    result, res[name] = peak_growth(fn)  # its first wait is collective: every rank starts quiet
    return result


model = GPT(CONFIG, tiling=TILING, seed=0)
place(model, "data")
res["model_bytes"] = sum(p.numel() * 4 for p in model.parameters())
res["owned_bytes"] = sum(int((p.owners() == tt.rank()).mean() * p.numel()) * 4 for p in model.parameters())
phase("save", lambda: ck.save(path, model_tensors(model), {"step": 1}))
del model
other = GPT(CONFIG, tiling=TILING, seed=1)
place(other, "data")
phase("load", lambda: other.load_state_dict(ck.load(path, lazy=True)[0]))
# the loaded model saved again (streamed too: Tensor.numpy() on every parameter would leave a
# copy of every tile on every rank, more than the cap): the caller compares the two files
ck.save(path + ".again", model_tensors(other), {"step": 1})
res["used"] = tt.runtime.current().memory()["starpu_used_bytes"]
print("RESULT", json.dumps(res), flush=True)
with open(f"{out}/{tag}-rank{tt.rank()}.json", "w") as f:
    json.dump(res, f)
tt.shutdown()
