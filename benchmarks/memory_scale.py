"""The largest GPT that trains under a memory cap, and at what speed.

For each cap and each program, the GPTs of the grid (layers x width, T=256, B=4, vocab
256, float32, AdamW) are tried in order of size, each in a fresh subprocess, until one
fails; then, where the first that failed has the width of the largest that fit, the layer
counts between them are bisected (--no-refine: not).  A run is `steps` training steps (the
first one warms up).  Programs:
  tt             tiletrain, tt.init(mem_limit=cap - reserve) (no disk node: too large -> MemoryError)
  tt-recompute   the same with GPTConfig(recompute="block")
  tt-ooc         tt.init(mem_limit=cap - reserve, ooc_dir=DIR): tiles evicted to a disk node
  torch          PyTorch eager (nn.Linear layers, AdamW fused=True)
  torch-ckpt     the same with torch.utils.checkpoint around every block (non-reentrant)
Both frameworks are held to the same cap, on the whole process (interpreter, libraries and
all), by one of two methods, chosen at run time and printed in the table:
  cgroup  every run in its own cgroup v2 child with memory.max = cap (memory.swap.max = 0);
          it fits when it ends without an OOM kill; peak = the cgroup's memory.peak (or the
          process' peak RSS where the kernel has no memory.peak)
  rss     where no cgroup v2 memory controller can be used (the reason is printed): every run
          without any limit; it fits when it ends and its peak RSS (the kernel's high-water
          mark, from wait4) stayed <= cap; a run is stopped once its RSS passes the cap
tiletrain is told its budget (mem_limit = cap - --tt-reserve: what its tiles, their StarPU
structures and, out of core, the rest of the process may take beyond the ~120 MiB it holds
after tt.init); PyTorch has no such setting.  `tokens/s` is the median of the timed steps;
`vs tt in memory`: the same model's tokens/s with no cap (tiletrain, in the same way) over it;
`peak MiB`: see the method; `baseline MiB`: the peak RSS before the model (tiletrain: after
tt.init; PyTorch: after a first tiny step); `cap - peak`: what was left under the cap.

    python benchmarks/memory_scale.py [--caps 1G 4G] [--layers 2 4 8] [--widths 256 512 768 1024]
                                      [--programs ...] [--steps 3] [--ooc-dir DIR] [--timeout 600]
                                      [--tt-reserve 192M] [--method auto|cgroup|rss] [--no-refine]
                                      [--no-reference]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import environment, median, table, torch_adamw, torch_gpt  # noqa: E402

PROGRAMS = ("tt", "tt-recompute", "tt-ooc", "torch", "torch-ckpt")
T, B, VOCAB = 256, 4, 256


def n_params(layers: int, width: int) -> int:
    return layers * (12 * width * width + 13 * width) + (VOCAB + T) * width + 2 * width


def _rss_peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child_tiletrain(program: str, layers: int, width: int, budget: int | None, ooc_dir: str | None,
                    steps: int) -> dict:
    import numpy as np

    import tiletrain as tt
    from tiletrain.nn import GPT, GPTConfig
    kw = {}
    if budget is not None:
        kw["mem_limit"] = budget
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


def child_torch(program: str, layers: int, width: int, steps: int) -> dict:
    import torch
    from torch.utils.checkpoint import checkpoint
    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(0)

    def warm():  # the baseline: libraries loaded, kernels initialised, on a tiny model
        m = torch_gpt(torch, VOCAB, 8, 1, 1, 8)
        _, loss = m(torch.zeros(1, 8, dtype=torch.long), torch.zeros(1, 8, dtype=torch.long))
        loss.backward()
        torch_adamw(torch, m.parameters()).step()
    warm()
    baseline = _rss_peak_mib()
    m = torch_gpt(torch, VOCAB, T, layers, max(1, width // 64), width)
    if program == "torch-ckpt":
        for blk in m.transformer.h:
            blk.forward = (lambda f: (lambda x: checkpoint(f, x, use_reentrant=False)))(blk.forward)
    opt = torch_adamw(torch, m.parameters())
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
    budget = None if args.budget == "none" else int(args.budget)
    try:
        if args.program.startswith("tt"):
            res = child_tiletrain(args.program, args.layers, args.width, budget, args.ooc_dir, args.steps)
        else:
            res = child_torch(args.program, args.layers, args.width, args.steps)
        res["ok"] = True
    except (MemoryError, RuntimeError) as e:  # tiletrain's clear errors; PyTorch's allocation failures
        res = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}
    print("RESULT " + json.dumps(res), flush=True)
    os._exit(0)  # skip interpreter teardown (and its allocations) under the cap


# ---- the cap: a cgroup v2 memory.max where one can be made, else measured peak RSS ----------

class Cgroups:
    """Child cgroups (cgroup v2) with memory.max, one per run, beside nothing else: made in
    this process' own cgroup, removed after their run."""

    def __init__(self, here: str):
        self.here, self.n = here, 0

    def make(self, cap: int) -> str:
        self.n += 1
        path = os.path.join(self.here, f"tiletrain-memory-scale-{os.getpid()}-{self.n}")
        os.mkdir(path)
        try:
            for name, value in (("memory.max", cap), ("memory.swap.max", 0)):
                if name == "memory.max" or os.path.exists(os.path.join(path, name)):
                    with open(os.path.join(path, name), "w") as f:
                        f.write(str(value))
        except OSError:
            os.rmdir(path)
            raise
        return path

    @staticmethod
    def read(path: str, name: str) -> str:
        try:
            with open(os.path.join(path, name)) as f:
                return f.read()
        except OSError:
            return ""


def cgroup_v2_memory() -> tuple[Cgroups | None, str]:
    """(Cgroups, how) where this process can make a cgroup v2 child with memory.max, else
    (None, why not).  Makes and removes one test child; never changes an existing cgroup."""
    mount = None
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        if f[f.index("-") + 1] == "cgroup2":
            mount = f[4]
    if mount is None:
        return None, "no cgroup v2 hierarchy is mounted"
    own = next((ln.strip()[3:] for ln in open("/proc/self/cgroup") if ln.startswith("0::")), None)
    if own is None:
        return None, f"this process is in no cgroup v2 group (/proc/self/cgroup; {mount} mounted)"
    here = os.path.normpath(os.path.join(mount, own.lstrip("/")))
    controllers = Cgroups.read(here, "cgroup.controllers").split()
    if "memory" not in controllers:
        v1 = any(":memory:" in ln for ln in open("/proc/self/cgroup"))
        return None, (f"cgroup v2 ({mount}) offers no memory controller to {here} (cgroup.controllers: "
                      f"{' '.join(controllers) or 'none'}"
                      + ("; memory is a cgroup v1 controller here)" if v1 else ")"))
    if "memory" not in Cgroups.read(here, "cgroup.subtree_control").split():
        return None, f"the memory controller is not enabled for {here}'s children (cgroup.subtree_control)"
    cg = Cgroups(here)
    try:
        os.rmdir(cg.make(1 << 30))
    except OSError as e:
        return None, f"cannot make a cgroup v2 child with memory.max under {here}: {e}"
    return cg, f"cgroup v2 children of {here} with memory.max = the cap"


def _vm_rss(pid: int) -> int:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run(program: str, layers: int, width: int, cap: int | None, args) -> dict:
    """One child run, held to ``cap`` (whole-process bytes) by args.cgroups (a cgroup v2
    memory.max) or, without one, judged by its peak RSS (stopped once its RSS passes the cap).
    The result has ok (it ran and stayed under the cap), peak_mib and error."""
    budget = None if cap is None else max(cap - args.tt_reserve, 16 << 20)   # tiletrain's own setting
    cmd = [sys.executable, __file__, "--child", program, "--layers", str(layers), "--width", str(width),
           "--budget", "none" if budget is None else str(budget), "--steps", str(args.steps)]
    if program == "tt-ooc":
        cmd += ["--ooc-dir", args.ooc_dir]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    group = args.cgroups.make(cap) if cap is not None and args.cgroups is not None else None

    def enter():  # in the child, before exec
        if group is not None:
            with open(os.path.join(group, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

    t0 = time.perf_counter()
    killed = None
    with tempfile.TemporaryFile("w+") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True, env=env, preexec_fn=enter)
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - t0 > args.timeout:
                killed = f"timeout after {args.timeout:.0f} s"
            elif group is None and cap is not None and _vm_rss(p.pid) > cap:
                killed = f"RSS passed the cap ({_vm_rss(p.pid) / 2**20:.0f} MiB), stopped"
            if killed:
                p.send_signal(signal.SIGKILL)
                pid, status, usage = os.wait4(p.pid, 0)
                break
            time.sleep(0.02)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    peak = usage.ru_maxrss / 1024   # KiB -> MiB: the child's high-water mark
    if group is not None:
        events = dict(ln.split() for ln in Cgroups.read(group, "memory.events").splitlines())
        cg_peak = Cgroups.read(group, "memory.peak").strip()
        peak = int(cg_peak) / 2**20 if cg_peak.isdigit() else peak
        if int(events.get("oom_kill", 0)):
            killed = f"OOM-killed in its cgroup (memory.max {cap / 2**20:.0f} MiB)"
        os.rmdir(group)
    res = None
    for line in text.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
    if res is None or killed:
        tail = text.strip().splitlines()[-3:]
        res = {"ok": False, "error": killed or f"exit {p.returncode}: {' | '.join(tail)[:300]}"}
    elif res["ok"] and group is None and cap is not None and peak > cap / 2**20:
        res["ok"], res["error"] = False, f"peak RSS {peak:.0f} MiB over the cap"
    res["peak_mib"], res["wall"] = peak, time.perf_counter() - t0
    return res


def largest_fit(program: str, cap: int, cap_s: str, grid: list, args) -> tuple | None:
    """(params, layers, width, run) of the largest GPT of the grid that fits under cap; where
    the first that did not fit has the width of the largest that did, the layer counts
    between them are bisected (a doubling grid leaves up to half the parameters unknown)."""
    def attempt(layers: int, width: int) -> dict:
        r = run(program, layers, width, cap, args)
        msg = r.get("error") or f"{B * T / median(r['times']):.0f} tokens/s"
        print(f"  {cap_s} {program} {layers}x{width} ({n_params(layers, width) / 1e6:.1f} M): {msg}, "
              f"peak {r['peak_mib']:.0f} MiB", flush=True)
        return r

    best, failed = None, None
    for n, layers, w in grid:
        r = attempt(layers, w)
        if not r["ok"]:
            failed = (layers, w)
            break
        best = (n, layers, w, r)
    while args.refine and best and failed and failed[1] == best[2] and failed[0] - best[1] > 1:
        mid = (best[1] + failed[0]) // 2
        r = attempt(mid, failed[1])
        if r["ok"]:
            best = (n_params(mid, failed[1]), mid, failed[1], r)
        else:
            failed = (mid, failed[1])
    return best


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
    p.add_argument("--tt-reserve", default="192M",
                   help="tiletrain's budget is the cap less this (default 192M: its ~120 MiB after tt.init, "
                        "and a margin)")
    p.add_argument("--method", default="auto", choices=["auto", "cgroup", "rss"],
                   help="auto: a cgroup v2 memory.max where one can be made, else measured peak RSS")
    p.add_argument("--no-refine", dest="refine", action="store_false",
                   help="do not bisect the layers between the largest model that fit and the first that "
                        "did not")
    p.add_argument("--no-reference", action="store_true",
                   help="skip the uncapped tiletrain run of each largest model (`vs tt in memory`)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--width", type=int, help=argparse.SUPPRESS)
    p.add_argument("--budget", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        args.program, args.layers = args.child, args.layers[0]
        return child(args)
    args.tt_reserve = parse_cap(args.tt_reserve)
    args.cgroups, how = (None, "--method rss") if args.method == "rss" else cgroup_v2_memory()
    if args.method == "cgroup" and args.cgroups is None:
        p.error(f"--method cgroup: {how}")
    method = "cgroup" if args.cgroups is not None else "rss"
    tmp = None
    if args.ooc_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="tiletrain-ooc-", dir=os.getcwd())
        args.ooc_dir = tmp.name
    print(environment())
    print(f"GPT grid: layers {args.layers} x width {args.widths}, T={T}, B={B}, vocab {VOCAB}, float32, "
          f"AdamW; {args.steps} steps per run ({args.steps - 1} timed); disk node in {args.ooc_dir}")
    print(f"cap method: {method} -- {how}" if method == "cgroup" else
          f"cap method: rss (every run without a limit, fits when its peak RSS <= the cap; no cgroup: {how})")
    print(f"the cap is the whole process' memory, for both frameworks; tiletrain's mem_limit = cap - "
          f"{args.tt_reserve / 2**20:.0f} MiB", flush=True)
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
            best = largest_fit(program, cap, cap_s, grid, args)
            if best is None:
                rows.append([cap_s, method, program, "none fits", "-", "-", "-", "-", "-", "-"])
                continue
            n, l, w, r = best
            tps = B * T / median(r["times"])
            ref = float("nan") if args.no_reference else tt_in_memory(l, w)
            rows.append([cap_s, method, program, f"{l}x{w}", f"{n / 1e6:.1f}", f"{tps:.0f}",
                         f"{tps / ref:.2f}", f"{r['peak_mib']:.0f}", f"{r['baseline_mib']:.0f}",
                         f"{cap / 2**20 - r['peak_mib']:.0f}"])
    print()
    headers = ["cap", "method", "program", "largest L x C", "M params", "tokens/s", "vs tt in memory",
               "peak MiB", "baseline MiB", "cap - peak"]
    print(table(headers, rows))
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
