"""tiletrain.parallel's layouts and fit checks (pure Python: the same answer on every rank);
the MPI runs of each mode are in tests/mpi."""
import numpy as np
import pytest

from tiletrain.parallel import check_fit, layout, plan, shards


@pytest.mark.parametrize("mode, world, stages, expect", [
    ("single", 4, None, (1, 1)), ("pipeline", 3, None, (3, 1)), ("data", 4, None, (1, 4)),
    ("pipeline+data", 4, None, (2, 2)), ("pipeline+data", 6, 3, (3, 2)), ("pipeline+data", 6, None, (2, 3)),
])
def test_layouts(mode, world, stages, expect):
    assert layout(mode, world, stages) == expect


@pytest.mark.parametrize("mode, kw, message", [
    ("pipe", {}, "--dist must be one of single, pipeline, data, pipeline+data"),
    ("pipeline", dict(world=5), "--dist pipeline: 5 stages (one per rank) but the model has only 4 layers"),
    ("data", dict(world=3), "--dist data: the batch of 8 sequences cannot be split evenly over 3 ranks"),
    ("pipeline+data", dict(world=2), "2 ranks cannot form 2 stages x at least 2 replicas"),
    ("pipeline+data", dict(world=6, stages=4), "6 ranks cannot form 4 stages"),
    ("pipeline+data", dict(world=12, stages=6), "--dist pipeline+data: 6 stages (--stages 6) but the model has only 4"),
    ("pipeline+data", dict(world=6, stages=2), "cannot be split evenly over 3 data-parallel replicas"),
    ("data", dict(world=2, stages=2), "--stages is for --dist pipeline+data"),
])
def test_distributions_that_do_not_fit(mode, kw, message):
    with pytest.raises(ValueError, match=message.replace("+", r"\+").replace("(", r"\(").replace(")", r"\)")):
        check_fit(mode, n_layer=4, batch=8, **kw)


def test_shards_split_the_batch_in_order():
    x = np.arange(12).reshape(6, 2)
    got = shards(x, x + 100, 3)
    assert [d for d, _, _ in got] == [0, 1, 2]
    np.testing.assert_array_equal(np.concatenate([a for _, a, _ in got]), x)
    with pytest.raises(ValueError, match="a batch of 6 cannot be split evenly into 4 shards"):
        shards(x, x, 4)


def test_plan_puts_each_stage_on_its_ranks():
    from tiletrain.nn import GPT, GPTConfig
    model = GPT(GPTConfig(vocab_size=64, block_size=8, n_layer=4, n_head=2, n_embd=16), dtype=np.float64, seed=0)
    pl = plan(model, "pipeline+data", world=4, stages=2)
    assert (pl.mode, pl.world, pl.stages, pl.replicas) == ("pipeline+data", 4, 2, 2)
    assert [pl.stage(f"transformer.{n}") for n in ("wte", "h.1", "h.2", "ln_f")] == [0, 0, 1, 1]
    assert pl.stage("lm_head") == 1 and pl.stage("transformer.h.2.attn") is None
    for i in range(4):
        for name, _ in model.transformer.h[i].named_parameters(f"transformer.h.{i}"):
            assert pl.owner(name) % 2 == (0 if i < 2 else 1)  # rank = replica * 2 + stage
    # both replicas' ranks of a stage hold parameters, and every parameter has one owner
    assert {r for _, r in pl.owners} == {0, 1, 2, 3}
    assert [n for n, _ in pl.owners] == [n for n, _ in model.named_parameters()]
    assert pl.owner("transformer.wte.weight") in (0, 2) and pl.rank_of(1, 1) == 3
    text = str(pl)
    assert text.startswith("plan pipeline+data: 4 rank(s), 2 stage(s) x 2 replica(s)")
    assert "transformer.h.3=1" in text
    pipe = plan(model, "pipeline", world=2)
    assert {pipe.owner(n) for n, _ in model.transformer.h[3].named_parameters("transformer.h.3")} == {1}
    assert plan(model, "single", world=1).grid == (1, 1)
    with pytest.raises(KeyError, match="no parameter 'nope'"):
        pipe.owner("nope")


def test_place_takes_a_plan_and_makes_it_current():
    import tiletrain.parallel as par
    from tiletrain.nn import GPT, GPTConfig
    model = GPT(GPTConfig(vocab_size=64, block_size=8, n_layer=2, n_head=2, n_embd=16), dtype=np.float64, seed=0)
    pl = plan(model, "single", world=1)
    try:
        assert par.place(model, pl) is pl and par.current_plan() is pl and par.n_replicas() == 1
        with pytest.raises(ValueError, match="plan is for 2 rank"):
            par.place(model, plan(model, "pipeline", world=2))
        other = GPT(GPTConfig(vocab_size=64, block_size=8, n_layer=3, n_head=2, n_embd=16), dtype=np.float64,
                    seed=0)
        with pytest.raises(ValueError, match="another model"):
            par.place(other, pl)
    finally:
        par._placed = par.Plan()


def test_using_makes_a_plan_current_inside_the_block():
    import tiletrain.parallel as par
    from tiletrain.nn import GPT, GPTConfig
    cfg = GPTConfig(vocab_size=64, block_size=8, n_layer=2, n_head=2, n_embd=16)
    a, b = GPT(cfg, dtype=np.float64, seed=0), GPT(cfg, dtype=np.float64, seed=1)
    try:
        pa = par.place(a, plan(a, "single", world=1))
        pb = par.place(b, plan(b, "data", world=1))
        assert par.current_plan() is pb
        with par.using(pa) as got:
            assert got is pa and par.current_plan() is pa
            with par.using(pb):
                assert par.current_plan() is pb
            assert par.current_plan() is pa
        assert par.current_plan() is pb
        with pytest.raises(RuntimeError, match="boom"), par.using(pa):
            raise RuntimeError("boom")
        assert par.current_plan() is pb   # restored on an exception too
        with pytest.raises(TypeError, match="takes a Plan"), par.using("data"):
            pass
        with pytest.raises(ValueError, match="plan is for 2 rank"), par.using(plan(a, "pipeline", world=2)):
            pass
    finally:
        par._placed = par.Plan()


def test_microbatch_tags_its_tasks_and_leaves_priorities_to_the_schedule(monkeypatch):
    """microbatch(k) tags the tasks submitted inside microbatch=k, in any layout; priorities
    are a pipeline schedule's business (tiletrain.pipeline.training), not the tags'."""
    from profiled_runtime import restart

    import tiletrain as tt
    import tiletrain.parallel as par
    restart(sched="prio")
    try:
        for grid in ((2, 1), (1, 2)):
            monkeypatch.setattr(par, "_placed", par.Plan(world=2, stages=grid[0], replicas=grid[1]))
            with tt.trace.recording() as rec:
                for k in range(2):
                    with par.microbatch(k):
                        x = tt.ones((4, 4), tiles=(2, 2)).requires_grad_()
                        tt.sum(tt.mul(x, x)).backward()
            t = rec.trace.tasks
            assert set(t["microbatch"].tolist()) == {0, 1} and set(t["priority"].tolist()) == {0}, grid
        assert tt.trace.current_tags()["microbatch"] is None   # restored
    finally:
        tt.shutdown()


def test_the_placed_plan_holds_the_replica_being_submitted(monkeypatch):
    """replica(d) makes the current plan the placed one with replica d (equal to it, the
    placement state in one object), and restores it after."""
    import tiletrain.parallel as par
    pl = par.Plan(world=3, stages=1, replicas=3)
    monkeypatch.setattr(par, "_placed", pl)
    with par.replica(2):
        cur = par.current_plan()
        assert cur.replica == 2 and cur == pl and cur is not pl
        with par.replica(1):
            assert par.current_plan().replica == 1
        assert par.current_plan().replica == 2
    assert par.current_plan() is pl and pl.replica == 0
    with pytest.raises(ValueError, match="3 replica"), par.replica(3):
        pass
