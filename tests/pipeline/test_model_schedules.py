"""Written schedules on the real GPT and Llama in one process: each schedule rank is a group
of workers; every schedule and mechanism gives the losses of the plain gradient-accumulation
loop (float64, 1e-9), with dropout too; seq1f1b's sequence chunks give the unchunked
gradients; split backward (I/W) and its autograd deferral; the order token."""
from dataclasses import replace

import numpy as np
import pytest

import tiletrain as tt
from tiletrain.nn import GPT
from tiletrain.nn.gpt import GPTConfig, Tiling
from tiletrain.ops.autograd import defer_grads
from tiletrain.optim import AdamW
from tiletrain.parallel import blocks_of_stage, plan
from tiletrain.pipeline import schedules
from tiletrain.pipeline.model import ModelPipeline, action_times, pipeline_plan, rank_order_fraction, worker_groups
from tiletrain.trace.records import recording

from profiled_runtime import default_runtime_afterwards, restart  # noqa: F401 (fixture)

CFG = GPTConfig(vocab_size=16, block_size=8, n_layer=4, n_head=2, n_embd=8, dropout=0.0)
TILING = Tiling(batch=2, time=4, width=4, hidden=16, vocab=8)   # last tiles smaller: vocab 16 / 8 ok, C 8 / 4
M = 4
SCHEDULES = {"gpipe": {}, "1f1b": {}, "interleaved-1f1b": {"virtual": 2}, "zb-h1": {}, "zb-v": {},
             "dualpipe-v": {}, "emergent": {}, "emergent-zb": {}, "emergent-v": {}, "seq1f1b": {"chunks": 2}}


def batches(seed=3, steps=2):
    rng = np.random.default_rng(seed)
    return [[rng.integers(0, 16, size=(2, 9)) for _ in range(M)] for _ in range(steps)]


def train(make_model, name=None, mechanism="deps", data=None):
    model = make_model()
    pp = None
    if name is not None:
        pp = ModelPipeline(model, schedules.get(name, 2, M, **SCHEDULES[name]), mechanism)
    opt = AdamW(list(model.parameters()), lr=1e-2, weight_decay=0.1)
    out = []
    for batch in data or batches():
        if pp is None:
            micro = []
            for ids in batch:
                loss = model.loss(ids[:, :-1], ids[:, 1:])
                tt.scale(loss, 1.0 / M).backward()
                micro.append(loss)
        else:
            micro = pp.step([ids[:, :-1] for ids in batch], [ids[:, 1:] for ids in batch]).losses
        opt.step()
        opt.zero_grad()
        out.append([float(v) for v in micro])
    return np.array(out)


def gpt():
    return GPT(CFG, TILING, dtype=np.float64, seed=1)


@pytest.fixture(scope="module")
def reference():
    restart(ncpu=2, sched="prio", profile=False)
    return train(gpt)


@pytest.mark.parametrize("mechanism", ["submit", "priority", "deps"])
@pytest.mark.parametrize("name", list(SCHEDULES))
def test_every_schedule_gives_the_one_process_losses(reference, name, mechanism):
    restart(ncpu=2, sched="prio", profile=False)
    got = train(gpt, name, mechanism)
    np.testing.assert_allclose(got, reference, rtol=0, atol=1e-9, err_msg=f"{name} / {mechanism}")


def test_llama_under_zb_v_gives_the_same_losses():
    from tiletrain.nn.llama import Llama, LlamaConfig
    restart(ncpu=2, sched="prio", profile=False)
    cfg = LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=4,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8)

    def llama():
        return Llama(cfg, dtype=np.float64, seed=2)
    data = batches(5, 1)
    ref = train(llama, data=data)
    np.testing.assert_allclose(train(llama, "zb-v", "deps", data), ref, rtol=0, atol=1e-9)


@pytest.mark.parametrize("recompute", ["block", "attention"])
def test_split_backward_with_recomputation(reference, recompute):
    restart(ncpu=2, sched="prio", profile=False)

    def model():   # a config of its own (CFG is shared by the other tests' models)
        return GPT(replace(CFG, recompute=recompute), TILING, dtype=np.float64, seed=1)
    np.testing.assert_allclose(train(model, "zb-v", "deps"), reference, rtol=0, atol=1e-9)


def test_deferred_weight_gradients_equal_the_full_backward():
    restart(ncpu=2, sched="prio", profile=False)
    ids = batches(7, 1)[0][0]
    full, split = gpt(), gpt()
    full.loss(ids[:, :-1], ids[:, 1:]).backward()
    with defer_grads(list(split.parameters())) as dw:
        split.loss(ids[:, :-1], ids[:, 1:]).backward()
    assert len(dw) > 0 and all(p.grad is None for p in split.parameters())   # no dW submitted yet
    dw.run()
    assert len(dw) == 0
    for (n, a), (_, b) in zip(full.named_parameters(), split.named_parameters()):
        np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=0, atol=1e-12, err_msg=n)


@pytest.mark.parametrize("name", ["zb-h1", "seq1f1b"])
def test_ordering_dependencies_keep_the_order_on_the_real_model(name):
    restart(ncpu=2, sched="prio", profile=True)
    s = schedules.get(name, 2, M, **SCHEDULES[name])   # seq1f1b: actions told apart by their chunk too
    model = gpt()
    pp = ModelPipeline(model, s, "deps")
    data = batches(1, 1)[0]
    pp.step([d[:, :-1] for d in data], [d[:, 1:] for d in data])   # warm up
    tt.wait()
    with recording() as rec:
        r = pp.step([d[:, :-1] for d in data], [d[:, 1:] for d in data])
    start, end = action_times(s, rec.trace)
    assert not np.isnan(start).any()
    assert rank_order_fraction(s, start) == 1.0
    t = rec.trace.tasks   # each action's tasks ran on its rank's worker group
    groups = worker_groups(2)
    place = s.placement()
    sel = t["stage"] >= 0
    assert all(w in groups[place[st]] for w, st in zip(t["worker"][sel], t["stage"][sel]))
    assert len(r.losses) == M


@pytest.mark.parametrize("name,recompute", [("emergent", "none"), ("emergent-zb", "none"),
                                            ("emergent-zb", "block"), ("emergent-zb", "attention")])
def test_emergent_priorities_put_weight_gradients_last(name, recompute):
    """No order written, only priorities (structural, not timed): on the real model every
    recorded task of a (stage, micro-batch)'s backward or input gradient (its recomputation
    too) is above every task of its weight gradients (emergent-zb) and above every forward
    task; the weight-gradient tasks are below every forward task, of every micro-batch, so
    that a stage runs them only when no forward or input gradient is ready."""
    restart(ncpu=2, sched="prio", profile=True)
    s = schedules.get(name, 2, M)
    pp = ModelPipeline(GPT(replace(CFG, recompute=recompute), TILING, dtype=np.float64, seed=1), s, "priority")
    data = batches(1, 1)[0]
    with recording() as rec:
        pp.step([d[:, :-1] for d in data], [d[:, 1:] for d in data])
        tt.wait()
    t = rec.trace.tasks
    fwd = t["priority"][t["phase"] == "fwd"]
    assert len(fwd)
    for st in range(2):
        for j in range(M):
            mine = (t["stage"] == st) & (t["microbatch"] == j)
            bwd = t["priority"][mine & ((t["phase"] == "bwd") | (t["phase"] == "recompute"))]
            dw = t["priority"][mine & (t["phase"] == "wgrad")]
            assert len(bwd) and bwd.min() > fwd.max(), (st, j)
            if name == "emergent":      # full backward: dW inside B's tasks
                assert not len(dw)
                continue
            assert len(dw) and dw.max() < bwd.min() and dw.max() < fwd.min(), (st, j)


def test_placement_and_bad_input():
    restart(ncpu=2, sched="prio", profile=False)
    assert [list(blocks_of_stage(v, 4, 4)) for v in range(4)] == [[0], [1], [2], [3]]
    assert [list(blocks_of_stage(v, 5, 2)) for v in range(2)] == [[0, 1, 2], [3, 4]]
    model = gpt()
    pl = pipeline_plan(model, schedules.get("zb-v", 2, M), world=2)   # V: chunks 0 and 3 on rank 0
    st = dict(pl.modules)
    assert [st[f"transformer.h.{i}"] for i in range(4)] == [0, 1, 1, 0]
    assert st["transformer.wte"] == 0 and st["lm_head"] == 0 and pl.owner("transformer.wte.weight") == 0
    pl = pipeline_plan(model, schedules.get("interleaved-1f1b", 2, M, virtual=2), world=2)   # looped
    assert [dict(pl.modules)[f"transformer.h.{i}"] for i in range(4)] == [0, 1, 0, 1]
    with pytest.raises(ValueError, match="stage_ranks"):
        plan(model, "pipeline", 2, stage_ranks=[0, 1, 0, 1, 0])
    pp = ModelPipeline(model, schedules.get("seq1f1b", 2, M, chunks=3))
    with pytest.raises(ValueError, match="3 chunks need at least 3 positions"):
        pp.step([np.zeros((2, 2), np.int64)] * M, [np.zeros((2, 2), np.int64)] * M)
    with pytest.raises(ValueError, match="virtual stages but the model has 4 blocks"):
        ModelPipeline(model, schedules.get("interleaved-1f1b", 2, M, virtual=4))
    with pytest.raises(ValueError, match="need at least 3 workers"):
        worker_groups(3)
    pp = ModelPipeline(model, schedules.get("1f1b", 2, M))
    with pytest.raises(ValueError, match="has 4 micro-batches"):
        pp.step([np.zeros((2, 8), np.int64)], [np.zeros((2, 8), np.int64)])
    from tiletrain._ffi import check, ffi, lib
    two = tt.from_numpy(np.zeros(8), 4)
    with pytest.raises(ValueError, match="one-tile tensor"):
        check(lib.tt_order_set(two._ptr))
    with pytest.raises(ValueError, match="no token"):
        check(lib.tt_order_barrier(ffi.NULL))


def test_cli_schedule_run_on_a_real_gpt(capsys):
    import json
    from tiletrain.cli import main
    if tt.is_initialized():
        tt.shutdown()
    assert main(["schedule", "run", "zb-h1", "--stages", "2", "--microbatches", "4", "--gpt", "2x16",
                 "--seq-len", "8", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schedule"] == "zb-h1" and d["model"].startswith("gpt 2x16") and d["order_fraction"] == 1.0
    assert d["makespan_s"] > 0 and d["peak_activations"] >= 1 and d["formula_idle_fraction"] > 0
    assert main(["schedule", "run", "seq1f1b", "--stages", "2", "--microbatches", "4", "--chunks", "2",
                 "--gpt", "2x16", "--seq-len", "8", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schedule"] == "seq1f1b" and d["chunks"] == 2 and d["order_fraction"] == 1.0
    assert 0 <= d["idle_fraction"] < 1 and d["peak_activations"] > 0
    assert main(["schedule", "run", "pb", "--stages", "2", "--microbatches", "4", "--gpt", "2x16",
                 "--seq-len", "8", "--json"]) == 0     # updates during the step: a per-stage AdamW
    d = json.loads(capsys.readouterr().out)
    assert d["schedule"] == "pb" and d["delays"] == [2, 0] and d["order_fraction"] == 1.0
    with pytest.raises(SystemExit) as exc:
        main(["schedule", "run", "1f1b", "--stages", "2", "--microbatches", "2", "--gpt", "4by8"])
    assert exc.value.code == 2 and "LAYERSxWIDTH" in capsys.readouterr().err


def grads_of_one_step(make_model, data, schedule=None):
    """Losses and named gradients of one forward + backward of the micro-batches ``data``
    (the plain gradient-accumulation loop when schedule is None)."""
    model = make_model()
    if schedule is None:
        losses = []
        for ids, tg in data:
            loss = model.loss(ids, tg)
            tt.scale(loss, 1.0 / len(data)).backward()
            losses.append(loss)
    else:
        losses = ModelPipeline(model, schedule).step([d[0] for d in data], [d[1] for d in data]).losses
    return [float(v) for v in losses], {n: p.grad.numpy() for n, p in model.named_parameters()}


@pytest.mark.parametrize("chunks", [2, 3, 8])
def test_sequence_chunks_give_the_unchunked_gradients(chunks):
    """seq1f1b: chunks of 4, 2 + 3 + 3 (the time tile 4 straddling chunks) and 1 position;
    targets partly ignored (-100): the chunks' losses still add up to the micro-batch mean."""
    restart(ncpu=2, sched="prio", profile=False)
    data = [(ids[:, :-1], ids[:, 1:].copy()) for ids in batches(11, 1)[0]]
    data[1][1][0, 5:] = -100
    data[2][1][:, :3] = -100
    ref_loss, ref = grads_of_one_step(gpt, data)
    loss, got = grads_of_one_step(gpt, data, schedules.get("seq1f1b", 2, M, chunks=chunks))
    np.testing.assert_allclose(loss, ref_loss, rtol=0, atol=1e-9)
    for n in ref:
        np.testing.assert_allclose(got[n], ref[n], rtol=0, atol=1e-9, err_msg=n)
    assert max(np.abs(g).max() for g in ref.values()) > 1e-3   # gradients that are not all zero


@pytest.mark.parametrize("recompute", ["block", "attention"])
@pytest.mark.parametrize("chunks", [2, 3])
def test_sequence_chunks_with_recomputation_give_the_plain_gradients(recompute, chunks):
    """Recomputation with sequence chunks: a chunk's keys and values are in a graph only when
    its backward recomputes them, and the later chunks' dK/dV enter that recompute; losses
    and gradients are the unchunked step's without recomputation (float64, 1e-9)."""
    restart(ncpu=2, sched="prio", profile=True)
    data = [(ids[:, :-1], ids[:, 1:].copy()) for ids in batches(11, 1)[0]]
    data[1][1][0, 5:] = -100
    ref_loss, ref = grads_of_one_step(gpt, data)

    def model():
        return GPT(replace(CFG, recompute=recompute), TILING, dtype=np.float64, seed=1)
    s = schedules.get("seq1f1b", 2, M, chunks=chunks)
    with recording() as rec:
        loss, got = grads_of_one_step(model, data, s)
    np.testing.assert_allclose(loss, ref_loss, rtol=0, atol=1e-9)
    for n in ref:
        np.testing.assert_allclose(got[n], ref[n], rtol=0, atol=1e-9, err_msg=n)
    assert (rec.trace.tasks["phase"] == "recompute").any()   # the forward did not keep the activations


def seq_zb_schedule():
    """seq1f1b's order (2 ranks, 2 chunks) with each B as I and its W deferred to the end of
    the rank's list."""
    from tiletrain.pipeline.schedule import Action, Schedule
    base = schedules.get("seq1f1b", 2, M, chunks=2)
    rows = [[Action(a.stage, "I" if a.kind == "B" else a.kind, a.microbatch, a.chunk) for a in row]
            + [Action(a.stage, "W", a.microbatch, a.chunk) for a in row if a.kind == "B"] for row in base.actions]
    return Schedule("seq-zb", tuple(map(tuple, rows)), chunks=2).validate()


def test_sequence_chunks_with_recomputation_and_split_backward_and_dropout():
    """seq1f1b's order with each B split into I and W (deferred to the end), recompute="block"
    and dropout 0.3: the recompute replays the chunk's masks (its window of the sequence)."""
    restart(ncpu=2, sched="prio", profile=False)
    s = seq_zb_schedule()
    data = [(ids[:, :-1], ids[:, 1:]) for ids in batches(13, 1)[0]]
    tt.manual_seed(4)
    ref_loss, ref = grads_of_one_step(gpt_dropout, data)

    def model():
        m = gpt_dropout()
        m.config.recompute = "block"
        return m
    tt.manual_seed(4)
    loss, got = grads_of_one_step(model, data, s)
    np.testing.assert_allclose(loss, ref_loss, rtol=0, atol=1e-9)
    for n in ref:
        np.testing.assert_allclose(got[n], ref[n], rtol=0, atol=1e-9, err_msg=n)


@pytest.mark.parametrize("recompute", ["none", "block", "attention"])
def test_llama_under_seq1f1b_gives_the_unchunked_gradients(recompute):
    """Rotary positions from the chunk's offset, grouped-query attention over the prefix; with
    recomputation too."""
    from tiletrain.nn.llama import Llama, LlamaConfig
    restart(ncpu=2, sched="prio", profile=False)
    cfg = LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=4,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8)

    def llama(recompute="none"):
        return Llama(replace(cfg, recompute=recompute), dtype=np.float64, seed=2)
    data = [(ids[:, :-1], ids[:, 1:]) for ids in batches(5, 1)[0]]
    ref_loss, ref = grads_of_one_step(llama, data)
    loss, got = grads_of_one_step(lambda: llama(recompute), data, schedules.get("seq1f1b", 2, M, chunks=2))
    np.testing.assert_allclose(loss, ref_loss, rtol=0, atol=1e-9)
    for n in ref:
        np.testing.assert_allclose(got[n], ref[n], rtol=0, atol=1e-9, err_msg=n)


def gpt_dropout():
    return GPT(GPTConfig(vocab_size=16, block_size=8, n_layer=4, n_head=2, n_embd=8, dropout=0.3), TILING,
               dtype=np.float64, seed=1)


@pytest.fixture(scope="module")
def dropout_reference():
    restart(ncpu=2, sched="prio", profile=False)
    tt.manual_seed(5)
    return train(gpt_dropout)


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_every_schedule_with_dropout_gives_the_one_process_losses(reference, dropout_reference, name):
    """The masks follow (layer, micro-batch, position), not submission order: every schedule,
    sequence chunks too, draws the plain loop's masks."""
    restart(ncpu=2, sched="prio", profile=False)
    tt.manual_seed(5)
    got = train(gpt_dropout, name, "deps")
    np.testing.assert_allclose(got, dropout_reference, rtol=0, atol=1e-9, err_msg=name)
    assert np.abs(dropout_reference - reference).max() > 1e-3   # the masks matter


@pytest.mark.parametrize("name", ["zb-v", "1f1b"])
def test_dropout_under_a_schedule_leaves_the_generator_as_the_plain_loop(name):
    """After a step the generator is where the plain loop leaves it; recomputation (block)
    replays the same masks."""
    from tiletrain.tensors.creation import default_generator

    def model():
        m = gpt_dropout()
        m.config.recompute = "block"
        return m
    restart(ncpu=2, sched="prio", profile=False)
    tt.manual_seed(9)
    ref = train(gpt_dropout, data=batches(4, 1))
    after = default_generator.get_state()
    tt.manual_seed(9)
    np.testing.assert_allclose(train(model, name, "deps", batches(4, 1)), ref, rtol=0, atol=1e-9)
    assert default_generator.get_state() == after


def test_dropout_of_sequence_chunks_cuts_the_whole_mask():
    import tiletrain.functional as F
    from tiletrain.ops.activations import dropout_positions
    restart(ncpu=2, sched="prio", profile=False)
    x = np.random.default_rng(0).standard_normal((3, 10, 4))
    whole = F.dropout(tt.from_numpy(x, (2, 4, 4)), 0.4, seed=17).numpy()
    parts = []
    for lo, hi in ((0, 3), (3, 7), (7, 10)):
        with dropout_positions(lo, 10, 2, 4):
            parts.append(F.dropout(tt.from_numpy(x[:, lo:hi], (3, 2, 4)), 0.4, seed=17).numpy())
    np.testing.assert_array_equal(np.concatenate(parts, axis=1), whole)
    assert (whole == 0).any() and (whole != 0).any()
    with dropout_positions(8, 10, 2, 4), pytest.raises(ValueError, match="positions 8..10 of 10"):
        F.dropout(tt.from_numpy(x[:, :3]), 0.4, seed=17)


def test_split_backward_of_sequence_chunks():
    """A written schedule with sequence chunks and split backward: seq1f1b's order with each
    B as I, its W deferred to the end of the rank's list (dK/dV still reach the earlier
    chunks before their I)."""
    restart(ncpu=2, sched="prio", profile=False)
    s = seq_zb_schedule()
    data = [(ids[:, :-1], ids[:, 1:]) for ids in batches(13, 1)[0]]
    ref_loss, ref = grads_of_one_step(gpt, data)
    loss, got = grads_of_one_step(gpt, data, s)
    np.testing.assert_allclose(loss, ref_loss, rtol=0, atol=1e-9)
    for n in ref:
        np.testing.assert_allclose(got[n], ref[n], rtol=0, atol=1e-9, err_msg=n)


def test_dropout_draws_that_cannot_be_replayed_are_refused(monkeypatch):
    """A stage that draws other seeds than its counted dropouts: a clear error, not other masks."""
    import tiletrain.pipeline.model as pm
    restart(ncpu=2, sched="prio", profile=False)
    model = gpt_dropout()
    monkeypatch.setattr(pm, "_is_dropout", lambda mod: type(mod).__name__ == "Dropout"
                        and mod is not model.transformer.drop)
    pp = ModelPipeline(model, schedules.get("1f1b", 2, M))
    data = batches(1, 1)[0]
    with pytest.raises(RuntimeError, match="stage 0's forward drew other dropout seeds than its 4"):
        pp.step([d[:, :-1] for d in data], [d[:, 1:] for d in data])
