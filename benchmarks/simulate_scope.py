"""Scope's question on simulated chiplets: a ResNet-style CNN of L residual blocks on a package
of C accelerator chiplets (machines derived from a machine calibrated here, with ``--chiplets
C --chiplet-link GB/s``), mapped three ways, at two chiplet-link bandwidths:

  layer-wise     every block its own segment on C / L chiplets; the L segments pipelined
  merged         consecutive blocks merged into --merge blocks per segment, each segment on
                 C * merge / L chiplets (a region shared by its blocks); the segments pipelined
  data parallel  one segment of every block on all C chiplets (each chiplet a shard of every
                 micro-batch; the weight gradients of the shards add up across the chiplets)

A segment is a pipeline stage (tiletrain.pipeline.ModelPipeline with stage modules, the 1F1B
schedule, m micro-batches per step, per-segment SGD after the step), its tasks restricted to its
region's chiplets (the stage's worker group); a micro-batch's activations are tiled along the
batch axis, one tile per chiplet of the region, so a region's chiplets share each micro-batch.
The MCM-accelerator paper (Scope, 2026) reports merged segments beating layer-wise pipelining,
by most where inter-chiplet links are slow: the table says whether this simulation orders them
the same way.

    python benchmarks/simulate_scope.py [--chiplets 4 8 16] [--links 1 32] [--blocks 4] [--merge 2]
        [--width 32] [--image 16] [--batch 16] [--m 8] [--chiplet-speed 32] [--out benchmarks/results]

The machine model (docs/simulation.md, "Chiplets"): each chiplet is a simulated device with
its own memory and a link of --links GB/s each way to the package's memory; a tile moving
between two chiplets crosses two links (StarPU 1.3's simulation routes device-to-device copies
through main memory), a star around the package's memory rather than a mesh of neighbours.
Kernel times: the calibrated core's / --chiplet-speed.  Each configuration runs in a fresh
simulated process (SimGrid starts once per process); the step after --warmup steps is timed on
the simulated clock, from the first to the last task on the chiplets.  The submitting thread is
free (as in benchmarks/simulate_gpipe.py).  The calibration (real steps of every mapping's tile
shapes on this computer's cores) and the machines live in a temporary folder.  Prints a table,
writes simulate_scope.csv and .png under --out (gitignored).
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import run_worker, save_png  # noqa: E402

MAPPINGS = ("layer-wise", "merged", "data-parallel")


def segments(mapping: str, blocks: int, merge: int) -> int:
    """How many segments (pipeline stages) a mapping cuts the blocks into."""
    return {"layer-wise": blocks, "merged": blocks // merge, "data-parallel": 1}[mapping]


def build(a, nseg: int, rng):
    """The CNN as nseg stage modules: a stem conv on the first, blocks // nseg residual blocks
    each, the pooled linear head on the last."""
    import tiletrain as tt
    from tiletrain import functional as F
    from tiletrain.nn import Conv2d, Linear, Module, ReLU, Sequential

    class Residual(Module):
        """relu(x + conv(relu(conv(x)))): a ResNet basic block (no batch norm: its per-channel
        statistics would chain every batch tile of a region through one task each)."""

        def __init__(self, w):
            super().__init__()
            self.conv1 = Conv2d(w, w, 3, 1, 1, rng=rng)
            self.conv2 = Conv2d(w, w, 3, 1, 1, rng=rng)

        def forward(self, x):
            return F.relu(x + self.conv2(F.relu(self.conv1(x))))

    class Head(Module):
        def __init__(self, w, classes):
            super().__init__()
            self.fc = Linear(w, classes, rng=rng)

        def forward(self, x):
            return self.fc(tt.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    per = a.blocks // nseg
    stages = []
    for s in range(nseg):
        mods = [Conv2d(3, a.width, 3, 1, 1, rng=rng), ReLU()] if s == 0 else []
        mods += [Residual(a.width) for _ in range(per)]
        if s == nseg - 1:
            mods.append(Head(a.width, 10))
        stages.append(Sequential(*mods))
    return stages


def _step_time(rec_tasks, workers) -> tuple[float, list[int]]:
    """The step's span on the chiplets (s) and the tasks each chiplet ran."""
    import numpy as np
    mine = rec_tasks[np.isin(rec_tasks["worker"], workers)]
    return ((float(mine["end"].max()) - float(mine["start"].min())) / 1e6,
            [int((mine["worker"] == w).sum()) for w in workers])


def _off(tasks, workers) -> dict[str, int]:
    """{kernel: tasks} that ran off the chiplets (the CPU workers)."""
    import numpy as np
    k, n = np.unique(tasks["kernel"][~np.isin(tasks["worker"], workers)].astype(str), return_counts=True)
    return dict(zip(k.tolist(), n.tolist()))


def _profile(trace, workers, mapping: str) -> None:
    """--profile: the step's span, the chiplets' mean busy time and the kernels' share (stderr)."""
    import numpy as np
    t = trace.tasks
    mine = t[np.isin(t["worker"], workers)]
    span = float(mine["end"].max() - mine["start"].min())
    by = {}
    for k, d in zip(mine["kernel"], mine["end"] - mine["start"]):
        c = by.setdefault(str(k), [0, 0.0])
        c[0] += 1
        c[1] += float(d)
    print(f"{mapping}: span {span / 1e3:.2f} ms, {sum(v[1] for v in by.values()) / 1e3 / len(workers):.2f} ms busy "
          "per chiplet", file=sys.stderr)
    for k, (n, d) in sorted(by.items(), key=lambda kv: -kv[1][1])[:6]:
        print(f"  {k}: {n} tasks, {d / 1e3:.2f} ms, {d / n:.1f} us each", file=sys.stderr)



def worker(a) -> None:
    """In a process (simulated, or real with --calibrate-only): every mapping, one JSON line each."""
    import numpy as np

    import tiletrain as tt
    from tiletrain import functional as F
    from tiletrain.optim import SGD
    from tiletrain.pipeline import schedules
    from tiletrain.pipeline.model import ModelPipeline
    from tiletrain.trace.records import recording

    if a.calibrate_only:
        rt = tt.init(ncpu=2, sched="dmdas", profile=True, calibrate=1)
        chiplets = [w.id for w in rt.workers()][:2]
    else:
        rt = tt.init(sched=a.sched, profile=True)
        chiplets = [w.id for w in rt.workers() if w.kind == "cuda"]
    C = a.package if a.calibrate_only else len(chiplets)
    rng = np.random.default_rng(0)

    def loss_fn(logits, y):
        return F.cross_entropy(logits, tt.from_numpy(np.asarray(y, np.int64)))

    for mapping in a.mappings:
        nseg = segments(mapping, a.blocks, a.merge)
        per_region = C // nseg
        # a region's chiplets (in calibration: this computer's cores, the same tile shapes)
        regions = [chiplets if a.calibrate_only else chiplets[s * per_region:(s + 1) * per_region]
                   for s in range(nseg)]
        nb = a.batch // per_region   # images per tile: one tile per chiplet of a region
        stages = build(a, nseg, np.random.default_rng(0))
        pp = ModelPipeline(stages, schedules.get("1f1b", nseg, a.m), "deps", workers=regions, loss_fn=loss_fn,
                           optimizer=lambda ps, d: SGD(ps, lr=0.01, momentum=0.9))
        for i in range(a.warmup + 1):
            tt.wait()
            xs = [tt.from_numpy(rng.normal(size=(a.batch, 3, a.image, a.image)).astype(np.float32),
                                tiles=(nb, 3, a.image, a.image)) for _ in range(a.m)]
            ys = rng.integers(0, 10, size=(a.m, a.batch))
            with recording() as rec:
                for v in pp.step(xs, ys).losses:
                    float(v)
                tt.wait()
        step_s, per_chiplet = _step_time(rec.trace.tasks, chiplets)
        out = {"chiplets": C, "mapping": mapping, "segments": nseg, "per_segment": per_region, "step_s": step_s,
               "samples_per_s": a.m * a.batch / step_s, "tasks": sum(per_chiplet), "per_chiplet": per_chiplet,
               "off_chiplets": int(len(rec.trace.tasks)) - sum(per_chiplet),
               "off_chiplet_kernels": _off(rec.trace.tasks, chiplets)}
        print("RESULT " + json.dumps(out), flush=True)
        if a.profile:
            _profile(rec.trace, chiplets, mapping)
        del pp, stages
    tt.shutdown()


def _args(a, extra) -> list[str]:
    return [sys.executable, os.path.abspath(__file__), "--worker", "--blocks", str(a.blocks), "--merge",
            str(a.merge), "--width", str(a.width), "--image", str(a.image), "--batch", str(a.batch), "--m", str(a.m),
            "--sched", a.sched, "--warmup", str(a.warmup), "--mappings", *a.mappings, "--latency", str(a.latency),
            *extra]


def _calibrate(a, tmp) -> bool:
    """The machine (a small GPT step), then every mapping's tile shapes for every package size,
    twice, on this computer's cores into the machine's models."""
    from tiletrain.sim.calibrate import calibrate, calibration_env

    calibrate("scope-base", steps=10, sched="dmda", say=lambda s: None, n_layer=1, n_embd=64, batch=2, seq_len=16)
    env = calibration_env("scope-base")
    for c in a.chiplets:
        for _ in range(2):
            r = subprocess.run(_args(a, ["--calibrate-only", "--package", str(c)]), env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                print(f"calibrating the mappings failed ({r.returncode}):\n{r.stderr[-3000:]}", file=sys.stderr)
                return False
    return True


def _report(a, rows, real_s) -> None:
    print(f"\nResNet-style CNN: {a.blocks} residual blocks of {a.width} channels, {a.image}x{a.image} images, "
          f"micro-batch {a.batch}, m = {a.m}, 1F1B, {a.sched}, chiplets x{a.chiplet_speed:g} a calibrated core, "
          f"submitter free ({real_s:.0f} s real in all)\n")
    print("| chiplets | link GB/s | mapping | segments x chiplets | simulated step (ms) | samples/s | vs layer-wise |")
    print("|---|---|---|---|---|---|---|")
    ref = {(r["chiplets"], r["link"]): r["samples_per_s"] for r in rows if r["mapping"] == "layer-wise"}
    for r in rows:
        key = (r["chiplets"], r["link"])
        r["vs_layerwise"] = r["samples_per_s"] / ref[key] if key in ref else float("nan")
        print(f"| {r['chiplets']} | {r['link']:g} | {r['mapping']} | {r['segments']} x {r['per_segment']} | "
              f"{1e3 * r['step_s']:.2f} | {r['samples_per_s']:.0f} | {r['vs_layerwise']:.2f}x |")
    verdicts = []
    for c in a.chiplets:
        gains = {}
        for link in a.links:
            got = {r["mapping"]: r["samples_per_s"] for r in rows if r["chiplets"] == c and r["link"] == link}
            if "merged" in got and "layer-wise" in got:
                gains[link] = got["merged"] / got["layer-wise"]
        if len(gains) == len(a.links):
            slow, fast = min(a.links), max(a.links)
            verdicts.append(f"{c} chiplets: merged / layer-wise = {gains[slow]:.2f}x at {slow:g} GB/s, "
                            f"{gains[fast]:.2f}x at {fast:g} GB/s -> Scope's ordering "
                            + ("reproduced" if gains[slow] > 1 and gains[slow] >= gains[fast] else "not reproduced"))
    print("\n" + "\n".join(verdicts))


def _plot(a, rows) -> None:
    def draw(axes):
        for ax, link in zip(axes, a.links):
            for mapping in a.mappings:
                pts = [r for r in rows if r["link"] == link and r["mapping"] == mapping]
                ax.plot([r["chiplets"] for r in pts], [r["samples_per_s"] for r in pts], "o-", label=mapping)
            ax.set_xlabel("chiplets")
            ax.set_ylabel("samples / simulated s")
            ax.set_title(f"chiplet links {link:g} GB/s")
            ax.legend()
    save_png(os.path.join(a.out, "simulate_scope.png"), draw, panels=len(a.links), size=(4.5, 3.5))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chiplets", type=int, nargs="+", default=[4, 8, 16])
    p.add_argument("--links", type=float, nargs="+", default=[1.0, 32.0], help="chiplet-link bandwidths, GB/s")
    p.add_argument("--blocks", type=int, default=4, help="residual blocks (layer-wise: one segment each)")
    p.add_argument("--merge", type=int, default=2, help="blocks per merged segment")
    p.add_argument("--width", type=int, default=32, help="channels")
    p.add_argument("--image", type=int, default=16, help="image height and width")
    p.add_argument("--batch", type=int, default=16, help="images per micro-batch")
    p.add_argument("--m", type=int, default=8, help="micro-batches per step")
    p.add_argument("--chiplet-speed", type=float, default=32.0, help="a chiplet kernel's speed relative to a "
                   "calibrated core")
    p.add_argument("--latency", type=float, default=0.1, help="us per transfer on a chiplet link (on-package "
                   "links: a fraction of a microsecond; a PCIe GPU's is ~10)")
    p.add_argument("--sched", default="dmdas", help="a policy with priorities (the schedule's order)")
    p.add_argument("--warmup", type=int, default=0, help="untimed steps before the timed one")
    p.add_argument("--mappings", nargs="+", default=list(MAPPINGS), choices=MAPPINGS)
    p.add_argument("--profile", action="store_true", help="with --worker (one simulated process run by hand, "
                   "TILETRAIN_SIMULATE set): each mapping's kernel times on the chiplets, on stderr")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--calibrate-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--package", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    return p


def _check(p, a) -> None:
    if a.blocks < 1 or a.merge < 1 or a.blocks % a.merge:
        p.error(f"--merge {a.merge} must divide --blocks {a.blocks}")
    for c in a.chiplets:
        for mapping in a.mappings:
            n = segments(mapping, a.blocks, a.merge)
            if c % n or a.batch % (c // n):
                p.error(f"{c} chiplets, {mapping}: {n} segments need a chiplet count they divide, and --batch "
                        f"{a.batch} a multiple of the {max(1, c // n)} chiplets per segment")
        if c > 16:
            p.error("at most 16 chiplets (the simulation flavour's devices)")


def main() -> int:
    p = _parser()
    a = p.parse_args()
    if a.worker:
        worker(a)
        return 0
    _check(p, a)
    from tiletrain.config import machines_in
    from tiletrain.sim.machine import derive, save

    rows = []
    t_all = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tiletrain-scope-") as tmp, machines_in(tmp):
        print(f"# calibrating here: the machine, then the CNN's tile shapes for {a.chiplets} chiplets ...", flush=True)
        if not _calibrate(a, tmp):
            return 1
        print(f"# calibrated ({time.monotonic() - t_all:.0f} s)", flush=True)
        for c in a.chiplets:
            for link in a.links:
                name = f"scope-c{c}-l{link:g}"
                dm = derive(name, "scope-base", cpus=2, chiplets=c, chiplet_link_gbs=link, link_latency_us=a.latency,
                            gpu_speed=a.chiplet_speed, gpu_memory=2**30, overwrite=True)
                save(dataclasses.replace(dm, submit_us_per_task=0.0))
                env = dict(os.environ, TILETRAIN_SIMULATE=name, TILETRAIN_MACHINES=tmp,
                           STARPU_SIMGRID_VARIANCE="0", STARPU_SIMGRID_CUDA_MALLOC_COST="0")
                t = time.monotonic()
                got = run_worker(_args(a, []), env, f"{c} chiplets, {link:g} GB/s")
                if got is None:
                    return 1
                for r in got:
                    r["link"] = link
                rows += got
                print(f"# {c} chiplets at {link:g} GB/s: {time.monotonic() - t:.0f} s real, "
                      + ", ".join(f"{r['mapping']} {1e3 * r['step_s']:.1f} ms ({r['off_chiplets']} tasks off "
                                  "the chiplets)" for r in got), flush=True)
    _report(a, rows, time.monotonic() - t_all)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "simulate_scope.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["chiplets", "link", "mapping", "segments", "per_segment", "step_s",
                                          "samples_per_s", "vs_layerwise", "tasks", "off_chiplets"],
                           extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    _plot(a, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
