"""Pipeline experiments in miniature, measured against the formulas.

  (a) fill-drain (GPipe): p stages x m micro-batches, no priorities: the measured idle
      fraction against (p-1)/(m+p-1)
  (b) dataflow + stage affinity + priorities (no hand-written schedule): the makespan of
      forward + backward against the 1F1B bound (m+p-1)(F+B)
  (c) backward split into input-gradient (dX) and weight-gradient (dW) tasks: the bubble
      against 1F1B's (p-1)(F+B+W), ZB-H1's (p-1)(F+B-W) and ZB-H2's (p-1)(F+B-2W)
  real layers (p = 2): two stages of Linear + GELU over micro-batches with autograd, each
      stage's forward and backward on its own worker
  gpt_schedule_run: a written schedule on a real GPT in one process (worker groups as ranks;
      ``tiletrain schedule run NAME --gpt LxC``)

Each function needs a runtime started with profile=True and at least p workers (for p > 2
on 2 cores use sleeping tasks: ``sleep=True``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..trace.metrics import compact, makespan, stage_bubbles
from ..trace.records import Trace, recording
from ..pipeline import formulas
from ..pipeline.priorities import bottom_level_priorities
from ..pipeline.synthetic import PipelinePlan, build_plan, data_names, submit


def peak_live_activations(trace: Trace) -> dict[int, int]:
    """Per stage: the most micro-batches whose activations were alive at once (from the start
    of a stage's forward to the end of its last backward task for that micro-batch)."""
    t = trace.tasks
    out: dict[int, int] = {}
    for s in np.unique(t["stage"][t["stage"] >= 0]):
        ev = []
        sel = t["stage"] == s
        for j in np.unique(t["microbatch"][sel & (t["microbatch"] >= 0)]):
            mine = sel & (t["microbatch"] == j)
            f = mine & (t["phase"] == "fwd")
            b = mine & (t["phase"] != "fwd")
            if f.any() and b.any():
                ev += [(float(t["start"][f].min()), 1), (float(t["end"][b].max()), -1)]
        live = peak = 0
        for _, d in sorted(ev, key=lambda e: (e[0], e[1])):
            live += d
            peak = max(peak, live)
        out[int(s)] = peak
    return out


@dataclass
class PipelineResult:
    plan: PipelinePlan
    trace: Trace
    makespan_us: float
    simulated_us: float
    idle_fraction: float          # mean over stages of idle / makespan
    bubble_us: float              # mean idle time of a stage
    stage_idle: dict = field(default_factory=dict)
    peak_activations: dict = field(default_factory=dict)

    @property
    def formula(self) -> dict:
        pl = self.plan
        W = pl.W
        return {
            "gpipe_idle_fraction": formulas.gpipe_idle_fraction(pl.p, pl.m),
            "one_f_one_b_makespan_us": formulas.one_f_one_b_makespan(pl.p, pl.m, pl.F, pl.B, W),
            "one_f_one_b_bubble_us": formulas.one_f_one_b_bubble(pl.p, pl.F, pl.B, W),
            "zb_h1_bubble_us": formulas.zb_h1_bubble(pl.p, pl.F, pl.B, W),
            "zb_h2_bubble_us": formulas.zb_h2_bubble(pl.p, pl.F, pl.B, W),
        }


def run(plan: PipelinePlan, sleep: bool = True, priorities: np.ndarray | None = None) -> PipelineResult:
    """Submit the plan once (data created first, outside the recording), wait, measure."""
    from ..runtime import wait
    from ..tensors import from_numpy
    data = {name: from_numpy(np.zeros(1)) for name in data_names(plan)}
    wait()
    with recording() as rec:
        submit(plan, sleep=sleep, data=data, priorities=priorities)
    return measure(plan, rec.trace)


def measure(plan: PipelinePlan, tr: Trace) -> PipelineResult:
    """The result of one recorded run of ``plan``."""
    T = makespan(tr)
    bub = stage_bubbles(tr)
    idle = [b["idle_us"] / (T * b["workers"]) for b in bub.values()]
    return PipelineResult(plan, tr, T, plan.simulate().makespan, float(np.mean(idle)),
                          float(np.mean([b["idle_us"] / b["workers"] for b in bub.values()])),
                          {s: b["idle_over_total"] for s, b in bub.items()}, peak_live_activations(tr))


def compacted(r: PipelineResult) -> PipelineResult:
    """The result of the run's order alone (tiletrain.trace.metrics.compact): the same tasks
    on the same workers in the same order, without the gaps the runtime or the host added."""
    return measure(r.plan, compact(r.trace))


def run_bottom_level(plan: PipelinePlan, sleep: bool = True) -> tuple[PipelineResult, PipelineResult]:
    """The automatic critical-path mode: run once, take each task's bottom level from the
    recorded durations and DAG, run again with those priorities.  Returns both runs."""
    first = run(plan, sleep)
    prios = bottom_level_priorities(first.trace)
    return first, run(plan, sleep, priorities=prios)


def _row(name: str, r: PipelineResult, **extra) -> dict:
    pl = r.plan
    return {"experiment": name, "p": pl.p, "m": pl.m, "split": pl.split, "priorities": pl.priorities,
            "makespan_ms": r.makespan_us / 1e3, "simulated_ms": r.simulated_us / 1e3,
            "idle_fraction": r.idle_fraction, "bubble_ms": r.bubble_us / 1e3,
            "peak_act_stage0": r.peak_activations.get(0, 0), **extra}


def gpipe_fill_drain(ps=(2, 4), ms=(1, 2, 4, 8), F: float = 4000.0, B: float = 4000.0,
                     sleep: bool = True) -> list[dict]:
    """(a): measured idle fraction against (p-1)/(m+p-1), no priorities."""
    rows = []
    for p in ps:
        for m in ms:
            r = run(build_plan(p, m, F, B, priorities="none"), sleep)
            f = formulas.gpipe_idle_fraction(p, m)
            rows.append(_row("a gpipe", r, formula="(p-1)/(m+p-1)", formula_value=f,
                             measured=r.idle_fraction, diff_points=100 * (r.idle_fraction - f)))
    return rows


def one_f_one_b(ps=(2, 4), ms=(4, 8), F: float = 4000.0, B: float = 4000.0, priorities: str = "1f1b",
                sleep: bool = True) -> list[dict]:
    """(b): makespan of forward + backward (dataflow, affinity, priorities) against the 1F1B
    bound (m+p-1)(F+B)."""
    rows = []
    for p in ps:
        for m in ms:
            r = run(build_plan(p, m, F, B, priorities=priorities), sleep)
            bound = formulas.one_f_one_b_makespan(p, m, F, B)
            rows.append(_row("b 1f1b", r, formula="(m+p-1)(F+B)", formula_value=bound / 1e3,
                             measured=r.makespan_us / 1e3, ratio=r.makespan_us / bound))
    return rows


def zero_bubble(ps=(2, 4), m: int = 8, F: float = 3000.0, B: float = 3000.0, W: float = 3000.0,
                sleep: bool = True) -> list[dict]:
    """(c): bubble with backward as one task (B+W) against backward split into dX (B) and dW
    (W) tasks with zero-bubble priorities; formulas 1F1B (p-1)(F+B+W), ZB-H1 (p-1)(F+B-W)."""
    rows = []
    for p in ps:
        whole = run(build_plan(p, m, F, B, W, split=False, priorities="1f1b"), sleep)
        split = run(build_plan(p, m, F, B, W, split=True, priorities="zb"), sleep)
        f1 = formulas.one_f_one_b_bubble(p, F, B, W)
        fz = formulas.zb_h1_bubble(p, F, B, W)
        rows.append(_row("c whole B", whole, formula="1F1B (p-1)(F+B+W)", formula_value=f1 / 1e3,
                         measured=whole.bubble_us / 1e3))
        rows.append(_row("c split dX/dW", split, formula="ZB-H1 (p-1)(F+B-W)", formula_value=fz / 1e3,
                         measured=split.bubble_us / 1e3))
    return rows


def real_layers(m: int = 4, B: int = 4, T: int = 128, C: int = 256, tile: int = 128, priorities: bool = True,
                seed: int = 0) -> PipelineResult:
    """p = 2 real stages (x @ W + b, then GELU) over m micro-batches: forward of every
    micro-batch, then backward, each stage's tasks on its own worker (tasks of stage s on
    worker s), backward above forward when ``priorities``.  Returns the measured run (the
    plan field describes the equivalent synthetic pipeline)."""
    import tiletrain as tt
    import tiletrain.functional as F_
    from ..pipeline.priorities import ONE_F_ONE_B, priority_hints, stage

    rng = np.random.default_rng(seed)
    p = 2
    Ws = [tt.from_numpy((rng.standard_normal((C, C)) * 0.05).astype(np.float32), tile).requires_grad_()
          for _ in range(p)]
    bs = [tt.from_numpy(np.zeros(C, np.float32), tile).requires_grad_() for _ in range(p)]
    xs = [tt.from_numpy(rng.standard_normal((B, T, C)).astype(np.float32), (B, tile, tile)) for _ in range(m)]
    gs = [tt.from_numpy(rng.standard_normal((B, T, C)).astype(np.float32), (B, tile, tile)) for _ in range(m)]
    tt.wait()
    hints = priority_hints(ONE_F_ONE_B) if priorities else _null()
    with hints, recording() as rec:
        ins: list[list] = [[None] * m for _ in range(p)]
        outs: list[list] = [[None] * m for _ in range(p)]
        for j in range(m):
            h = xs[j]
            for s in range(p):
                with stage(s), tt.tag(phase="fwd", microbatch=j):
                    x = h.detach().requires_grad_() if s > 0 else h
                    y = F_.gelu(F_.linear(x, Ws[s], bs[s]), approximate="tanh")
                ins[s][j], outs[s][j] = x, y
                h = y
        for j in range(m):
            g = gs[j]
            for s in reversed(range(p)):
                with stage(s), tt.tag(microbatch=j):
                    outs[s][j].backward(g)
                g = ins[s][j].grad if s > 0 else None
    tr = rec.trace
    fwd = tr.duration[tr.tasks["phase"] == "fwd"].sum() / (p * m)
    bwd = tr.duration[tr.tasks["phase"] == "bwd"].sum() / (p * m)
    plan = build_plan(p, m, float(fwd), float(bwd), priorities="1f1b" if priorities else "none")
    return measure(plan, tr)


def gpt_schedule_run(schedule, layers: int, width: int, batch: int = 2, seq_len: int = 128,
                     mechanism: str = "deps", seed: int = 0):
    """``schedule`` on a float32 GPT (``layers`` x ``width``, vocabulary 256, 4 heads) in one
    process, each schedule rank a worker group (``tiletrain.pipeline.model.run_model``:
    one warm-up step, then one recorded step of micro-batches of ``batch`` x ``seq_len``
    random tokens).  Needs a runtime with profile=True and a worker per rank."""
    from ..nn import GPT, GPTConfig
    from ..pipeline.model import run_model
    model = GPT(GPTConfig(vocab_size=256, block_size=seq_len, n_layer=layers, n_head=4, n_embd=width,
                          dropout=0.0), seed=seed)
    ids = np.random.default_rng(seed).integers(0, 256, size=(schedule.microbatches, batch, seq_len + 1))
    return run_model(model, schedule, list(ids[:, :, :-1]), list(ids[:, :, 1:]), mechanism)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def format_rows(rows: list[dict]) -> str:
    """A plain-text table of experiment rows."""
    if not rows:
        return "(no rows)"
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]

    def fmt(v):
        if isinstance(v, float):
            return f"{v:.3f}"
        return str(v)
    cells = [keys] + [[fmt(r.get(k, "")) for k in keys] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(keys))]
    lines = ["  ".join(c[i].rjust(widths[i]) for i in range(len(keys))) for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


__all__ = ["PipelineResult", "run", "run_bottom_level", "gpipe_fill_drain", "one_f_one_b", "zero_bubble",
           "real_layers", "gpt_schedule_run", "peak_live_activations", "format_rows"]
