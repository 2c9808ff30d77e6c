"""The largest GPT that trains under a memory cap, and at what speed.

For each cap and each program, the GPTs of the grid (layers x width, T=256, B=4, vocab
256, float32, AdamW) are tried in order of size, each in a fresh subprocess, until one
fails; a run is `steps` training steps (the first one warms up).  Programs:
  tt             tiletrain, tt.init(mem_limit=cap) (no disk node: too large -> MemoryError)
  tt-recompute   the same with GPTConfig(recompute="block")
  tt-ooc         tt.init(mem_limit=cap, ooc_dir=DIR): tiles evicted to a disk node
  torch          PyTorch eager, address space capped at its own baseline + cap (RLIMIT_AS)
  torch-ckpt     the same with torch.utils.checkpoint around every block (non-reentrant)
The cap means StarPU's tile bytes for tiletrain and everything PyTorch allocates beyond its
baseline (interpreter, libraries, a first tiny step) for PyTorch.  `tokens/s` is the
median of the timed steps; `vs tt in memory`: the same model's tokens/s with no cap
(tiletrain, in the same way) over it; `peak RSS MiB`: the process' high-water mark;
`baseline MiB`: its high-water mark before the model (tiletrain: after tt.init; PyTorch: after
the warm-up); `RSS - cap - baseline`: the peak beyond the cap and that baseline (<= 0: the
cap held for the whole process).

    python benchmarks/memory_scale.py [--caps 1G 4G] [--layers 2 4 8] [--widths 256 512 768 1024]
                                      [--programs ...] [--steps 3] [--ooc-dir DIR] [--timeout 600]
                                      [--no-reference]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import environment, median, table  # noqa: E402

PROGRAMS = ("tt", "tt-recompute", "tt-ooc", "torch", "torch-ckpt")
T, B, VOCAB = 256, 4, 256


def n_params(layers: int, width: int) -> int:
    return layers * (12 * width * width + 13 * width) + (VOCAB + T) * width + 2 * width


def _rss_peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _vm_size() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def child_tiletrain(program: str, layers: int, width: int, cap: int | None, ooc_dir: str | None,
                    steps: int) -> dict:
    import numpy as np

    import tiletrain as tt
    from tiletrain.nn import GPT, GPTConfig
    kw = {}
    if cap is not None:
        kw["mem_limit"] = cap
        if program == "tt-ooc":
            kw["ooc_dir"] = ooc_dir
    tt.init(**kw)
    baseline = _rss_peak_mib()  # the interpreter, the libraries and StarPU started: before any model
    cfg = GPTConfig(vocab_size=VOCAB, block_size=T, n_layer=layers, n_head=max(1, width // 64), n_embd=width,
                    recompute="block" if program == "tt-recompute" else "none")
    model = GPT(cfg, seed=0)
    opt = tt.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, VOCAB, (B, T)), rng.integers(0, VOCAB, (B, T))
    times, losses = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = model.loss(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss))
        tt.wait()
        times.append(time.perf_counter() - t0)
    used = tt.current().memory()
    tt.shutdown()
    return {"times": times[1:], "losses": losses, "peak_tiles": used["peak_allocated_bytes"],
            "baseline_mib": baseline}


def child_torch(program: str, layers: int, width: int, cap: int | None, steps: int) -> dict:
    import torch
    from torch.utils.checkpoint import checkpoint

    from tiletrain.testing.torch_gpt import make_torch_gpt
    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(0)

    def warm():  # the baseline: libraries loaded, kernels initialised, on a tiny model
        m = make_torch_gpt(torch, VOCAB, 8, 1, 1, 8)
        _, loss = m(torch.zeros(1, 8, dtype=torch.long), torch.zeros(1, 8, dtype=torch.long))
        loss.backward()
        torch.optim.AdamW(m.parameters()).step()
    warm()
    baseline = _rss_peak_mib()
    if cap is not None:
        limit = _vm_size() + cap
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    m = make_torch_gpt(torch, VOCAB, T, layers, max(1, width // 64), width)
    if program == "torch-ckpt":
        for blk in m.transformer.h:
            blk.forward = (lambda f: (lambda x: checkpoint(f, x, use_reentrant=False)))(blk.forward)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, VOCAB, (B, T), generator=g)
    y = torch.randint(0, VOCAB, (B, T), generator=g)
    times, losses = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        _, loss = m(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    return {"times": times[1:], "losses": losses, "baseline_mib": baseline}


def child(args) -> int:
    cap = None if args.cap == "none" else int(args.cap)
    try:
        if args.program.startswith("tt"):
            res = child_tiletrain(args.program, args.layers, args.width, cap, args.ooc_dir, args.steps)
        else:
            res = child_torch(args.program, args.layers, args.width, cap, args.steps)
        res["ok"] = True
    except (MemoryError, RuntimeError) as e:  # tiletrain's clear errors; PyTorch's allocation failures
        res = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}
    res["rss_peak_mib"] = _rss_peak_mib()
    print("RESULT " + json.dumps(res), flush=True)
    os._exit(0)  # skip interpreter teardown (and its allocations) under the cap


def run(program: str, layers: int, width: int, cap: int | None, args) -> dict:
    cmd = [sys.executable, __file__, "--child", program, "--layers", str(layers), "--width", str(width),
           "--cap", "none" if cap is None else str(cap), "--steps", str(args.steps)]
    if program == "tt-ooc":
        cmd += ["--ooc-dir", args.ooc_dir]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timeout after {args.timeout} s"}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
            res["wall"] = time.perf_counter() - t0
            return res
    tail = (p.stdout + p.stderr).strip().splitlines()[-3:]
    return {"ok": False, "error": f"exit {p.returncode}: {' | '.join(tail)[:300]}"}


def parse_cap(s: str) -> int:
    from tiletrain.config import parse_bytes
    return parse_bytes(s, "--caps")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--caps", nargs="+", default=["1G", "4G"])
    p.add_argument("--layers", nargs="+", type=int, default=[2, 4, 8])
    p.add_argument("--widths", nargs="+", type=int, default=[256, 512, 768, 1024])
    p.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=PROGRAMS)
    p.add_argument("--steps", type=int, default=3, help="steps per run (the first one warms up)")
    p.add_argument("--ooc-dir", default=None,
                   help="disk node directory (default: a temporary one in the cwd)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per run")
    p.add_argument("--no-reference", action="store_true",
                   help="skip the uncapped tiletrain run of each largest model (`vs tt in memory`)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--width", type=int, help=argparse.SUPPRESS)
    p.add_argument("--cap", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        args.program, args.layers = args.child, args.layers[0]
        return child(args)
    tmp = None
    if args.ooc_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="tiletrain-ooc-", dir=os.getcwd())
        args.ooc_dir = tmp.name
    print(environment())
    print(f"GPT grid: layers {args.layers} x width {args.widths}, T={T}, B={B}, vocab {VOCAB}, float32, "
          f"AdamW; {args.steps} steps per run ({args.steps - 1} timed); disk node in {args.ooc_dir}",
          flush=True)
    grid = sorted(((n_params(l, w), l, w) for l in args.layers for w in args.widths))
    in_memory: dict[tuple[int, int], float] = {}  # tiletrain tokens/s without a cap

    def tt_in_memory(l: int, w: int) -> float | None:
        if (l, w) not in in_memory:
            r = run("tt", l, w, None, args)
            in_memory[(l, w)] = B * T / median(r["times"]) if r["ok"] else float("nan")
            msg = r.get("error") or f"{in_memory[(l, w)]:.0f} tokens/s"
            print(f"  tt (no cap) {l}x{w}: {msg}", flush=True)
        return in_memory[(l, w)]

    rows = []
    for cap_s in args.caps:
        cap = parse_cap(cap_s)
        for program in args.programs:
            best = None
            for n, l, w in grid:
                r = run(program, l, w, cap, args)
                msg = r.get("error") or (f"{B * T / median(r['times']):.0f} tokens/s, "
                                         f"peak RSS {r['rss_peak_mib']:.0f} MiB")
                print(f"  {cap_s} {program} {l}x{w} ({n / 1e6:.1f} M): {msg}", flush=True)
                if not r["ok"]:
                    break
                best = (n, l, w, r)
            if best is None:
                rows.append([cap_s, program, "none fits", "-", "-", "-", "-", "-", "-"])
                continue
            n, l, w, r = best
            tps = B * T / median(r["times"])
            ref = float("nan") if args.no_reference else tt_in_memory(l, w)
            over = r["rss_peak_mib"] - r["baseline_mib"] - cap / 2**20
            rows.append([cap_s, program, f"{l}x{w}", f"{n / 1e6:.1f}", f"{tps:.0f}", f"{tps / ref:.2f}",
                         f"{r['rss_peak_mib']:.0f}", f"{r['baseline_mib']:.0f}", f"{over:+.0f}"])
    print()
    headers = ["cap", "program", "largest L x C", "M params", "tokens/s", "vs tt in memory", "peak RSS MiB",
               "baseline MiB", "RSS - cap - baseline"]
    print(table(headers, rows))
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
