"""Task records collected in C: fields, tags, the recorded DAG, Chrome/Perfetto round trip,
bad trace files, and tracing with profiling off."""
import json

import numpy as np
import pytest

import tiletrain as tt
from tiletrain.pipeline import build_plan, submit
from tiletrain.pipeline.synthetic import data_names
from tiletrain.trace import TraceError

from profiled_runtime import default_runtime_afterwards, restart  # noqa: F401 (autouse fixture)


@pytest.fixture
def profiled():
    return restart()


def test_tracing_needs_profiling():
    restart(profile=False)
    for call in (tt.trace.read, tt.trace.start, tt.trace.reset, tt.trace.worker_stats):
        with pytest.raises(RuntimeError, match=r"profiling is off.*profile=True"):
            call()
    with pytest.raises(RuntimeError, match="profiling is off"):
        tt.current().trace("/tmp/never.json")


def test_records_fields_and_tags(profiled, rng):
    a = tt.from_numpy(rng.standard_normal((8, 6)), tiles=(4, 3))
    b = tt.from_numpy(rng.standard_normal((6, 4)), tiles=(3, 4))
    with tt.trace.recording() as rec:
        with tt.tag(phase="fwd", layer=3, microbatch=1):
            c = a @ b                                   # 2x1 output tiles, 2 gemm tasks each
            with tt.tag(layer=4):
                d = c * 2.0
        e = d + c
    tr = rec.trace
    t = tr.tasks
    assert list(t["kernel"]) == ["gemm"] * 4 + ["scale"] * 2 + ["add"] * 2
    assert list(t["phase"]) == ["fwd"] * 6 + [""] * 2
    assert list(t["layer"]) == [3] * 4 + [4] * 2 + [-1] * 2
    assert list(t["microbatch"]) == [1] * 6 + [-1] * 2
    assert (t["stage"] == -1).all() and (t["rank"] == 0).all()
    assert list(t["id"]) == list(range(8))
    np.testing.assert_allclose(t["flops"][:4], 2 * 4 * 4 * 3)
    # gemm's integer arguments: dtype (1 = float64), batch, m, n, k, ta, tb, cacc
    assert t["iargs"][:4].tolist() == [[1, 1, 4, 4, 3, 0, 0, 0]] * 4
    assert (t["iargs"][4:, 0] == 1).all()            # scale/add: dtype, then their own ints
    # worker CPU time since its previous completion: -1 (none yet) or a duration, some measured
    assert ((t["cpu"] == -1.0) | (t["cpu"] >= 0.0)).all() and (t["cpu"] >= 0.0).any()
    assert set(t["worker"]) <= {0, 1} and (t["memnode"] == 0).all()
    assert (t["submit"] <= t["start"] + 1e-6).all() and (t["start"] <= t["end"]).all()
    assert tr.meta["sched"] == profiled.sched and len(tr.workers) == 2
    np.testing.assert_allclose(e.numpy(), 3 * (a.numpy() @ b.numpy()), rtol=1e-12)
    assert tt.trace.current_tags() == {"phase": None, "layer": None, "microbatch": None, "stage": None}


def test_recorded_dag_of_small_ops(profiled):
    """
    x (host) --scale--> y          task 0 writes y
    y --add(y, x)--> z             task 1 reads y: depends on 0
    axpy_(y, z): y += z            task 2 writes y after 1 read it: depends on 0 (RW after its write) and 1
    z read again by scale -> w     task 3 reads z: depends on 1 (its writer)
    """
    from tiletrain.ops.basic import axpy_
    x = tt.from_numpy(np.arange(4.0), tiles=4)
    with tt.trace.recording() as rec:
        y = x * 2.0
        z = y + x
        axpy_(y, z, 1.0, 1.0)
        w = z * 3.0
    deps = rec.trace.dep_lists()
    assert [list(d) for d in deps] == [[], [0], [1], [1]]
    assert len(rec.trace) == 4
    np.testing.assert_allclose(y.numpy(), 2 * np.arange(4.0) + 3 * np.arange(4.0))
    del w


@pytest.mark.parametrize("split", [False, True])
def test_recorded_dag_equals_dataflow_of_the_plan(profiled, split):
    """The C capture (last writer / readers per handle) against the same rule in Python."""
    plan = build_plan(2, 3, 0, 0, 0, split=split, optimizer_us=1.0)
    data = {n: tt.from_numpy(np.zeros(1)) for n in data_names(plan)}
    tt.wait()
    with tt.trace.recording() as rec:
        submit(plan, sleep=False, data=data)
    tr = rec.trace
    assert len(tr) == len(plan.tasks)
    assert [tuple(d.tolist()) for d in tr.dep_lists()] == plan.deps
    assert list(tr.tasks["stage"]) == [t.stage for t in plan.tasks]
    assert list(tr.tasks["worker"]) == [t.worker for t in plan.tasks]      # stage affinity
    assert list(tr.tasks["phase"]) == [t.phase for t in plan.tasks]


def test_autograd_and_optimizer_tag_their_phases(profiled, rng):
    import tiletrain.functional as F
    w = tt.from_numpy(rng.standard_normal((6, 4)), tiles=3).requires_grad_()
    x = tt.from_numpy(rng.standard_normal((5, 6)), tiles=3)
    opt = tt.optim.SGD([w], lr=0.1)
    with tt.trace.recording() as rec:
        with tt.tag(phase="fwd"):
            loss = tt.sum(F.gelu(x @ w))
        loss.backward()
        opt.step()
    ph = rec.trace.tasks["phase"]
    n_fwd, n_bwd, n_opt = ((ph == p).sum() for p in ("fwd", "bwd", "opt"))
    assert n_fwd > 0 and n_bwd > 0 and n_opt == 4      # one sgd task per parameter tile
    assert list(ph) == sorted(ph, key=["fwd", "bwd", "opt"].index)
    assert (rec.trace.tasks["kernel"][ph == "opt"] == "sgd").all()


def test_tag_validation_and_nesting():
    with pytest.raises(ValueError, match="phase"):
        with tt.tag(phase=""):
            pass
    with pytest.raises(TypeError, match="layer must be an int"):
        with tt.tag(layer=1.5):
            pass
    with pytest.raises(ValueError, match="microbatch must be >= 0"):
        with tt.tag(microbatch=-2):
            pass
    with tt.tag(phase="fwd", layer=1):
        with tt.tag(phase="bwd", stage=2):
            assert tt.trace.current_tags() == {"phase": "bwd", "layer": 1, "microbatch": None, "stage": 2}
        assert tt.trace.current_tags()["phase"] == "fwd"


def test_chrome_round_trip(profiled, tmp_path):
    x = tt.from_numpy(np.ones((4, 4)), tiles=2)
    with tt.trace.recording() as rec:
        with tt.tag(phase="fwd"):
            y = (x @ x) * 2.0
        z = tt.sum(y)
    tr = rec.trace
    path = tmp_path / "t.json"
    assert len(profiled.trace(path)) == len(tr)  # Runtime.trace: everything since the last reset
    doc = json.loads(path.read_text())
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(tr)
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert len(names) == 2                                  # one track per worker
    assert {e["name"] for e in xs} == {"fwd", "sum_axis"}   # named (so coloured) by phase, else kernel
    assert all(e["tid"] == e["args"]["id"] * 0 + int(tr.tasks["worker"][e["args"]["id"]]) for e in xs)
    tt.trace.save(tr, path)
    back = tt.trace.load(path)
    assert np.array_equal(back.tasks, tr.tasks) and np.array_equal(back.deps, tr.deps)
    assert back.workers == tr.workers and back.meta == tr.meta
    tt.trace.save(tr, tmp_path / "f.json", flows=True)
    assert np.array_equal(tt.trace.load(tmp_path / "f.json").deps, tr.deps)
    assert float(z) == 4 * 4 * 4 * 2


def test_bad_trace_files(tmp_path):
    cases = {
        "empty.json": ("", "is empty"),
        "trunc.json": ('{"traceEvents": [{"ph": "X", "ts": 1', "not valid JSON"),
        "scalar.json": ("42", "top level is a int"),
        "noevents.json": ('{"traceEvents": [{"ph": "M", "name": "x"}]}', "no task events"),
        "noKey.json": ('{"events": []}', "without 'traceEvents'"),
        "badts.json": ('[{"ph": "X", "ts": "soon", "dur": 1, "args": {"id": 0}}]', "corrupt task event"),
        "baddeps.json": ('[{"ph": "X", "ts": 0, "dur": 1, "args": {"id": 0, "deps": [3]}}]',
                         "not an earlier task"),
    }
    for name, (text, msg) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(TraceError, match=msg):
            tt.trace.load(tmp_path / name)
    with pytest.raises(TraceError, match="does not exist"):
        tt.trace.load(tmp_path / "missing.json")
    from tiletrain.cli import main
    assert main(["trace", "show", str(tmp_path / "empty.json")]) == 2


def test_foreign_chrome_trace_loads(tmp_path):
    (tmp_path / "f.json").write_text(json.dumps([
        {"ph": "X", "name": "a", "ts": 0, "dur": 5, "pid": 0, "tid": 0},
        {"ph": "X", "name": "b", "ts": 5, "dur": 5, "pid": 0, "tid": 1}]))
    tr = tt.trace.load(tmp_path / "f.json")
    assert len(tr) == 2 and tt.trace.makespan(tr) == 10 and list(tr.tasks["kernel"]) == ["a", "b"]


def test_worker_counters_and_reset(profiled):
    x = tt.from_numpy(np.ones(64), tiles=8)
    tt.trace.reset()
    with tt.trace.recording() as rec:
        y = x * 2.0 + 1.0
    tr = rec.trace
    assert sum(w["ntasks"] for w in tr.workers) == len(tr) == 16
    for w in tr.workers:
        assert w["total_us"] >= w["executing_us"] >= 0 and w["idle_us"] >= 0
    assert tt.trace.is_recording()
    tt.trace.reset()
    assert len(tt.trace.read()) == 0
    del y


def test_gantt_png(profiled, tmp_path):
    x = tt.from_numpy(np.ones((8, 8)), tiles=4)
    with tt.trace.recording() as rec:
        with tt.tag(phase="fwd"):
            y = x @ x
        z = tt.sum(y)
    out = tt.trace.gantt(rec.trace, tmp_path / "g.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    del z


def test_cli_trace_run_and_show(tmp_path, capsys):
    from tiletrain.cli import main
    if tt.is_initialized():
        tt.shutdown()
    out = tmp_path / "g.json"
    assert main(["trace", "run", "--ncpu", "2", "--sched", "tt-cp", "--workload", "gemm", "--tile", "64",
                 "--param", "n=128", "--warmup", "1", "-o", str(out), "--png", str(tmp_path / "g.png")]) == 0
    assert main(["trace", "show", str(out)]) == 0
    text = capsys.readouterr().out
    assert "efficiency" in text and "critical path" in text and (tmp_path / "g.png").exists()
    assert len(tt.trace.load(out)) == 8   # (128/64)^3 gemm tasks


def test_gpt_workload_records_a_full_training_step(profiled):
    from tiletrain.trace.metrics import critical_path, makespan
    from tiletrain.experiments.workloads import make
    w = make("gpt", 32, n_layer=1, n_embd=32, n_head=2, T=16, B=2, vocab=17)
    w.setup()
    with tt.trace.recording() as rec:
        w.step()
    ph = rec.trace.tasks["phase"]
    for phase in ("fwd", "bwd", "opt"):
        assert (ph == phase).sum() > 0, phase
    opt_kernels = set(rec.trace.tasks["kernel"][ph == "opt"])
    assert opt_kernels == {"adamw", "fill"}  # first step: AdamW's moment tensors start at zero
    assert makespan(rec.trace) > 0 and critical_path(rec.trace)[0] > 0
    w.teardown()


def test_block_workload_runs_gelu_in_the_gemm_epilogue(profiled):
    from tiletrain.experiments.workloads import make
    w = make("block", 32, C=64, H=2, T=32, B=2)
    w.setup()
    with tt.trace.recording() as rec:
        w.step()
    k = set(rec.trace.tasks["kernel"])
    assert "gemm_gelu" in k and "gelu" not in k     # the MLP's GELU rides on its first linear layer
    assert {"fwd", "bwd"} <= set(rec.trace.tasks["phase"])
    w.teardown()
