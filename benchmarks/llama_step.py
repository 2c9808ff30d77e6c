"""A full Llama training step (forward, backward, AdamW) in tiletrain and in PyTorch eager
(transformers' LlamaForCausalLM, SDPA attention), same weights and batch, alternating step by
step in one process; plus each framework's peak memory measured in a separate process (peak
RSS above the interpreter with its imports).  float32.

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
from _common import random_batch, reset_peak_rss, rss_mb, tiletrain_step  # noqa: E402

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
        m.load_state_dict({k: torch.tensor(v) for k, v in state_dict.items()}, strict=True)
    return m


def _adamw(opt_cls, params):
    return opt_cls(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)


def _torch_step(torch, m, opt, x, y) -> float:
    logits = m(x).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


def memory_probe(framework: str, size: str, tiles, ncpu: int) -> float:
    """Peak RSS (MiB) above the process with its imports: model, optimizer state and the
    activations of 3 training steps, in this fresh process."""
    import torch
    import transformers  # noqa: F401 - imported before the baseline, as tiletrain is
    import tiletrain as tt
    torch.set_num_threads(ncpu)
    s = SIZES[size]
    x, y = random_batch(s)
    reset_peak_rss()
    base = rss_mb("VmRSS")
    if framework == "torch":
        from tiletrain.nn.llama import hf_config_dict
        m = _torch_model(torch, hf_config_dict(_config(s)))
        opt = _adamw(torch.optim.AdamW, m.parameters())
        for _ in range(3):
            _torch_step(torch, m, opt, torch.tensor(x), torch.tensor(y))
    else:
        tt.init(ncpu=ncpu)
        m = _tiletrain_model(s, tiles)
        opt = _adamw(tt.optim.AdamW, m.parameters())
        for _ in range(3):
            tiletrain_step(m, opt, x, y)
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
    from _common import STEP_HEADERS, alternate_steps, environment, peak_memory, step_rows, table

    torch.set_num_threads(args.ncpu)
    print(environment())
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), transformers {transformers.__version__}; "
          f"tiletrain {tt.__version__} with {args.ncpu} CPU workers; float32; {args.reps} repetitions after one "
          "warm-up (medians)", flush=True)
    rows = []
    for size in args.sizes:
        s = SIZES[size]
        x, y = random_batch(s)
        xt, yt = torch.tensor(x), torch.tensor(y)
        with tt.init(ncpu=args.ncpu, sched=args.sched) as rt:
            m = _tiletrain_model(s, tiles)
            tm = _torch_model(torch, m.hf_config(), m.state_dict())  # the same weights
            topt = _adamw(torch.optim.AdamW, tm.parameters())
            opt = _adamw(tt.optim.AdamW, m.parameters())
            fpt, tokens = m.flops_per_token(s["T"]), s["B"] * s["T"]
            tmed, omed, (t0, o0) = alternate_steps(size, args.reps, lambda: _torch_step(torch, tm, topt, xt, yt),
                                                   lambda: tiletrain_step(m, opt, x, y))
            if abs(t0 - o0) > 1e-3 * abs(t0):
                print(f"  {size}: first-step losses differ: {t0} vs {o0}")
                return 1
            sched = rt.sched
        mem = {} if args.no_memory else peak_memory(__file__, size, args)
        rows += step_rows(size, "pytorch eager (transformers)", sched, tmed, omed, tokens, fpt, mem)
    print()
    print(table(STEP_HEADERS, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
