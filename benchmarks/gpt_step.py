"""A full GPT training step (forward, backward, AdamW) in tiletrain, in PyTorch eager and in
PyTorch with torch.compile (inductor), same weights and batch, alternating step by step in one
process; plus each program's peak memory measured in a separate process (peak RSS above the
interpreter with its imports).  PyTorch runs as a careful user writes it: nn.Linear layers
(addmm), fused scaled-dot-product attention, torch.optim.AdamW(fused=True).  The compiled
model's first two steps (compilation) are timed apart ("compile s": their time beyond two
steps) and left out of its step time; the first-step losses of the three must agree (1e-3).

    python benchmarks/gpt_step.py [--sizes small medium small-v8k] [--reps 5]
    python benchmarks/gpt_step.py --device cuda [--sizes gpu] [--reps 5]

--device cuda: both frameworks on the GPU (tiletrain with one CUDA worker plus --ncpu CPU
workers under dmdas, PyTorch eager on cuda:0), no memory probe; the last line is
`tokens_per_s tiletrain=<x> torch=<y>` (scripts/gpu_check.sh reads it).

Sizes: small = 4 layers x 512, 8 heads, T=256, B=8, vocab 256; medium = 12 x 768, 12 heads,
T=256, B=4, vocab 256; small-v8k = small with an 8,192-token vocabulary.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import (hf_state_dict, probe_steps, random_batch, reset_peak_rss, rss_mb,  # noqa: E402
                     tiletrain_adamw, tiletrain_step, torch_adamw, torch_gpt, torch_step)

SIZES = {
    "small": dict(n_layer=4, n_embd=512, n_head=8, T=256, B=8, vocab=256),
    "medium": dict(n_layer=12, n_embd=768, n_head=12, T=256, B=4, vocab=256),
    "small-v8k": dict(n_layer=4, n_embd=512, n_head=8, T=256, B=8, vocab=8192),
    # --device cuda: GPT-2 small's shape (vocabulary cut to 8,192)
    "gpu": dict(n_layer=12, n_embd=768, n_head=12, T=1024, B=8, vocab=8192),
}


def _torch_model(torch, s, seed=0):
    torch.manual_seed(seed)
    return torch_gpt(torch, s["vocab"], s["T"], s["n_layer"], s["n_head"], s["n_embd"])


def _tiletrain_model(tt, torch_model, s, tiles):
    from tiletrain.nn import GPT, GPTConfig, Tiling
    cfg = GPTConfig(vocab_size=s["vocab"], block_size=s["T"], n_layer=s["n_layer"], n_head=s["n_head"],
                    n_embd=s["n_embd"])
    tiling = Tiling() if tiles is None else Tiling(batch=tiles[0], time=tiles[1], width=tiles[2])
    return GPT.from_hf(hf_state_dict(torch_model), config=cfg, tiling=tiling)


def _loss_fn(torch, m, compiled: bool):
    """loss(x, y) of a PyTorch GPT, eager or through torch.compile (inductor)."""
    f = torch.compile(m) if compiled else m
    return lambda x, y: f(x, y)[1]


def memory_probe(framework: str, size: str, tiles, ncpu: int) -> float:
    """Peak RSS (MiB) above the process with its imports: model, optimizer state and the
    activations of 3 training steps, in this fresh process (torch-compile: the peak after
    its compilation, probe_steps)."""
    import torch
    import tiletrain as tt
    torch.set_num_threads(ncpu)
    s = SIZES[size]
    x, y = random_batch(s)
    reset_peak_rss()
    base = rss_mb("VmRSS")
    if framework.startswith("torch"):
        m = _torch_model(torch, s)
        opt = torch_adamw(torch, m.parameters())
        loss_fn = _loss_fn(torch, m, framework == "torch-compile")
        xt, yt = torch.tensor(x), torch.tensor(y)
        probe_steps(lambda: torch_step(loss_fn, opt, xt, yt), framework == "torch-compile")
    else:
        tt.init(ncpu=ncpu)
        tm = _torch_model(torch, s)
        m = _tiletrain_model(tt, tm, s, tiles)
        del tm
        opt = tiletrain_adamw(tt, m.parameters())
        probe_steps(lambda: tiletrain_step(m, opt, x, y), False)
        tt.wait()
    return rss_mb("VmHWM") - base


def placement_table(trace, workers) -> str:
    """Per kernel of a recorded step: tasks and busy milliseconds on each worker kind, the
    step's makespan and each kind's busy fraction (where did the time go on the GPU box)."""
    kind = {w.id: w.kind for w in workers}
    kinds = sorted(set(kind.values()))
    per: dict[str, dict[str, list[float]]] = {}
    for t in trace.tasks:
        row = per.setdefault(str(t["kernel"]), {k: [0, 0.0] for k in kinds})
        cell = row[kind.get(int(t["worker"]), "cpu")]
        cell[0] += 1
        cell[1] += (t["end"] - t["start"]) / 1e3
    span = (trace.tasks["end"].max() - trace.tasks["start"].min()) / 1e3
    head = f"{'kernel':24s}" + "".join(f"{k + ' tasks':>11s}{k + ' ms':>10s}" for k in kinds)
    lines = [head, "-" * len(head)]
    for name, row in sorted(per.items(), key=lambda kv: -sum(c[1] for c in kv[1].values())):
        lines.append(f"{name:24s}" + "".join(f"{row[k][0]:11d}{row[k][1]:10.1f}" for k in kinds))
    busy = {k: sum(r[k][1] for r in per.values()) for k in kinds}
    nw = {k: sum(1 for w in workers if w.kind == k) for k in kinds}
    lines.append(f"makespan {span:.1f} ms; busy fraction " +
                 ", ".join(f"{k} {busy[k] / (span * nw[k]):.2f} ({nw[k]} workers)" for k in kinds))
    return "\n".join(lines)

def cuda_main(args, tiles) -> int:
    """Both frameworks on the GPU; float32; medians of --reps steps after one warm-up."""
    import torch
    import tiletrain as tt
    if not torch.cuda.is_available():
        print("gpt_step --device cuda: PyTorch sees no CUDA device", file=sys.stderr)
        return 1
    dev = torch.device("cuda:0")
    ncpu = min(args.ncpu, 2) if args.ncpu else 1
    tps = {}
    for size in args.sizes:
        s = SIZES[size]
        x, y = random_batch(s)
        tm = _torch_model(torch, s)
        with tt.init(ncpu=ncpu, ncuda=1, sched=args.sched or "dmdas", profile=args.profile) as rt:
            if not any(w.kind == "cuda" for w in rt.workers()):
                print("gpt_step --device cuda: the runtime has no CUDA worker (StarPU or tiletrain built "
                      "without CUDA; see docs/gpus.md)", file=sys.stderr)
                return 1
            m = _tiletrain_model(tt, tm, s, tiles)
            opt = tiletrain_adamw(tt, m.parameters())
            times, losses = [], []
            for rep in range(args.reps + 1):
                t0 = time.perf_counter()
                if args.profile and rep == args.reps:
                    tt.trace.start()
                losses.append(tiletrain_step(m, opt, x, y))
                tt.wait()
                times.append(time.perf_counter() - t0)
                print(f"  {size} tiletrain step {rep}: {times[-1] * 1e3:.0f} ms loss {losses[-1]:.5f}", flush=True)
            if args.profile:
                print(placement_table(tt.trace.read(), rt.workers()))
            sched = rt.sched
        tm = tm.to(dev)
        topt = torch_adamw(torch, tm.parameters())
        xt, yt = torch.tensor(x, device=dev), torch.tensor(y, device=dev)
        t_times, t_losses = [], []
        for rep in range(args.reps + 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            t_losses.append(torch_step(_loss_fn(torch, tm, False), topt, xt, yt))
            torch.cuda.synchronize()
            t_times.append(time.perf_counter() - t0)
            print(f"  {size} pytorch step {rep}: {t_times[-1] * 1e3:.0f} ms loss {t_losses[-1]:.5f}", flush=True)
        if abs(t_losses[0] - losses[0]) > 1e-3 * abs(t_losses[0]):
            print(f"  {size}: first-step losses differ: torch {t_losses[0]} vs tiletrain {losses[0]}")
        tokens = s["B"] * s["T"]
        fpt = m.flops_per_token(s["T"])  # GPT.flops_per_token: the one formula
        om, tmed = float(np.median(times[1:])), float(np.median(t_times[1:]))
        print(f"{size}: tiletrain ({sched}, {ncpu} CPU + 1 CUDA worker) {om * 1e3:.1f} ms "
              f"{fpt * tokens / om / 1e12:.2f} TFLOP/s; pytorch eager {tmed * 1e3:.1f} ms "
              f"{fpt * tokens / tmed / 1e12:.2f} TFLOP/s; speed vs torch {tmed / om:.2f}")
        tps = {"tiletrain": tokens / om, "torch": tokens / tmed}
    print(f"tokens_per_s tiletrain={tps['tiletrain']:.0f} torch={tps['torch']:.0f}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=None, choices=list(SIZES),
                    help="default: small medium small-v8k on the CPU, gpu with --device cuda")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ncpu", type=int, default=os.cpu_count())
    ap.add_argument("--sched", default=None)
    ap.add_argument("--tiles", default=None, help="B,T,C tile sizes (default: Tiling.default)")
    ap.add_argument("--profile", action="store_true",
                    help="--device cuda: record the last tiletrain step and print where each kernel ran")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    ap.add_argument("--memory-probe", nargs=2, metavar=("FRAMEWORK", "SIZE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    tiles = tuple(int(v) for v in args.tiles.split(",")) if args.tiles else None
    if args.sizes is None:
        args.sizes = ["gpu"] if args.device == "cuda" else ["small", "medium", "small-v8k"]
    if args.device == "cuda":
        return cuda_main(args, tiles)
    if args.memory_probe:
        print(json.dumps({"peak_mb": memory_probe(args.memory_probe[0], args.memory_probe[1], tiles, args.ncpu)}))
        return 0

    import torch
    import tiletrain as tt
    from _common import STEP_HEADERS, environment, peak_memory, step_comparison, step_rows, table

    torch.set_num_threads(args.ncpu)
    print(environment())
    print("STARPU_* " + " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("STARPU_")))
    print(f"torch {torch.__version__} with {torch.get_num_threads()} threads (nn.Linear, AdamW fused=True; "
          f"compiled: torch.compile, inductor); tiletrain {tt.__version__} with {args.ncpu} CPU workers; "
          f"float32; {args.reps} repetitions after one warm-up (medians), alternating", flush=True)
    rows = []
    for size in args.sizes:
        s = SIZES[size]
        x, y = random_batch(s)
        xt, yt = torch.tensor(x), torch.tensor(y)
        tm, cm = _torch_model(torch, s), _torch_model(torch, s)   # the same weights, 2 copies
        with tt.init(ncpu=args.ncpu, sched=args.sched) as rt:
            m = _tiletrain_model(tt, tm, s, tiles)
            opt = tiletrain_adamw(tt, m.parameters())
            fpt = m.flops_per_token(s["T"])  # GPT.flops_per_token: the one formula
            tokens = s["B"] * s["T"]
            tt.wait()
            res = step_comparison(size, args.reps, torch, (tm, cm), _loss_fn, xt, yt,
                                  lambda: tiletrain_step(m, opt, x, y))
            if res is None:
                return 1
            sched = rt.sched
        mem = {} if args.no_memory else peak_memory(__file__, size, args)
        rows += step_rows(size, "pytorch eager", sched, *res, tokens, fpt, mem)
    print()
    print(table(STEP_HEADERS, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
