"""Shared helpers for benchmark scripts: environment description and medians."""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys


def environment() -> str:
    lines = [f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
             f"python {platform.python_version()}"]
    lines.append(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')} "
                 f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}")
    try:
        from tiletrain._ffi import cstr, lib
        from tiletrain.runtime import blas_note
        lines.append(f"tiletrain blas: {cstr(lib.tt_blas_info())}")
        note = blas_note()
        if note:
            lines.append(f"  note: {note}")
    except ImportError:
        pass
    try:
        from threadpoolctl import threadpool_info
        for lib in threadpool_info():
            if lib.get("user_api") == "blas":
                lines.append(f"blas loaded: {lib.get('internal_api')} {lib.get('version')} "
                             f"({os.path.basename(lib.get('filepath', ''))}), arch {lib.get('architecture')}, "
                             f"threads {lib.get('num_threads')}")
    except ImportError:
        pass
    return "\n".join(lines)


def median(xs) -> float:
    return statistics.median(xs)


def table(headers: list[str], rows: list[list]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    fmt = "  ".join("{:>%d}" % w for w in widths)
    out = [fmt.format(*cells[0]), fmt.format(*["-" * w for w in widths])]
    out += [fmt.format(*r) for r in cells[1:]]
    return "\n".join(out)


# ---- training-step comparisons (gpt_step.py, llama_step.py) ---------------------------------

ADAMW = dict(lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)   # both frameworks, every benchmark

# One row per program; speed ratios: the median over the repetitions of PyTorch's step time over
# the program's in the same repetition (adjacent in time: a shared machine's load drifts);
# memory: PyTorch eager's peak over the program's.
STEP_HEADERS = ["size", "program", "step ms", "tokens/s", "GFLOP/s", "peak MiB", "compile s",
                "speed vs eager", "speed vs compiled", "memory vs eager"]
# The memory probes' frameworks (``--memory-probe FRAMEWORK SIZE``), in the table's order.
FRAMEWORKS = ("torch", "torch-compile", "tiletrain")


def torch_adamw(torch, params):
    """What a careful PyTorch user runs on the CPU: AdamW with its fused kernel (one kernel per
    parameter for the whole update; supported on CPU since torch 2.4)."""
    return torch.optim.AdamW(params, fused=True, **ADAMW)


def tiletrain_adamw(tt, params):
    return tt.optim.AdamW(params, **ADAMW)


def torch_gpt(torch, vocab_size: int, block_size: int, n_layer: int, n_head: int, n_embd: int):
    """tiletrain.testing.torch_gpt's GPT-2 with every Conv1D (``x @ W + b``: a matmul, then an
    add) replaced by the ``nn.Linear`` a PyTorch user writes (one addmm); same weights, so the
    model draws the same random numbers.  hf_state_dict() gives its weights in GPT-2's
    layout.  The module is loaded from its file, so that a PyTorch-only process (memory_scale.py's
    children) does not load tiletrain's libraries (about 20 MiB of RSS)."""
    import importlib.util
    path = os.path.join(os.path.dirname(__file__), "..", "tiletrain", "testing", "torch_gpt.py")
    spec = importlib.util.spec_from_file_location("_torch_gpt", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    m = mod.make_torch_gpt(torch, vocab_size, block_size, n_layer, n_head, n_embd)
    for parent in list(m.modules()):
        for name, child in list(parent.named_children()):
            if type(child).__name__ == "Conv1D":
                nin, nout = child.weight.shape
                lin = torch.nn.Linear(nin, nout, device="meta")
                lin.weight = torch.nn.Parameter(child.weight.detach().t().contiguous())
                lin.bias = child.bias
                setattr(parent, name, lin)
    return m


def hf_state_dict(m) -> dict:
    """torch_gpt()'s weights as a GPT-2 state dict of NumPy arrays (Conv1D layout, (in, out))."""
    import torch
    linear = {f"{n}.weight" for n, mod in m.named_modules()
              if isinstance(mod, torch.nn.Linear) and n.startswith("transformer.h.")}
    return {k: (v.t() if k in linear else v).detach().contiguous().numpy() for k, v in m.state_dict().items()}


def torch_step(loss_fn, opt, x, y) -> float:
    """One PyTorch training step of ``loss_fn(x, y)`` (eager or torch.compile'd); returns the
    loss (read after the update)."""
    loss = loss_fn(x, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


def compile_warmup(step, n: int = 2) -> tuple[list[float], list[float]]:
    """The first ``n`` steps of a torch.compile'd model (the first compiles the forward and
    the backward; the second catches a recompilation): (wall seconds, losses) of each."""
    import time
    times, losses = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        losses.append(step())
        times.append(time.perf_counter() - t0)
    return times, losses


def alternate_steps(label: str, reps: int, programs: dict) -> tuple[dict, dict]:
    """One warm-up and ``reps`` steps of each program ({name: step() -> loss}), alternating
    step by step (every step timed to its end: tiletrain's workers idle during the others');
    prints each step.  Returns ({name: seconds of the ``reps`` timed steps}, {name: the first
    step's loss})."""
    import time

    import tiletrain as tt
    times = {k: [] for k in programs}
    losses = {k: [] for k in programs}
    for rep in range(reps + 1):
        for name, step in programs.items():
            tt.wait()
            t0 = time.perf_counter()
            losses[name].append(step())
            tt.wait()
            times[name].append(time.perf_counter() - t0)
        print(f"  {label} step {rep}: " + ", ".join(
            f"{k} {times[k][-1] * 1e3:.0f} ms loss {losses[k][-1]:.5f}" for k in programs), flush=True)
    return {k: v[1:] for k, v in times.items()}, {k: v[0] for k, v in losses.items()}


def losses_agree(label: str, first: dict, rtol: float = 1e-3) -> bool:
    """Whether every program's first-step loss (same weights, same batch, before any update)
    equals the first one's within rtol; prints the ones that differ."""
    names = list(first)
    ref = first[names[0]]
    bad = [k for k in names[1:] if abs(first[k] - ref) > rtol * abs(ref)]
    for k in bad:
        print(f"  {label}: first-step losses differ: {names[0]} {ref} vs {k} {first[k]}")
    return not bad


def peak_memory(script: str, size: str, args) -> dict:
    """Peak MiB per framework (FRAMEWORKS), each measured by ``script --memory-probe FRAMEWORK
    SIZE`` in a separate process (its last stdout line: {"peak_mb": ...}); nan where a probe
    failed."""
    import json
    import subprocess
    import sys
    mem = {}
    for fw in FRAMEWORKS:
        cmd = [sys.executable, script, "--memory-probe", fw, size, "--ncpu", str(args.ncpu)]
        if args.tiles:
            cmd += ["--tiles", args.tiles]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
        mem[fw] = json.loads(r.stdout.strip().splitlines()[-1])["peak_mb"] if r.returncode == 0 else float("nan")
    return mem


def probe_steps(step, compiled: bool) -> None:
    """The memory probes' 3 training steps; for a compiled model the peak is reset after its
    compilation (2 steps, compile_warmup), so that it counts the steps, not the compiler."""
    if compiled:
        compile_warmup(step)
        reset_peak_rss()
    for _ in range(3):
        step()


def step_comparison(label: str, reps: int, torch, models: tuple, loss_fn, xt, yt, tiletrain_step_fn):
    """PyTorch eager, PyTorch compiled and tiletrain, alternating (alternate_steps) after the
    compiled model's warm-up (compile_warmup); call it with tiletrain's workers idle (after
    tt.wait(): they sleep while PyTorch compiles).  models: two PyTorch copies of the model with
    tiletrain's weights (eager, compiled), each given its fused AdamW; loss_fn(torch, model,
    compiled) -> loss(x, y).  Returns ({eager, compiled, tiletrain: seconds of each timed step},
    compile seconds: the warm-up steps' time beyond as many median steps), or None when the
    first-step losses differ."""
    tm, cm = models
    topt, copt = torch_adamw(torch, tm.parameters()), torch_adamw(torch, cm.parameters())
    eager, compiled = loss_fn(torch, tm, False), loss_fn(torch, cm, True)
    ctimes, closses = compile_warmup(lambda: torch_step(compiled, copt, xt, yt))
    print(f"  {label} torch.compile warm-up steps: {', '.join(f'{t:.1f}' for t in ctimes)} s", flush=True)
    programs = {"eager": lambda: torch_step(eager, topt, xt, yt),
                "compiled": lambda: torch_step(compiled, copt, xt, yt),
                "tiletrain": tiletrain_step_fn}
    times, first = alternate_steps(label, reps, programs)
    first["compiled"] = closses[0]
    if not losses_agree(label, first):
        return None
    return times, sum(ctimes) - len(ctimes) * median(times["compiled"])


def step_rows(size: str, eager_name: str, sched: str, times: dict, compile_s: float, tokens: int,
              fpt: float, mem: dict) -> list[list]:
    """The STEP_HEADERS rows of one size (PyTorch eager, PyTorch compiled, tiletrain) from
    step_comparison's step times and compile seconds and peak_memory's MiB."""
    nan = float("nan")

    def speed(ref, t):   # per repetition, then the median
        return f"{median([r / s for r, s in zip(times[ref], t)]):.2f}"
    rows = []
    for name, program, key, comp in ((eager_name, "eager", "torch", None),
                                     ("pytorch compiled", "compiled", "torch-compile", compile_s),
                                     (f"tiletrain ({sched})", "tiletrain", "tiletrain", None)):
        t = times[program]
        med = median(t)
        rows.append([size, name, f"{med * 1e3:.0f}", f"{tokens / med:,.0f}",
                     f"{fpt * tokens / med / 1e9:.1f}", f"{mem.get(key, nan):.0f}" if mem else "-",
                     "-" if comp is None else f"{comp:.1f}", speed("eager", t), speed("compiled", t),
                     f"{mem.get(key, nan) / mem.get('torch', nan):.2f}" if mem else "-"])
    return rows


def tiletrain_step(m, opt, x, y) -> float:
    """One tiletrain training step, submitted whole before the loss is read."""
    loss = m.loss(x, y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return float(loss)


def random_batch(s: dict, seed: int = 0):
    """(inputs, targets) of shape (s["B"], s["T"]) in [0, s["vocab"])."""
    import numpy as np
    rng = np.random.default_rng(seed)
    return rng.integers(0, s["vocab"], (s["B"], s["T"])), rng.integers(0, s["vocab"], (s["B"], s["T"]))


def rss_mb(field: str) -> float:
    """A /proc/self/status memory field (VmRSS, VmHWM) in MiB."""
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak_rss() -> None:
    """Reset the kernel's high-water mark of this process' RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


# ---- one process against mpirun -np 2 (mpi_scaling.py, pipeline_schedules.py --real) ---------
#
# One protocol for both:
# 1. A job (one process with 2 workers, or mpirun -np 2 with 1 worker per rank) builds every
#    configuration it times, steps each through `warmup` rounds, then times `rounds` rounds
#    round-robin (a shared machine's load drifts: each configuration sees the same drift); in a
#    round a configuration steps twice and the second step is timed (the step right after
#    another model's step refills the caches), to its end (tt.wait()).  It prints one RESULT
#    line per configuration (and rank) with the median of its timed steps.
# 2. The driver alternates jobs: the one-process baseline job, an mpirun job, the baseline job
#    again, ... (`repeats` mpirun jobs between repeats + 1 baseline jobs); an mpirun
#    configuration's ratio is the mean of the baseline medians just before and just after its
#    job over its own median, and the table gives the median of the `repeats` ratios (range).

STEP_DATA = 4   # distinct batches the timed steps cycle through


def protocol_init(sched: str | None) -> None:
    """Every job's runtime: the given policy, StarPU profiling on (pipeline_schedules.py records
    the order its ranks kept; ~0.5 us per task, alike in every job)."""
    import tiletrain as tt
    tt.init(profile=True, sched=sched)


def gpt_train_step(cfg, mode, micro_batches: int, dtype: str = "float32"):
    """A fresh GPT (seed 0) placed and stepped as `tiletrain train --dist MODE` does
    (tiletrain.pipeline.training: a pipelined mode steps its default schedule, 1F1B; the
    others shard each micro-batch over the data-parallel replicas), its AdamW, and step(ids)
    -> losses (ids (B, T + 1) cut into ``micro_batches``; every loss submitted before any is
    read), inside the configuration's own plan (place() makes each new plan the current one)."""
    import numpy as np

    from tiletrain.nn import GPT
    from tiletrain.optim import AdamW
    from tiletrain.parallel import current_plan, using
    from tiletrain.pipeline import training
    model = GPT(cfg, dtype=np.dtype(dtype), seed=0)
    pipe = training.place(model, mode, None, training.training_schedule(None, mode, micro_batches, cfg.n_layer))
    pl = current_plan()
    opt = AdamW(model.parameters(), lr=1e-3)

    def step(ids):
        B, m = ids.shape[0], micro_batches
        parts = [ids[k * B // m:(k + 1) * B // m] for k in range(m)]
        with using(pl):
            losses = training.step(model, pipe, [(p[:, :-1], p[:, 1:]) for p in parts])
            opt.step()
            opt.zero_grad()
        return losses
    return step


BASELINE = "1 process x 2 workers"


def reference_configs(cfg, micro_batches: int, dtype: str = "float32") -> list[tuple[str, str, object]]:
    """The protocol's own configurations, (name, mechanism, step): in one process the plain
    step (BASELINE) and, with micro_batches > 1, the same micro-batches without a pipeline
    (what the bubble bound m/(m+p-1) is a fraction of); under mpirun rank 0 doing everything
    with its 1 worker, data mode, and pipeline mode as `tiletrain train --dist pipeline` steps it."""
    import tiletrain as tt
    m = micro_batches
    if tt.world_size() == 1:
        return [(BASELINE, "-", gpt_train_step(cfg, "single", 1, dtype))] + \
            ([(f"{BASELINE} x{m}", "-", gpt_train_step(cfg, "single", m, dtype))] if m > 1 else [])
    return [("rank 0 alone (1 worker)", "-", gpt_train_step(cfg, "single", 1, dtype)),
            ("data", "-", gpt_train_step(cfg, "data", 1, dtype)),
            (f"pipeline x{m}", "1f1b", gpt_train_step(cfg, "pipeline", m, dtype))]


def step_data(batch: int, seq_len: int, vocab: int = 256) -> list:
    """The STEP_DATA batches (batch, seq_len + 1) every configuration steps through."""
    import numpy as np
    rng = np.random.default_rng(0)
    return [rng.integers(0, vocab, size=(batch, seq_len + 1)) for _ in range(STEP_DATA)]


def timed_step(step, ids) -> float:
    """Seconds of one step: its losses read (a collective under mpirun), then tt.wait() (a
    loss is ready before its backward and the update have run)."""
    import time

    import numpy as np

    import tiletrain as tt
    t0 = time.perf_counter()
    float(np.mean([float(v) for v in step(ids)]))
    tt.wait()
    return time.perf_counter() - t0


def timed_rounds(steps: list, data: list, rounds: int, warmup: int) -> list[list[float]]:
    """Part 1 of the protocol: every step function through ``warmup`` rounds, then ``rounds``
    rounds round-robin, each stepping twice and timing the second.  Seconds per step function."""
    times = [[] for _ in steps]
    for i in range(warmup):
        for step in steps:
            timed_step(step, data[i % len(data)])
    for i in range(rounds):
        for k, step in enumerate(steps):
            timed_step(step, data[i % len(data)])   # untimed: the step after switching models
            times[k].append(timed_step(step, data[(i + 1) % len(data)]))
    return times


def emit_result(**fields) -> None:
    import json
    print("RESULT " + json.dumps(fields), flush=True)


def launch_job(argv: list[str], nprocs: int, timeout: float, **env_extra: str) -> tuple[list[dict], str]:
    """Run argv as one process with 2 CPU workers (nprocs 1: StarPU's default binding, MPI off)
    or under mpirun -np nprocs (docs/howto/mpirun.md: 1 worker per rank, no binding,
    idle naps); returns (its RESULT records, its output).  SystemExit with the output's tail
    when it fails."""
    import json
    import re
    import subprocess

    from tiletrain.utils import mpirun
    env = mpirun.environment(ranks=nprocs > 1, OPENBLAS_NUM_THREADS="1", STARPU_SILENT="1")
    env.setdefault("STARPU_HOME", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                               "starpu-home-bench"))
    if nprocs == 1:
        for k in ("STARPU_WORKERS_NOBIND", "STARPU_MPI_NOBIND"):
            env.pop(k, None)
        env.update(STARPU_NCPU="2", TILETRAIN_MPI="0")
        cmd = argv
    else:
        cmd = mpirun.command(nprocs, argv)
    env.update(env_extra)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    out = p.stdout + p.stderr
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{out[-4000:]}")
    return [json.loads(x) for x in re.findall(r"RESULT (\{[^{}]*\})", out)], out   # ranks may share a line


def by_config(results: list[dict]) -> dict:
    """One job's RESULT records merged per (config, mechanism): rank 0's step_s, every other
    field from whichever rank has it (e.g. order_r1 from rank 1)."""
    merged: dict = {}
    for r in results:
        e = merged.setdefault((r["config"], r["mechanism"]), {})
        for k, v in r.items():
            if k != "step_s" or r.get("rank", 0) == 0 or k not in e:
                e[k] = v
    return merged


def alternate_jobs(launch, repeats: int) -> tuple[list[dict], list[dict]]:
    """Part 2 of the protocol: launch(1) (the baseline job), launch(2), launch(1), ...:
    ``repeats`` mpirun jobs, each between two baseline jobs.  Returns (baseline jobs, mpirun
    jobs), each job as by_config()."""
    base, jobs = [by_config(launch(1))], []
    for _ in range(repeats):
        jobs.append(by_config(launch(2)))
        base.append(by_config(launch(1)))
    return base, jobs


def compare(base: list[dict], jobs: list[dict], against: str = BASELINE) -> list[dict]:
    """Rows for the baseline jobs' configurations and every mpirun configuration: median step_s
    over the jobs, the ratios to ``against`` (baseline time / its time; for an mpirun job, the
    mean of the baseline jobs before and after it) and their median; other fields from the
    last job."""
    ref = [b[(against, "-")]["step_s"] for b in base]
    rows = []
    for key in base[0]:
        steps = [b[key]["step_s"] for b in base]
        rows.append({**base[-1][key], "step_s": median(steps), "jobs": len(steps),
                     "ratios": [r / s for r, s in zip(ref, steps)]})
    for key in jobs[0]:
        steps = [j[key]["step_s"] for j in jobs]
        rows.append({**jobs[-1][key], "step_s": median(steps), "jobs": len(steps),
                     "ratios": [(ref[i] + ref[i + 1]) / 2 / s for i, s in enumerate(steps)]})
    for r in rows:
        r["ratio"] = median(r["ratios"])
    return rows


def ratio_text(ratios: list[float]) -> str:
    """'0.85x' for one ratio, '0.85x (0.80-0.90)' (median, range) for several."""
    m = f"{median(ratios):.2f}x"
    return m if len(ratios) == 1 else f"{m} ({min(ratios):.2f}-{max(ratios):.2f})"


def result_lines(text: str) -> list[dict]:
    """The JSON objects a worker process printed as ``RESULT {...}`` lines."""
    return [json.loads(line[7:]) for line in text.splitlines() if line.startswith("RESULT ")]


def run_worker(cmd: list[str], env: dict, label: str) -> list[dict] | None:
    """Run a benchmark's worker process; its RESULT lines, or None (its stderr tail printed)
    when it failed."""
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        print(f"{label}: the simulated process failed ({r.returncode}):\n{r.stderr[-3000:]}", file=sys.stderr)
        return None
    return result_lines(r.stdout)


def save_png(path: str, draw, panels: int = 1, size: tuple[float, float] = (5, 3.5), title: str | None = None) -> None:
    """A figure of ``panels`` plots side by side, each ``size`` inches, drawn by ``draw(axes)``
    (a list of matplotlib axes) and saved at ``path``; without matplotlib, a note on stderr."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"(matplotlib missing: no {os.path.basename(path)})", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, panels, figsize=(size[0] * panels, size[1]), squeeze=False)
    draw(list(axes[0]))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
