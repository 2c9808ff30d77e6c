"""Pipelines without a flush: the pb and local schedules (weight versions, delays, local
dependencies, queue depth), SC and LWP against a NumPy reference of their formulas, and
ModelPipeline on stage modules: pb with one stage is plain SGD, local with one stage is
ordinary training, and the bad inputs; on GPT (tests/pipeline/test_noflush_gpt.py)."""
import json

import numpy as np
import pytest

import tiletrain as tt
from tiletrain import functional as F
from tiletrain.nn import Linear, LocalHeads, ReLU, Sequential
from tiletrain.optim import SGD, AdamW, spike_coefficients
from tiletrain.pipeline import Action, Schedule, ScheduleError, formulas, schedules
from tiletrain.pipeline import ModelPipeline


# ---------------------------------------------------------------------------- schedules
def test_pb_weight_versions_match_the_hand_computed_table_for_p3():
    s = schedules.get("pb", stages=3, microbatches=6)
    v = s.weight_versions()
    # (read, written) worked out by hand from the rank orders: rank r runs 2(p-1-r) warm-up
    # forwards, then F, B pairs; every B writes the next version, reading its forward's
    hand = {
        0: "0F0 0F1 0F2 0F3 0F4:0 0B0:0>1 0F5:1 0B1:0>2 0B2:0>3 0B3:0>4 0B4:0>5 0B5:1>6",
        1: "1F0:0 1F1:0 1F2:0 1B0:0>1 1F3:1 1B1:0>2 1F4:2 1B2:0>3 1F5:3 1B3:1>4 1B4:2>5 1B5:3>6",
        2: "2F0:0 2B0:0>1 2F1:1 2B1:1>2 2F2:2 2B2:2>3 2F3:3 2B3:3>4 2F4:4 2B4:4>5 2F5:5 2B5:5>6",
    }
    for r, text in hand.items():
        cells = text.split()
        assert [str(a) for a in s.actions[r]] == [c.split(":")[0] for c in cells]
        for c in cells:
            name, _, rw = c.partition(":")
            read, _, wrote = (rw or "0").partition(">")
            assert v[Action.parse(name)] == (int(read), int(wrote) if wrote else None), name
    assert s.delays() == [4, 2, 0]                   # 2(p-1-s): LayerPipe2's 2S(l)
    assert s.kept_versions()[2] == 1 and s.kept_versions()[0] == 3


def test_pb_delays_and_fill_and_no_steady_bubble():
    for p in (2, 3, 4):
        s = schedules.get("pb", stages=p, microbatches=16)
        assert s.delays() == [2 * (p - 1 - st) for st in range(p)]
        assert s.kept_versions() == [d + 1 for d in s.delays()]
        sim = s.simulate()
        assert sim.steady_idle_fraction == 0.0
        assert sim.fill == formulas.pb_fill(p)
        assert schedules.get("1f1b", p, 16).delays() == [0] * p      # a flush: no delay


def test_pb_per_update_and_per_layer_delays_match_hand_tables():
    # p = 3, m = 6: each B's delay (written - 1 - read, from the hand table above); the fill's
    # first updates are less late than the steady state's 2(p-1-s)
    s = schedules.get("pb", stages=3, microbatches=6)
    hand = {0: [0, 1, 2, 3, 4, 4], 1: [0, 1, 2, 2, 2, 2], 2: [0, 0, 0, 0, 0, 0]}
    got = s.update_delays()
    assert {a.kind for a in got} == {"B"} and len(got) == 18
    for st, ds in hand.items():
        assert [got[Action(st, "B", j)] for j in range(6)] == ds
    assert s.delays() == [max(d) for d in hand.values()] == formulas.pb_delays(3) == [4, 2, 0]
    # D_s = min(2(p-1-s), m-1): a run of m micro-batches has at most m-1 earlier updates
    table = {(4, 1): [0, 0, 0, 0], (4, 2): [1, 1, 1, 0], (4, 4): [3, 3, 2, 0], (4, 6): [5, 4, 2, 0],
             (4, 7): [6, 4, 2, 0], (4, 16): [6, 4, 2, 0], (1, 5): [0], (2, 2): [1, 0]}
    for (p, m), want in table.items():
        assert schedules.get("pb", p, m).delays() == formulas.pb_delays(p, m) == want, (p, m)
    # LayerPipe2's Delay(l) = 2 S(l), S(l) the stages downstream of layer l: every layer a
    # stage (5 layers, 5 stages), and layers in groups (2, 1, 3 layers on 3 stages) sharing
    # their group's delay
    assert formulas.layerpipe2_delays([1] * 5) == [8, 6, 4, 2, 0]
    assert schedules.get("pb", 5, 16).layer_delays([1] * 5) == [8, 6, 4, 2, 0]
    assert formulas.layerpipe2_delays([2, 1, 3]) == [4, 4, 2, 0, 0, 0]
    assert s.layer_delays([2, 1, 3]) == [4, 4, 2, 0, 0, 0]
    assert schedules.get("pb", 3, 2).layer_delays([2, 1, 3]) == [1, 1, 1, 0, 0, 0]   # m = 2: fewer
    assert schedules.get("1f1b", 3, 6).layer_delays([2, 1, 3]) == [0] * 6              # a flush
    assert schedules.get("local", 3, 6).layer_delays([1, 1, 1]) == [0] * 3
    with pytest.raises(ScheduleError, match="layers must list, per virtual stage .3."):
        s.layer_delays([2, 1])
    with pytest.raises(ScheduleError, match="ints >= 1"):
        s.layer_delays([2, 0, 1])
    with pytest.raises(ValueError, match="ints >= 1"):
        formulas.layerpipe2_delays([])


def test_local_dependencies_and_queue():
    s = schedules.get("local", stages=3, microbatches=5, queue=1)
    assert s.local and not s.flush and s.delays() == [0, 0, 0] and s.kept_versions() == [1, 1, 1]
    flat, deps = s.flat(), s.dependencies()
    for a, d in zip(flat, deps):
        got = {str(flat[i]) for i in d}
        if a.kind == "B":
            assert got == {f"{a.stage}F{a.microbatch}"}          # its own forward only
        elif a.stage < 2 and a.microbatch >= 1:
            assert f"{a.stage + 1}F{a.microbatch - 1}" in got   # the queue of depth 1 is full
    assert schedules.get("local", 3, 5, queue=0).dependencies()[0] == []
    sim = schedules.get("local", 4, 8).simulate()
    assert sim.idle_fraction == pytest.approx(3 / (3 + 3 * 8))   # (p-1)F over (p-1)F + m(F+B)
    with pytest.raises(ValueError, match="queue must be an int >= 0"):
        schedules.get("local", 3, 5, queue=-1)
    with pytest.raises(ValueError, match="only local takes queue"):
        schedules.get("pb", 3, 5, queue=1)
    with pytest.raises(ScheduleError, match="queue depth must be"):
        type(s)("x", s.actions, local=True, queue=-2)


@pytest.mark.parametrize("name,kw", [("pb", {}), ("local", {"queue": 2}), ("local", {"queue": 0}),
                                     ("local", {"queue": 1}), ("emergent", {})])
def test_csv_round_trip_keeps_flush_local_and_queue(tmp_path, name, kw):
    s = schedules.get(name, stages=3, microbatches=5, **kw)
    path = tmp_path / "mine.csv"
    text = s.to_csv(path)
    head = text.splitlines()[0].split(",")
    assert head[0] == "#schedule" and len(text.splitlines()) == 4   # the header, then one row per rank
    back = Schedule.from_csv(path).validate()
    assert back.name == "mine"
    for f in ("actions", "stages", "microbatches", "chunks", "ordered", "flush", "local", "queue"):
        assert getattr(back, f) == getattr(s, f), f
    assert back.weight_versions() == s.weight_versions() and back.delays() == s.delays()
    assert back.dependencies() == s.dependencies() and back.kept_versions() == s.kept_versions()
    assert back.simulate().makespan == s.simulate().makespan
    # an ordinary schedule's CSV is PyTorch's layout unchanged: no header
    assert schedules.get("1f1b", 3, 5).to_csv().splitlines()[0] == "0F0,0F1,0F2,0B0,0F3,0B1,0F4,0B2,0B3,0B4"


def test_csv_without_header_reads_as_before_and_bad_header_fields_are_refused(tmp_path, capsys):
    old = "0F0,0F1,0F2,0B0,0F3,0B1,0B2,0B3\n1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3\n"   # pb's actions, no header
    s = Schedule.from_csv(old).validate()
    assert s.flush and not s.local and s.ordered and s.delays() == [0, 0]
    pb = Schedule.from_csv("#schedule,flush=false\n" + old).validate()
    assert pb.actions == s.actions and pb.delays() == schedules.get("pb", 2, 4).delays() == [2, 0]
    assert Schedule.from_csv("#schedule, local = TRUE ,queue=3,flush=0\n" + old).queue == 3
    for bad, msg in [("#schedule,flush=maybe", "flush='maybe': expected true or false"),
                     ("#schedule,speed=2", "header field 'speed=2': expected key=value with key one of flush"),
                     ("#schedule,flush", "header field 'flush': expected key=value"),
                     ("#schedule,flush=false,flush=true", "'flush' given twice"),
                     ("#schedule,local=true,queue=-1", "queue='-1': expected an integer >= 0"),
                     ("#schedule,local=true,queue=2.5", "queue='2.5': expected an integer"),
                     ("#schedule,queue=2", "a queue depth is for local-learning schedules"),
                     ("#tiletrain,flush=false", "expected '#schedule' as its first cell")]:
        with pytest.raises(ScheduleError, match=msg):
            Schedule.from_csv(bad + "\n" + old)
    with pytest.raises(ScheduleError, match="line 3: a #schedule header row is only allowed on the first line"):
        Schedule.from_csv(old + "#schedule,flush=false\n")
    with pytest.raises(ScheduleError, match="no actions"):
        Schedule.from_csv("#schedule,flush=false\n\n")
    # the CLI: show --csv writes the header, run FILE.csv reads pb back (its delays, its fill)
    from tiletrain.cli import main
    assert main(["schedule", "show", "pb", "--stages", "2", "--microbatches", "4", "--csv",
                 str(tmp_path / "pb.csv")]) == 0
    capsys.readouterr()
    assert main(["schedule", "show", str(tmp_path / "pb.csv")]) == 0
    assert "weight delay per stage 2 0" in capsys.readouterr().out


def test_cli_show_and_run_pb_and_local(capsys):
    from tiletrain.cli import main
    if tt.is_initialized():
        tt.shutdown()
    assert main(["schedule", "show", "pb", "--stages", "3", "--microbatches", "6"]) == 0
    out = capsys.readouterr().out
    assert "steady-state idle fraction 0.0000" in out and "weight delay per stage 4 2 0" in out
    assert main(["schedule", "run", "local", "--stages", "2", "--microbatches", "4", "--queue", "1",
                 "--usec", "2000", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schedule"] == "local" and d["queue"] == 1 and d["order_fraction"] == 1.0
    assert d["formula_idle_fraction"] == pytest.approx(1 / (1 + 12))
    assert main(["schedule", "run", "pb", "--stages", "2", "--microbatches", "4", "--usec", "2000", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["delays"] == [2, 0] and d["simulated_fill"] == 1 and "fill_s" in d
    with pytest.raises(SystemExit):
        main(["schedule", "show", "local", "--stages", "2", "--microbatches", "2", "--queue", "-1"])
    assert "queue depth must be >= 0" in capsys.readouterr().err


# ---------------------------------------------------------------------------- SC and LWP
def _sgd_reference(w, grads, lr, m, D, comp):
    """Kosson et al.: v_{t+1} = m v_t + g_t; SC: w -= lr (a v_{t+1} + b g_t), a = m^D,
    b = (1-m^D)/(1-m); plain: w -= lr v_{t+1}; LWP: w_hat = w - lr D v."""
    v = None
    preds = []
    for g in grads:
        preds.append(w - lr * D * (v if v is not None else 0.0))
        v = g.copy() if v is None else m * v + g
        if comp in ("sc", "sc+lwp"):
            a, b = m ** D, (1 - m ** D) / (1 - m)
            w = w - lr * (a * v + b * g)
        else:
            w = w - lr * v
    return w, preds


@pytest.mark.parametrize("comp", [None, "sc", "lwp", "sc+lwp"])
def test_sgd_compensation_matches_numpy_reference(comp, rng):
    w0 = rng.normal(size=(5, 3))
    grads = [rng.normal(size=(5, 3)) for _ in range(4)]
    D, lr, m = 3, 0.1, 0.9
    p = tt.nn.Parameter(w0.copy())
    opt = SGD([p], lr=lr, momentum=m, compensation=comp, delay=D)
    preds = []
    for g in grads:
        preds.append(opt.predict()[0].detach().numpy())
        p.grad = tt.from_numpy(g)
        opt.step()
    want, want_preds = _sgd_reference(w0, grads, lr, m, D, comp)
    np.testing.assert_allclose(p.detach().numpy(), want, rtol=1e-12, atol=1e-12)
    if comp in ("lwp", "sc+lwp"):
        for got, ref in zip(preds, want_preds):
            np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    assert spike_coefficients(0.9, 0) == (1.0, 0.0)      # no delay: plain momentum


def test_adamw_spike_compensation_matches_numpy_reference(rng):
    w0 = rng.normal(size=(4, 4))
    grads = [rng.normal(size=(4, 4)) for _ in range(3)]
    lr, b1, b2, eps, wd, D = 0.01, 0.9, 0.99, 1e-8, 0.1, 2
    p = tt.nn.Parameter(w0.copy())
    opt = AdamW([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, compensation="sc+lwp", delay=D)
    w, m, v, u = w0.copy(), 0 * w0, 0 * w0, None
    for t, g in enumerate(grads, 1):
        pred = opt.predict()[0].numpy()
        np.testing.assert_allclose(pred, w if u is None else w - D * u, rtol=1e-12, atol=1e-12)
        p.grad = tt.from_numpy(g)
        opt.step()
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        a, b = b1 ** D, (1 - b1 ** D) / (1 - b1)
        u = lr * ((a * m + b * (1 - b1) * g) / (1 - b1 ** t) / (np.sqrt(v / (1 - b2 ** t)) + eps) + wd * w)
        w = w - u
        np.testing.assert_allclose(p.detach().numpy(), w, rtol=1e-10, atol=1e-12)


def test_compensation_bad_input():
    p = tt.nn.Parameter(np.zeros(3))
    with pytest.raises(ValueError, match="compensation must be one of"):
        SGD([p], lr=0.1, momentum=0.9, compensation="spike")
    with pytest.raises(ValueError, match="needs 0 < momentum < 1"):
        SGD([p], lr=0.1, compensation="sc", delay=2)
    with pytest.raises(ValueError, match="delay must be an int >= 0"):
        AdamW([p], compensation="lwp", delay=-1)


# ---------------------------------------------------------------------------- stage modules
def _loss(logits, y):
    return F.cross_entropy(logits, tt.from_numpy(np.asarray(y, np.int64)))


def _stages(p, seed=1):
    rng = np.random.default_rng(seed)
    return [Sequential(Linear(8 if s == 0 else 16, 16, dtype=np.float64, rng=rng), ReLU()) if s < p - 1
            else Linear(8 if p == 1 else 16, 4, dtype=np.float64, rng=rng) for s in range(p)]


def _data(n=6, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 5, 8)), rng.integers(0, 4, size=(n, 5))


def _pipe(stages, name, optimizer, m, queue=None, **kw):
    """ModelPipeline on stage modules with the built-in schedule ``name`` for m micro-batches."""
    return ModelPipeline(stages, schedules.get(name, len(stages), m, queue=queue), optimizer=optimizer,
                         loss_fn=_loss, **kw)


def _plain_sgd(X, Y, comp=None):
    """The ordinary loop: one SGD step per micro-batch on the whole model."""
    model = Sequential(*_stages(1))
    opt = SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in zip(X, Y):
        loss = _loss(model(tt.from_numpy(x)), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss))
    return losses, [p.detach().numpy() for p in model.parameters()]


@pytest.mark.parametrize("name", ["pb", "local"])
def test_one_stage_equals_plain_sgd_exactly(name):
    X, Y = _data()
    want, wparams = _plain_sgd(X, Y)
    st = _stages(1)
    pp = _pipe(st, name, lambda ps, d: SGD(ps, lr=0.1, momentum=0.9, compensation="sc+lwp", delay=d), len(X))
    got = [float(v) for v in pp.step(X, Y).losses]
    assert got == want                                   # delay 0: SC and LWP change nothing
    for a, b in zip(st[0].parameters(), wparams):
        assert np.array_equal(a.detach().numpy(), b)


def test_pb_stored_and_ema_weights_and_memory():
    X, Y = _data(12)
    runs = {}
    for w in ("stored", "ema"):
        pp = _pipe(_stages(3), "pb", lambda ps, d: SGD(ps, lr=0.1, momentum=0.9, delay=d), len(X), weights=w)
        runs[w] = ([float(v) for v in pp.step(X, Y).losses], pp.weight_memory())
    (ls, ms), (le, me) = runs["stored"], runs["ema"]
    per = [(8 * 16 + 16) * 8, (16 * 16 + 16) * 8, (16 * 4 + 4) * 8]
    # the weights updated in place + delay+1 immutable versions (stages 0, 1); the last stage, delay 0, none
    assert ms == [6 * per[0], 4 * per[1], per[2]] == [(1 + k) * b if k > 1 else b for k, b in
                                                      zip(pp.schedule.kept_versions(), per)]
    assert me == [2 * per[0], 2 * per[1], per[2]]        # master + the moving average
    assert ls[:5] == le[:5]                              # the first updates: nothing to reconstruct yet
    assert np.allclose(ls, le, atol=0.05)


def test_a_stage_of_several_layer_groups_shares_its_delay():
    # stage s holds two Linear layers, its optimizer one parameter group per layer: every
    # group gets the stage's delay (from the factory on, then each step's schedule), and the
    # run equals the one with one group per stage
    def stages():
        rng = np.random.default_rng(4)
        return [Sequential(Linear(8 if s == 0 else 16, 16, dtype=np.float64, rng=rng), ReLU(),
                           Linear(16, 16 if s < 2 else 4, dtype=np.float64, rng=rng)) for s in range(3)]

    seen = []

    def per_layer(ps, d):
        seen.append(d)
        return SGD([{"params": ps[:2]}, {"params": ps[2:]}], lr=0.05, momentum=0.9, compensation="sc", delay=d)

    X, Y = _data(8)
    runs = []
    for opt in (per_layer, lambda ps, d: SGD(ps, lr=0.05, momentum=0.9, compensation="sc", delay=d)):
        st = stages()
        pp = _pipe(st, "pb", opt, len(X))
        runs.append(([float(v) for v in pp.step(X, Y).losses], [p.detach().numpy() for m in st for p in m.parameters()]))
        want = pp.schedule.delays()
        assert [[g["delay"] for g in o.param_groups] for o in pp.optimizer.opts] == [[d] * len(o.param_groups)
                                                                                    for o, d in zip(pp.optimizer.opts,
                                                                                                    want)]
    assert seen == [6 - 2, 2, 0] == schedules.get("pb", 3, 8).delays()   # the factory got each stage's delay
    assert runs[0][0] == runs[1][0] and all(np.array_equal(a, b) for a, b in zip(runs[0][1], runs[1][1]))


def test_local_trains_each_stage_on_its_own_head():
    X, Y = _data(8)
    heads = LocalHeads([16, 16], 4, dtype=np.float64, rng=np.random.default_rng(3))
    before = [p.detach().numpy() for p in heads.parameters()]
    pp = _pipe(_stages(3), "local", lambda ps, d: SGD(ps, lr=0.1, momentum=0.9), len(X), queue=1, heads=heads)
    assert len(pp.step(X, Y).losses) == 8 and pp.schedule.queue == 1
    assert all(not np.array_equal(a, b.detach().numpy()) for a, b in zip(before, heads.parameters()))


def test_a_step_may_run_another_count_of_micro_batches():
    X, Y = _data(8)
    opt = lambda ps, d: SGD(ps, lr=0.1, momentum=0.9, delay=d)  # noqa: E731
    pp = _pipe(_stages(2), "pb", opt, 8)
    assert len(pp.step(X[:3], Y[:3], schedules.get("pb", 2, 3)).losses) == 3
    with pytest.raises(ValueError, match="must keep the pipeline's layout"):
        pp.step(X[:3], Y[:3], schedules.get("1f1b", 2, 3))


def test_stage_pipeline_bad_input():
    opt = lambda ps, d: SGD(ps, lr=0.1, momentum=0.9, delay=d)  # noqa: E731
    with pytest.raises(ValueError, match="needs heads"):
        _pipe(_stages(2), "local", opt, 2)
    with pytest.raises(ValueError, match="needs 2 heads"):
        _pipe(_stages(3), "local", opt, 2, heads=LocalHeads([16], 4, dtype=np.float64))
    with pytest.raises(ValueError, match="heads are for schedule 'local'"):
        _pipe(_stages(2), "pb", opt, 2, heads=LocalHeads([16], 4, dtype=np.float64))
    with pytest.raises(ValueError, match="weights must be one of"):
        _pipe(_stages(2), "pb", opt, 2, weights="all")
    with pytest.raises(ValueError, match="queue must be an int >= 0"):
        _pipe(_stages(2), "local", opt, 2, queue=-1, heads=LocalHeads([16], 4, dtype=np.float64))
    with pytest.raises(ValueError, match="pass optimizer="):
        ModelPipeline(_stages(2), schedules.get("pb", 2, 2), loss_fn=_loss)
    with pytest.raises(ValueError, match="2 virtual stages but there are 3 stage modules"):
        ModelPipeline(_stages(3), schedules.get("1f1b", 2, 2), loss_fn=_loss)
    with pytest.raises(ValueError, match="loss_fn"):
        ModelPipeline(_stages(2), schedules.get("1f1b", 2, 2))
    X, Y = _data(8)
    pp = _pipe(_stages(3), "pb", opt, 8, max_versions=2)
    with pytest.raises(ValueError, match="over max_versions=2"):     # the delay needs more versions
        pp.step(X, Y)
    with pytest.raises(NotImplementedError, match="weights='ema' with Linear Weight Prediction"):
        _pipe(_stages(2), "pb", lambda ps, d: SGD(ps, lr=0.1, momentum=0.9, compensation="lwp", delay=d), 2,
              weights="ema")


def test_experiment_warmup_ramps_every_stage_learning_rate():
    from tiletrain.experiments.async_pipelines import _WarmupSGD, run
    p = tt.nn.Parameter(np.zeros(3))
    opt = _WarmupSGD([p], 4, lr=0.2, momentum=0.9, compensation="sc", delay=2)
    lrs = []
    for _ in range(6):
        p.grad = tt.from_numpy(np.ones(3))
        opt.step()
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs == pytest.approx([0.05, 0.1, 0.15, 0.2, 0.2, 0.2])
    with pytest.raises(ValueError, match="warmup must be an int >= 0"):
        run("pb", stages=2, warmup=-1)


def test_ema_reconstruction_is_exact_for_a_steady_change():
    """weights='ema': with the same change every update (plain SGD, a constant gradient), the
    bias-corrected moving average rebuilds every older version exactly, from the first
    update on; without the correction the first versions would come out too close to the
    current weights (u = (1 - beta^n) v)."""
    from types import SimpleNamespace

    from tiletrain.pipeline.noflush import StageUpdates, stage_entries
    lin = Linear(3, 2, dtype=np.float64, rng=np.random.default_rng(0))
    w0 = [p.detach().numpy() for p in lin.parameters()]
    g = [np.random.default_rng(1).standard_normal(p.shape) for p in lin.parameters()]
    su = StageUpdates(stage_entries([[lin]]), [[]], lambda ps, d: SGD(ps, lr=0.25), weights="ema", ema_beta=0.9)
    su.flush, su.delays = False, [4]           # a stage that reads older versions
    leaves = [SimpleNamespace(grad=tt.from_numpy(x)) for x in g]
    for n in range(1, 7):
        su._update(0, leaves)
        for k in range(max(0, n - 4), n):      # the versions a delay of 4 reaches back to
            with su.rebuilt(0, k) as got:
                for t, a, b in zip(got, w0, g):
                    np.testing.assert_allclose(t.detach().numpy(), a - 0.25 * k * b, rtol=0, atol=1e-14)
