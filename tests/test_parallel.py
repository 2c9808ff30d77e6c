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
    tr = model.transformer
    owner, where = plan(model, "pipeline+data", world=4, stages=2)
    assert where[id(tr.wte)] == 0 and where[id(tr.h[1])] == 0 and where[id(tr.h[2])] == 1
    assert where[id(tr.ln_f)] == 1 and where[id(model.lm_head)] == 1
    for i, block in enumerate(tr.h):
        for p in block.parameters():
            assert owner[id(p)] % 2 == (0 if i < 2 else 1)  # rank = replica * 2 + stage
    # both replicas' ranks of a stage hold parameters, and every parameter has one owner
    assert set(owner.values()) == {0, 1, 2, 3}
    assert owner[id(tr.wte.weight)] in (0, 2)
    pipe, _ = plan(model, "pipeline", world=2)
    assert {pipe[id(p)] for p in tr.h[3].parameters()} == {1}


def test_microbatch_gives_1f1b_priorities_in_a_pipelined_layout(monkeypatch):
    """With more than one stage, micro-batch k's backward outranks every forward and
    micro-batch k outranks k+1; with one stage, tags only."""
    from profiled_runtime import restart

    import tiletrain as tt
    import tiletrain.parallel as par
    restart(sched="prio")
    try:
        def run(grid):
            monkeypatch.setattr(par, "_grid", grid)
            with tt.trace.recording() as rec:
                for k in range(2):
                    with par.microbatch(k):
                        x = tt.ones((4, 4), tiles=(2, 2)).requires_grad_()
                        tt.sum(tt.mul(x, x)).backward()
            return rec.trace.tasks
        t = run((2, 1))
        fwd = t[t["phase"] == ""]
        bwd = t[t["phase"] == "bwd"]
        assert set(t["microbatch"].tolist()) == {0, 1}
        assert bwd["priority"].min() > fwd["priority"].max()
        for ph in (fwd, bwd):
            assert ph[ph["microbatch"] == 0]["priority"].min() > ph[ph["microbatch"] == 1]["priority"].max()
        flat = run((1, 2))
        assert set(flat["priority"].tolist()) == {0} and set(flat["microbatch"].tolist()) == {0, 1}
    finally:
        tt.shutdown()
