"""A full Llama training step (forward, backward, AdamW) in tiletrain, in PyTorch eager
(transformers' LlamaForCausalLM: nn.Linear layers, SDPA attention; torch.optim.AdamW(fused=True))
and in the same PyTorch model under torch.compile (inductor), same weights and batch,
alternating step by step in one process; plus each program's peak memory measured in a
separate process (peak RSS above the interpreter with its imports).  float32.  The compiled
model's first two steps (compilation) are timed apart ("compile s": their time beyond two
steps) and left out of its step time; the first-step losses of the three must agree (1e-3).

    python benchmarks/llama_step.py [--sizes small] [--reps 5] [--ncpu 2]

Sizes: small = 4 layers x 512, 8 heads, 2 kv heads, SwiGLU 1408, T=256, B=8, vocab 8192,
untied head; tiny = a quick check of the script.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import (probe_steps, random_batch, reset_peak_rss, rss_mb, tiletrain_adamw,  # noqa: E402
                     tiletrain_step, torch_adamw, torch_step)

SIZES = {
    "small": dict(layers=4, hidden=512, heads=8, kv_heads=2, inter=1408, T=256, B=8, vocab=8192),
    "tiny": dict(layers=2, hidden=128, heads=4, kv_heads=2, inter=352, T=64, B=4, vocab=512),
}


def _config(s):
    from tiletrain.nn import LlamaConfig
    return LlamaConfig(vocab_size=s["vocab"], hidden_size=s["hidden"], intermediate_size=s["inter"],
                       num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                       num_key_value_heads=s["kv_heads"], max_position_embeddings=s["T"])


def _tiletrain_model(s, tiles):
    from tiletrain.nn import Llama, Tiling
    tiling = Tiling() if tiles is None else Tiling(batch=tiles[0], time=tiles[1], width=tiles[2])
    return Llama(_config(s), tiling=tiling, dtype=np.float32, seed=0)


def _torch_model(torch, hf_config: dict, state_dict=None):
    import transformers
    m = transformers.LlamaForCausalLM(transformers.LlamaConfig(**hf_config)).float()
    m.config._attn_implementation = "sdpa"
    if state_dict is not None:
        m.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in state_dict.items()}, strict=True)
    return m


def _loss_fn(torch, m, compiled: bool):
    """loss(x, y) of the transformers model (logits, then cross-entropy), eager or through
    torch.compile (inductor) as one function."""
    def loss(x, y):
        logits = m(x).logits
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    return torch.compile(loss) if compiled else loss


def memory_probe(framework: str, size: str, tiles, ncpu: int) -> float:
    """Peak RSS (MiB) above the process with its imports: model, optimizer state and the
    activations of 3 training steps, in this fresh process (torch-compile: the peak after
    its compilation, probe_steps)."""
    import torch
    import transformers  # noqa: F401 - imported before the baseline, as tiletrain is
    import tiletrain as tt
    torch.set_num_threads(ncpu)
    s = SIZES[size]
    x, y = random_batch(s)
    reset_peak_rss()
    base = rss_mb("VmRSS")
    if framework.startswith("torch"):
        from tiletrain.nn.llama import hf_config_dict
        m = _torch_model(torch, hf_config_dict(_config(s)))
        opt = torch_adamw(torch, m.parameters())
        loss_fn = _loss_fn(torch, m, framework == "torch-compile")
        xt, yt = torch.tensor(x), torch.tensor(y)
        probe_steps(lambda: torch_step(loss_fn, opt, xt, yt), framework == "torch-compile")
    else:
        tt.init(ncpu=ncpu)
        m = _tiletrain_model(s, tiles)
        opt = tiletrain_adamw(tt, m.parameters())
        probe_steps(lambda: tiletrain_step(m, opt, x, y), False)
        tt.wait()
    return rss_mb("VmHWM") - base


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["small"], choices=list(SIZES))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ncpu", type=int, default=2, help="tiletrain CPU workers and PyTorch threads")
    ap.add_argument("--sched", default=None)
    ap.add_argument("--tiles", default=None, help="B,T,C tile sizes (default: Tiling())")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    ap.add_argument("--memory-probe", nargs=2, metavar=("FRAMEWORK", "SIZE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    tiles = tuple(int(v) for v in args.tiles.split(",")) if args.tiles else None
    if args.memory_probe:
        print(json.dumps({"peak_mb": memory_probe(args.memory_probe[0], args.memory_probe[1], tiles, args.ncpu)}))
        return 0

    import torch
    import transformers
    import tiletrain as tt
    from _common import STEP_HEADERS, environment, peak_memory, step_comparison, step_rows, table

    torch.set_num_threads(args.ncpu)
    print(environment())
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads; AdamW fused=True; compiled: "
          f"torch.compile, inductor), transformers {transformers.__version__}; tiletrain {tt.__version__} "
          f"with {args.ncpu} CPU workers; float32; {args.reps} repetitions after one warm-up (medians), "
          "alternating", flush=True)
    rows = []
    for size in args.sizes:
        s = SIZES[size]
        x, y = random_batch(s)
        xt, yt = torch.tensor(x), torch.tensor(y)
        with tt.init(ncpu=args.ncpu, sched=args.sched) as rt:   # the model's weights are drawn by tiletrain
            m = _tiletrain_model(s, tiles)
            sd, hf = m.state_dict(), m.hf_config()
            opt = tiletrain_adamw(tt, m.parameters())
            fpt, tokens = m.flops_per_token(s["T"]), s["B"] * s["T"]
            tt.wait()
            tm, cm = _torch_model(torch, hf, sd), _torch_model(torch, hf, sd)   # the same weights, 2 copies
            res = step_comparison(size, args.reps, torch, (tm, cm), _loss_fn, xt, yt,
                                  lambda: tiletrain_step(m, opt, x, y))
            if res is None:
                return 1
            sched = rt.sched
        mem = {} if args.no_memory else peak_memory(__file__, size, args)
        rows += step_rows(size, "pytorch eager (transformers)", sched, *res, tokens, fpt, mem)
    print()
    print(table(STEP_HEADERS, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
