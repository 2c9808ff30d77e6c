"""Schedule metrics on small hand-built traces with known answers (no runtime needed)."""
import numpy as np
import pytest

from tiletrain.trace import (TASK_DTYPE, Trace, TraceError, area_bound, bottom_levels, compact, critical_path,
                             idle_fractions, makespan, metrics, stage_bubbles)
from tiletrain.pipeline import bottom_level_priorities


def make(rows, nworkers=2):
    """rows: (worker, start, end, deps[, stage, phase])"""
    t = np.zeros(len(rows), dtype=TASK_DTYPE)
    deps = []
    for i, r in enumerate(rows):
        w, s, e, d = r[:4]
        t[i]["id"], t[i]["worker"], t[i]["start"], t[i]["end"] = i, w, s, e
        t[i]["submit"] = 0.0
        t[i]["kernel"] = "spin"
        t[i]["stage"] = r[4] if len(r) > 4 else -1
        t[i]["phase"] = r[5] if len(r) > 5 else ""
        t[i]["layer"] = t[i]["microbatch"] = -1
        t[i]["flops"] = 1e3 * (e - s)
        t[i]["dep_start"], t[i]["ndeps"] = len(deps), len(d)
        deps += d
    workers = [{"id": w, "name": f"w{w}", "rank": 0} for w in range(nworkers)]
    return Trace(t, np.array(deps, dtype=np.int64), workers)


def diamond():
    """
        a(2)            worker 0: a [0,2]  b [2,5]  d [5,7]
       /    \\           worker 1:          c [2,3]
     b(3)   c(1)
       \\    /
        d(2)
    """
    return make([(0, 0, 2, []), (0, 2, 5, [0]), (1, 2, 3, [0]), (0, 5, 7, [1, 2])])


def test_diamond():
    tr = diamond()
    assert makespan(tr) == 7
    length, path = critical_path(tr)
    assert length == 7 and path == [0, 1, 3]
    assert area_bound(tr) == 4.0                      # (2+3+1+2) / 2 workers
    m = metrics(tr)
    assert m.bound_us == 7 and m.efficiency == 1.0    # this schedule is optimal
    assert m.idle_fraction == {0: 0.0, 1: pytest.approx(6 / 7)}
    np.testing.assert_allclose(bottom_levels(tr), [7, 5, 3, 2])
    assert m.gflops == pytest.approx(8e3 / (7 * 1e3))   # flops / (µs * 1e3)


def test_independent_tasks_area_bound():
    """
    four independent tasks of 4 us, badly placed:   worker 0: [0,4] [4,8] [8,12]
                                                     worker 1: [0,4]
    critical path 4, area 16/2 = 8 -> bound 8; makespan 12; efficiency 2/3
    """
    tr = make([(0, 0, 4, []), (0, 4, 8, []), (0, 8, 12, []), (1, 0, 4, [])])
    m = metrics(tr)
    assert (m.critical_path_us, m.area_bound_us, m.bound_us, m.makespan_us) == (4, 8, 8, 12)
    assert m.efficiency == pytest.approx(2 / 3)
    assert idle_fractions(tr) == {0: 0.0, 1: pytest.approx(2 / 3)}


def test_chain_with_gaps():
    """
    a -> b -> c on alternating workers with 1 us hand-over gaps:
      worker 0: a [0,2]        c [6,8]
      worker 1:       b [3,5]
    critical path 2+2+2 = 6 < makespan 8: the gaps are scheduling overhead.
    """
    tr = make([(0, 0, 2, []), (1, 3, 5, [0]), (0, 6, 8, [1])])
    assert critical_path(tr) == (6.0, [0, 1, 2])
    assert metrics(tr).efficiency == pytest.approx(6 / 8)


def test_compact_keeps_the_order_and_removes_the_gaps():
    """
    worker 0: a [10,12]          c [16,18]   d [20,21]      a -> b -> c; d independent
    worker 1:          b [13,15]                            but after c on worker 0
    compacted: a [10,12] b [12,14] c [14,16] d [16,17]; the order stays, the gaps go
    """
    tr = make([(0, 10, 12, []), (1, 13, 15, [0]), (0, 16, 18, [1]), (0, 20, 21, [])])
    c = compact(tr)
    np.testing.assert_allclose(c.tasks["start"], [10, 12, 14, 16])
    np.testing.assert_allclose(c.tasks["end"], [12, 14, 16, 17])
    assert (c.tasks["worker"] == tr.tasks["worker"]).all() and makespan(c) == 7
    assert critical_path(c) == critical_path(tr)          # durations and edges unchanged
    # an order that is worse than another: d first on worker 0 delays a's chain
    bad = make([(0, 1, 3, []), (1, 4, 6, [0]), (0, 6, 8, [1]), (0, 0, 1, [])])
    assert makespan(compact(bad)) == 7 and makespan(compact(make([(0, 0, 2, []), (1, 2, 4, [0]), (0, 4, 6, [1]),
                                                                (0, 2, 3, [])]))) == 6


def test_stage_bubbles_two_stage_pipeline():
    """
    p = 2 stages, m = 2 micro-batches, F = B = 1, GPipe order:
      stage 0 (worker 0): F0 [0,1] F1 [1,2]                 B0 [4,5] B1 [5,6]
      stage 1 (worker 1):          F0 [1,2] F1 [2,3] B0 [3,4] B1 [4,5]     (B1 waits for F1)
    makespan 6; each stage busy 4 -> idle/total = 2/6 = (p-1)/(m+p-1), bubble/ideal = 2/4
    """
    tr = make([(0, 0, 1, [], 0, "fwd"), (0, 1, 2, [0], 0, "fwd"), (1, 1, 2, [0], 1, "fwd"),
               (1, 2, 3, [1, 2], 1, "fwd"), (1, 3, 4, [2, 3], 1, "bwd"), (1, 4, 5, [3, 4], 1, "bwd"),
               (0, 4, 5, [4], 0, "bwd"), (0, 5, 6, [5, 6], 0, "bwd")])
    b = stage_bubbles(tr)
    for s in (0, 1):
        assert b[s]["idle_over_total"] == pytest.approx(1 / 3)
        assert b[s]["bubble_over_ideal"] == pytest.approx(0.5)
    m = metrics(tr)
    assert m.phases == {"fwd": 4.0, "bwd": 4.0}


def test_bubbles_fall_back_to_workers_without_stage_tags():
    tr = diamond()
    b = stage_bubbles(tr)
    assert set(b) == {0, 1} and b[1]["busy_us"] == 1.0


def test_bottom_level_priorities_rank_and_range():
    tr = diamond()
    p = bottom_level_priorities(tr, lo=-2**31, hi=2**31 - 1)
    assert list(p) == [3, 2, 1, 0]                    # dense ranks of bottom levels 7, 5, 3, 2
    assert list(bottom_level_priorities(tr, lo=-5, hi=5)) == [3, 2, 1, 0]   # fits: still dense ranks
    assert list(bottom_level_priorities(tr, lo=0, hi=1)) == [1, 1, 0, 0]    # two levels: quantised
    assert list(bottom_level_priorities(tr, lo=-9, hi=-7)) == [-7, -8, -8, -9]
    assert set(bottom_level_priorities(tr, lo=0, hi=0)) == {0}
    with pytest.raises(ValueError, match="empty"):
        bottom_level_priorities(tr, lo=3, hi=1)


def test_select_renumbers_and_drops_edges():
    tr = diamond().select([False, True, True, True])
    assert len(tr) == 3 and list(tr.predecessors(2)) == [0, 1] and len(tr.predecessors(0)) == 0


def test_inconsistent_traces_are_rejected():
    with pytest.raises(TraceError, match="not an earlier task"):
        make([(0, 0, 1, [1]), (0, 1, 2, [])])
    with pytest.raises(TraceError, match="ends before it starts"):
        make([(0, 2, 1, [])])
    with pytest.raises(ValueError, match="no tasks"):
        metrics(make([]))


def test_idle_by_cause():
    """Each idle gap is charged to what its next task waited for:
    worker 0: a [0,2]            d [6,8]   (d depends on c; c ends at 5; d starts at 6)
    worker 1:   b [1,3]  c [4,5]           (b submitted at 1; c ready at 3, starts at 4)
    worker 0, gap [2,6]: waiting for c until 5 (dependencies 3), then ready 1
    worker 1, gap [0,1]: b not submitted yet (submission 1); gap [3,4]: ready 1; tail [5,8] 3
    window 8 x 2 = 16."""
    from tiletrain.trace import IDLE_CAUSES, format_metrics, idle_causes
    tr = make([(0, 0, 2, []), (1, 1, 3, []), (1, 4, 5, [1]), (0, 6, 8, [2])])
    tr.tasks["submit"][1] = 1.0
    got = idle_causes(tr)
    assert set(got) == set(IDLE_CAUSES)
    assert got == pytest.approx({"dependencies": 3 / 16, "submission": 1 / 16, "ready": 2 / 16, "tail": 3 / 16})
    m = metrics(tr)
    assert sum(got.values()) == pytest.approx(m.mean_idle_fraction)
    assert m.idle_causes == got and "idle by cause" in format_metrics(m)
    # a listed worker that ran nothing: its whole window is tail
    three = make([(0, 0, 2, []), (1, 1, 3, []), (1, 4, 5, [1]), (0, 6, 8, [2])], nworkers=3)
    three.tasks["submit"][1] = 1.0
    assert idle_causes(three)["tail"] == pytest.approx((3 + 8) / 24)
    assert sum(idle_causes(three).values()) == pytest.approx(metrics(three).mean_idle_fraction)
