"""tiletrain.runtime.submission, the one context manager that sets what C attaches to the next
tasks (the pipeline executor, the synthetic pipelines and parallel.microbatch use it): the
tags, priority and affinity given are set inside and restored after (on an exception too),
the others left alone; bad values raise before anything is set."""
import pytest

import tiletrain as tt
from tiletrain.runtime import context, submission

from profiled_runtime import default_runtime_afterwards, restart  # noqa: F401 (fixture)


def test_sets_what_is_given_and_restores_it():
    with tt.tag(phase="fwd", layer=3):
        before = context.get_tags()
        with submission(tags={"phase": "bwd", "microbatch": 2}, priority=5, affinity=[0]):
            ph, la, mb, st = context.get_tags()
            assert (context.tag_name(ph), la, mb, st) == ("bwd", 3, 2, -1)   # layer kept
            assert context.get_priority() == 5 and context.get_affinity() == [0]
            with submission(tags={"phase": context.intern_tag("wgrad"), "layer": -1}):
                assert context.tag_name(context.get_tags()[0]) == "wgrad" and context.get_tags()[1] == -1
                assert context.get_priority() == 5   # not given: left as it is
        assert context.get_tags() == before
    assert context.get_priority() == 0 and context.get_affinity() == []
    with pytest.raises(RuntimeError, match="boom"), submission(priority=7, affinity=[0]):
        raise RuntimeError("boom")
    assert context.get_priority() == 0 and context.get_affinity() == []


def test_tasks_carry_the_context():
    restart(sched="prio")
    with tt.trace.recording() as rec:
        with submission(tags={"phase": "fwd", "stage": 1, "microbatch": 0}, priority=2):
            y = tt.exp(tt.ones((4,), tiles=(2,)))
        y.numpy()
    t = rec.trace.tasks
    t = t[t["phase"] == "fwd"]
    assert len(t) and set(t["stage"].tolist()) == {1} and set(t["priority"].tolist()) == {2}


@pytest.mark.parametrize("kw, message", [
    (dict(tags={"rank": 1}), "unknown tag"),
    (dict(tags={"layer": "x"}), "layer must be an int"),
    (dict(tags={"microbatch": -2}), "microbatch must be an int >= -1"),
])
def test_bad_values_raise_before_anything_is_set(kw, message):
    before = context.get_tags(), context.get_priority()
    with pytest.raises(ValueError, match=message), submission(**kw):
        pass
    assert (context.get_tags(), context.get_priority()) == before
