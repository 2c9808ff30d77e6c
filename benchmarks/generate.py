"""Greedy generation, tiletrain (key/value cache) against transformers' ``generate`` on the
same Hugging Face folder in the same run: a 6 x 384 GPT-2 and a Llama of similar size
(6 x 384, 6 heads, 2 KV heads, SwiGLU 1024), random weights, float32, 2 threads each,
prompt 16 tokens, --new tokens, batch 1 and 8; tokens/s (new tokens x batch / time), medians
of --reps runs after a warm-up, whether both produced the same tokens, and the tile tasks
one tiletrain decode step submits.

    python benchmarks/generate.py [--new 256] [--batches 1 8] [--reps 3] [--models gpt2 llama]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import environment, median, table  # noqa: E402


def _folders(root, models):
    import torch
    import transformers
    torch.manual_seed(0)
    made = {}
    if "gpt2" in models:
        cfg = transformers.GPT2Config(vocab_size=8192, n_positions=512, n_layer=6, n_head=6, n_embd=384,
                                      bos_token_id=0, eos_token_id=0)
        transformers.GPT2LMHeadModel(cfg).save_pretrained(os.path.join(root, "gpt2"))
        made["gpt2 6x384"] = os.path.join(root, "gpt2")
    if "llama" in models:
        cfg = transformers.LlamaConfig(vocab_size=8192, hidden_size=384, intermediate_size=1024, num_hidden_layers=6,
                                       num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=512,
                                       bos_token_id=0, eos_token_id=0)
        transformers.LlamaForCausalLM(cfg).save_pretrained(os.path.join(root, "llama"))
        made["llama 6x384 gqa"] = os.path.join(root, "llama")
    return made


def tasks_per_step(model, prompt) -> float:
    """Tile tasks one decode step submits: (tasks of 9 new tokens - tasks of 1) / 8."""
    from tiletrain._ffi import lib
    from tiletrain.runtime.kernels import kernel_id, kernel_names

    def count(new):
        before = sum(lib.tt_kernel_ntasks(kernel_id(k)) for k in kernel_names())
        model.generate(prompt, new, temperature=0)
        return sum(lib.tt_kernel_ntasks(kernel_id(k)) for k in kernel_names()) - before
    return (count(9) - count(1)) / 8


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--new", type=int, default=256, help="new tokens per sequence (default: 256)")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ncpu", type=int, default=2)
    ap.add_argument("--sched", default=None, help="StarPU scheduling policy (default: the one `tiletrain "
                                                  "generate` starts with, tiletrain.inference.DECODE_SCHED)")
    ap.add_argument("--models", nargs="+", default=["gpt2", "llama"], choices=["gpt2", "llama"])
    ap.add_argument("--draft-tokens", type=int, default=4, help="speculative decoding rows: tokens drafted per "
                                                                "round (0: no such rows)")
    args = ap.parse_args()
    from tiletrain.inference import DECODE_SCHED
    args.sched = args.sched or DECODE_SCHED
    import torch
    import transformers
    import tiletrain as tt
    torch.set_num_threads(args.ncpu)
    print(environment())
    print(f"torch {torch.__version__} ({args.ncpu} threads), transformers {transformers.__version__}; tiletrain with "
          f"{args.ncpu} CPU workers ({args.sched}); float32; prompt 16, {args.new} new "
          f"tokens; median of {args.reps} after a warm-up\n")
    rows = []
    with tempfile.TemporaryDirectory() as root, tt.init(ncpu=args.ncpu, sched=args.sched):
        for name, folder in _folders(root, args.models).items():
            hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
            m = tt.nn.from_pretrained(folder)
            for B in args.batches:
                prompt = np.random.default_rng(B).integers(1, 8192, (B, 16))
                times = {"transformers": [], "tiletrain": []}
                outs = {}
                for rep in range(args.reps + 1):
                    tt.wait()
                    t0 = time.perf_counter()
                    with torch.no_grad():
                        outs["transformers"] = hf.generate(torch.tensor(prompt), max_new_tokens=args.new,
                                                           do_sample=False, pad_token_id=0, eos_token_id=None).numpy()
                    t1 = time.perf_counter()
                    outs["tiletrain"] = m.generate(prompt, args.new, temperature=0)
                    t2 = time.perf_counter()
                    if rep:
                        times["transformers"].append(t1 - t0)
                        times["tiletrain"].append(t2 - t1)
                    print(f"  {name} batch {B} run {rep}: transformers {t1 - t0:.2f} s, tiletrain {t2 - t1:.2f} s",
                          flush=True)
                same = bool((outs["transformers"] == outs["tiletrain"]).all())
                th, ot = median(times["transformers"]), median(times["tiletrain"])
                steps = {"transformers": "", "tiletrain (kv cache)": f"{tasks_per_step(m, prompt):.0f}"}
                for prog, t in (("transformers", th), ("tiletrain (kv cache)", ot)):
                    rows.append([name, B, prog, f"{t:.2f}", f"{args.new * B / t:.1f}", f"{th / t:.2f}",
                                 "yes" if same else "no", steps[prog]])
    print()
    print(table(["model", "batch", "program", "seconds", "tokens/s", "speed vs transformers", "same tokens",
                 "tasks per decode step"], rows))
    if args.draft_tokens:
        speculative(args)
    return 0


def speculative(args) -> None:
    """Speculative greedy decoding of the 6 x 384 GPT-2 at batch 1 with a 1-layer draft, against
    plain greedy: two drafts, the target's first layer with its embeddings (agrees often, a
    stand-in for a trained small model) and a random 1-layer model (agrees almost never: the
    worst case).  Speed-up over plain greedy, drafted tokens accepted per round, same tokens."""
    import dataclasses
    import tiletrain as tt
    from tiletrain.inference import generate
    from tiletrain.nn import GPT
    k = args.draft_tokens
    rows = []
    with tempfile.TemporaryDirectory() as root, tt.init(ncpu=args.ncpu, sched=args.sched):
        m = tt.nn.from_pretrained(_folders(root, ["gpt2"])["gpt2 6x384"])
        cfg = dataclasses.replace(m.config, n_layer=1)
        first = GPT(cfg)
        first.load_state_dict({n: v for n, v in m.state_dict().items() if not n.startswith("transformer.h.")
                               or n.startswith("transformer.h.0.")}, strict=False)
        prompt = np.random.default_rng(1).integers(1, 8192, (1, 16))
        runs = {"plain greedy": None, "draft: target's layer 0": first, "draft: random 1-layer": GPT(cfg, seed=5)}
        times, outs, accepted = {n: [] for n in runs}, {}, {}
        for rep in range(args.reps + 1):
            for name, draft in runs.items():
                tt.wait()
                t0 = time.perf_counter()
                outs[name], stats = generate(m, prompt, args.new, temperature=0, draft=draft, num_draft_tokens=k,
                                             return_stats=True)
                if rep:
                    times[name].append(time.perf_counter() - t0)
                accepted[name] = stats.mean_accepted
                print(f"  speculative: {name} run {rep}: {time.perf_counter() - t0:.2f} s", flush=True)
        base = median(times["plain greedy"])
        for name in runs:
            t = median(times[name])
            rows.append([name, f"{t:.2f}", f"{args.new / t:.1f}", f"{base / t:.2f}",
                         f"{accepted[name]:.2f} of {k}" if runs[name] is not None else "-",
                         "yes" if (outs[name] == outs["plain greedy"]).all() else "no"])
    print(f"\nspeculative decoding, gpt2 6x384, batch 1, {args.new} new tokens, {k} drafted per round:")
    print(table(["run", "seconds", "tokens/s", "speed-up", "accepted per round", "same tokens"], rows))


if __name__ == "__main__":
    sys.exit(main())
