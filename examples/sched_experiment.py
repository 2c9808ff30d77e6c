"""Start your own scheduling study from here: one workload under three policies, the
metrics table, a Perfetto trace and a Gantt plot of each.

    python examples/sched_experiment.py            # writes sched_<policy>.json / .png here

Change WORKLOAD (a function that submits one step), POLICIES (any StarPU policy, or your own
C policy in csrc/sched/ -- copy csrc/sched/tt_cp.c), or the priorities (tt.pipeline).
"""
import numpy as np

import tiletrain as tt
import tiletrain.functional as F

POLICIES = ["lws", "dmdas", "tt-cp"]   # policies that use priorities (eager, dmda: range [0, 0])
N, TILE = 1024, 256


def make_workload():
    rng = np.random.default_rng(0)
    w1 = tt.from_numpy(rng.standard_normal((N, N)).astype(np.float32) * 0.03, TILE).requires_grad_()
    w2 = tt.from_numpy(rng.standard_normal((N, N)).astype(np.float32) * 0.03, TILE).requires_grad_()
    x = tt.from_numpy(rng.standard_normal((N, N)).astype(np.float32), TILE)

    def step():                                         # a 2-layer MLP, forward + backward
        w1.grad = w2.grad = None
        with tt.tag(phase="fwd", layer=0):
            h = F.gelu(x @ w1)
        with tt.tag(phase="fwd", layer=1):
            loss = tt.sum(h @ w2)
        loss.backward()                                 # tagged phase="bwd" by autograd
    return step


rows = []
for sched in POLICIES:
    with tt.init(ncpu=2, sched=sched, profile=True) as rt:
        step = make_workload()
        for _ in range(3):                              # warm-up (dm* policies calibrate here)
            step()
            tt.wait()
        with tt.trace.recording() as rec:
            with tt.pipeline.priority_hints(tt.pipeline.ONE_F_ONE_B):   # backward before forward
                step()
        m = tt.trace.metrics(rec.trace)
        tt.trace.save(rec.trace, f"sched_{sched}.json")  # open in https://ui.perfetto.dev
        try:
            tt.trace.gantt(rec.trace, f"sched_{sched}.png")
        except ImportError:
            pass                                        # pip install matplotlib for the plot
        rows.append((sched, m))

print(f"{'policy':>8} {'tasks':>6} {'makespan ms':>12} {'GFLOP/s':>8} {'bound ms':>9} {'efficiency':>10} "
      f"{'idle %':>7}")
for sched, m in rows:
    print(f"{sched:>8} {m.ntasks:6d} {m.makespan_us / 1e3:12.2f} {m.gflops:8.1f} {m.bound_us / 1e3:9.2f} "
          f"{m.efficiency:10.2f} {100 * m.mean_idle_fraction:7.1f}")
print("\ntraces: sched_<policy>.json (Perfetto), plots: sched_<policy>.png")
