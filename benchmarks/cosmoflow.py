"""Mini-CosmoFlow training steps (examples/cosmoflow.py): tiletrain against PyTorch eager in one
process, and 2 ranks with the volumes split in space against one process.

1. One process, --size^3 volumes (default 64), batch --batch (4), float32, --width 8: the
   median step (forward, backward, SGD momentum update, waited for) of tiletrain (--ncpu
   workers; activations one tile per sample) and of a torch.nn.Conv3d model with the same
   weights (torch.set_num_threads(--ncpu)), the two alternating step by step; the first
   losses agree.  Peak memory: each framework's VmHWM in a process of its own that builds
   only that framework's model (3 steps; the tiletrain process does not import torch).
2. --mpi: examples/cosmoflow.py --dist none in one process (2 workers) and --dist spatial under
   mpirun -np 2 (1 worker per rank, the README's rank variables), --steps steps each: the
   median time per step (after the first), every rank's peak of tile buffers (the runtime's
   accounting: activations, gradients, parameters and received copies -- the activation
   memory, parameters being a few hundred KiB here) and its peak RSS, with the ratios.

3. --big: a volume that does not fit one process under --mem-limit (default 900M per process;
   e.g. --size 128 --batch 2) trains when split in space over 2 ranks with the same limit each.

    python benchmarks/cosmoflow.py [--size 64] [--batch 4] [--width 8] [--ncpu 2] [--reps 5]
                                   [--warmup 2] [--mpi] [--steps 4] [--big --mem-limit 900M]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import tiletrain as tt  # noqa: E402
import tiletrain.functional as F  # noqa: E402
from _common import environment, median, rss_mb, table  # noqa: E402
from tiletrain.optim import SGD  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "cosmoflow.py"


def _example():
    spec = importlib.util.spec_from_file_location("cosmoflow_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def torch_model(torch, state: dict, width: int, size: int):
    nn = torch.nn
    chans = [1, width, 2 * width, 4 * width, 4 * width, 4 * width]

    class Torch(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.ModuleList([nn.Conv3d(chans[i], chans[i + 1], 3, padding=1) for i in range(5)])
            self.fc1 = nn.Linear(chans[-1] * (size // 32) ** 3, 64)
            self.fc2 = nn.Linear(64, 32)
            self.out = nn.Linear(32, 4)

        def forward(self, x):
            lrelu = torch.nn.functional.leaky_relu
            for conv in self.convs:
                x = torch.nn.functional.max_pool3d(lrelu(conv(x), 0.3), 2)
            x = torch.flatten(x, 1)
            return self.out(lrelu(self.fc2(lrelu(self.fc1(x), 0.3)), 0.3))

    m = Torch()
    m.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in state.items()})
    return m


def steps(args, which=("tiletrain", "torch")):
    """{name: step} for the frameworks in ``which``: the same model, weights and batch (a
    memory probe builds only its own framework's)."""
    ex = _example()
    rng = np.random.default_rng(0)
    model = ex.CosmoFlow(args.size, args.width, np.float32, rng=rng)
    from tiletrain.data.volume import gaussian_random_fields
    x, y = gaussian_random_fields(args.batch, args.size, seed=1)
    out = {}
    if "tiletrain" in which:
        X, Y = tt.from_numpy(x, (1,) + x.shape[1:]), tt.from_numpy(y, (1, 4))
        opt = SGD(model.parameters(), lr=0.01, momentum=0.9)

        def tt_step():
            loss = F.mse_loss(model(X), Y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            value = float(loss)
            tt.wait()
            return value
        out["tiletrain"] = tt_step
    if "torch" in which:
        import torch
        torch.set_num_threads(args.ncpu)
        tmodel = torch_model(torch, model.state_dict(), args.width, args.size)
        tx, ty = torch.tensor(x), torch.tensor(y)
        topt = torch.optim.SGD(tmodel.parameters(), lr=0.01, momentum=0.9)

        def torch_step():
            loss = torch.nn.functional.mse_loss(tmodel(tx), ty)
            loss.backward()
            topt.step()
            topt.zero_grad()
            return loss.item()
        out["torch"] = torch_step
    return out


def memory_probe(args) -> None:
    step = steps(args, (args.memory_probe,))[args.memory_probe]
    for _ in range(3):
        step()
    print(json.dumps({"peak_mb": rss_mb("VmHWM")}))


def one_process(args) -> None:
    both = steps(args)
    tt_step, torch_step = both["tiletrain"], both["torch"]
    first = (tt_step(), torch_step())
    assert abs(first[0] - first[1]) < 1e-3 * max(1.0, abs(first[1])), first
    for _ in range(args.warmup):
        tt_step(), torch_step()
    times = {"tiletrain": [], "torch": []}
    for _ in range(args.reps):
        for name, step in (("tiletrain", tt_step), ("torch", torch_step)):
            t0 = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - t0)
    mem = {}
    for fw in ("tiletrain", "torch"):
        cmd = [sys.executable, __file__, "--memory-probe", fw, "--size", str(args.size), "--batch", str(args.batch),
               "--width", str(args.width), "--ncpu", str(args.ncpu)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
        mem[fw] = json.loads(r.stdout.strip().splitlines()[-1])["peak_mb"] if r.returncode == 0 else float("nan")
    t, tref = median(times["tiletrain"]), median(times["torch"])
    print(f"\none process: {args.size}^3 volumes, batch {args.batch}, width {args.width}, float32, "
          f"{args.ncpu} threads; median of {args.reps} steps")
    print(table(["program", "step ms", "peak MiB", "speed vs eager", "memory vs eager"],
                [["torch eager", f"{1e3 * tref:.0f}", f"{mem['torch']:.0f}", "1.00", "1.00"],
                 ["tiletrain", f"{1e3 * t:.0f}", f"{mem['tiletrain']:.0f}", f"{tref / t:.2f}",
                  f"{mem['tiletrain'] / mem['torch']:.2f}"]]))


def _run_example(cmd, env) -> dict:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if out.returncode:
        raise SystemExit(f"failed: {' '.join(map(str, cmd))}\n{out.stdout}\n{out.stderr}")
    ranks = {}
    for m in re.finditer(r"rank (\d+)/\d+: read (\d+) bytes of volumes, halo (\d+) bytes/step sent, ([\d.]+) "
                         r"s/step, peak RSS (\d+) MiB, peak tiles ([\d.]+|n/a) MiB", out.stdout):
        ranks[int(m[1])] = dict(read=int(m[2]), halo=int(m[3]), step=float(m[4]), peak=float(m[5]),
                                tiles=float("nan") if m[6] == "n/a" else float(m[6]))
    return ranks


def two_ranks(args) -> None:
    from tiletrain.utils import mpirun
    common = ["--size", str(args.size), "--batch", str(args.batch), "--width", str(args.width), "--steps",
              str(args.steps), "--dtype", "float32", "--data", str(ROOT / "runs" / "cosmoflow-data")]
    env = dict(os.environ)
    one = _run_example([sys.executable, str(EXAMPLE), *common, "--dist", "none"], env)
    env2 = mpirun.environment()
    two = _run_example(mpirun.command(2, [sys.executable, EXAMPLE, *common, "--dist", "spatial"]), env2)
    base = one[0]
    rows = [["1 process", "-", f"{1e3 * base['step']:.0f}", f"{base['tiles']:.1f}", f"{base['peak']:.0f}",
             f"{base['read']}", "0", "1.00", "1.00", "1.00"]]
    for r, v in sorted(two.items()):
        rows.append(["2 ranks spatial", f"rank {r}", f"{1e3 * v['step']:.0f}", f"{v['tiles']:.1f}", f"{v['peak']:.0f}",
                     f"{v['read']}", f"{v['halo']}", f"{v['step'] / base['step']:.2f}",
                     f"{v['tiles'] / base['tiles']:.2f}", f"{v['peak'] / base['peak']:.2f}"])
    print(f"\n{args.size}^3, batch {args.batch}, width {args.width}, float32, {args.steps} steps (median step after "
          "the first); tiles = the peak of tile buffers the runtime allocated in the process (activations, "
          "gradients, parameters, received halo slabs and weights), RSS = the process' VmHWM")
    print(table(["run", "rank", "step ms", "peak tiles MiB", "peak RSS MiB", "bytes read", "halo B/step",
                 "time ratio", "tiles ratio", "RSS ratio"], rows))


def big_volume(args) -> None:
    """--size^3 under --mem-limit per process: one process against 2 ranks split in space."""
    from tiletrain.utils import mpirun
    common = [str(EXAMPLE), "--size", str(args.size), "--batch", str(args.batch), "--width", str(args.width),
              "--steps", str(args.steps), "--samples", str(2 * args.batch), "--mem-limit", args.mem_limit,
              "--data", str(ROOT / "runs" / "cosmoflow-data")]
    rows = []
    for label, cmd, env in (("1 process", [sys.executable, *common, "--dist", "none"], dict(os.environ)),
                            ("2 ranks spatial", mpirun.command(2, [sys.executable, *common, "--dist", "spatial"]),
                             mpirun.environment())):
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
        text = out.stdout + out.stderr
        err = re.search(r"MemoryError: (.{0,120})", text)
        losses = re.findall(r"step \d+ loss (\S+)", out.stdout)
        tiles = re.findall(r"peak tiles ([\d.]+) MiB", out.stdout)
        rows.append([label, "trains" if out.returncode == 0 else ("MemoryError" if err else f"exit {out.returncode}"),
                     " ".join(losses) or "-", " / ".join(tiles) or "-", f"{time.perf_counter() - t0:.0f}"])
    print(f"\n{args.size}^3, batch {args.batch}, width {args.width}, float32, mem_limit {args.mem_limit} per process "
          "(a rank that would pass it raises MemoryError on every rank before any task waits for memory)")
    print(table(["run", "result", "losses", "peak tiles MiB per rank", "wall s"], rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--ncpu", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--mpi", action="store_true", help="2 ranks split in space against one process instead")
    ap.add_argument("--steps", type=int, default=4, help="--mpi: steps of each run")
    ap.add_argument("--big", action="store_true",
                    help="--size under --mem-limit: one process (MemoryError) against 2 ranks split in space")
    ap.add_argument("--mem-limit", default="900M", help="--big: each process' mem_limit")
    ap.add_argument("--memory-probe", choices=("tiletrain", "torch"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mpi or args.big:
        print(environment())
        (big_volume if args.big else two_ranks)(args)
        return
    tt.init(ncpu=args.ncpu)
    if args.memory_probe:
        memory_probe(args)
    else:
        print(environment())
        one_process(args)
    tt.shutdown()


if __name__ == "__main__":
    main()
