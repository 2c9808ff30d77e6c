"""Pipeline formulas, the dataflow rule and the list-scheduling simulator (no runtime)."""
import pytest

from tiletrain.pipeline import (build_plan, dataflow_deps, formulas, gpipe_idle_fraction,
                                one_f_one_b_makespan, simulate, zb_h1_bubble)


def test_formula_values():
    assert gpipe_idle_fraction(4, 8) == pytest.approx(3 / 11)
    assert formulas.gpipe_bubble_over_ideal(4, 8) == pytest.approx(3 / 8)
    assert one_f_one_b_makespan(4, 8, 1.0, 2.0) == 33.0
    assert formulas.one_f_one_b_bubble(4, 1, 1, 1) == 9
    assert zb_h1_bubble(4, 1, 1, 1) == 3                  # 1/3 of 1F1B's when F = B = W
    assert formulas.zb_h2_bubble(4, 1, 1, 1) == 0
    assert formulas.zb_h1_makespan(4, 8, 1, 1, 1) == 27     # 24 busy + 3
    assert formulas.interleaved_bubble_over_ideal(4, 8, 2) == pytest.approx(3 / 16)
    with pytest.raises(ValueError):
        gpipe_idle_fraction(0, 4)


def test_dataflow_rule():
    """
    t0 writes x; t1 reads x; t2 reads x; t3 writes x (after readers 1, 2); t4 read-writes x (after writer 3)
    """
    acc = [([], ["x"], []), (["x"], [], []), (["x"], [], []), ([], ["x"], []), ([], [], ["x"])]
    assert dataflow_deps(acc) == [(), (0,), (0,), (1, 2), (3,)]


@pytest.mark.parametrize("p,m", [(2, 1), (2, 4), (4, 1), (4, 8), (3, 5)])
def test_simulated_gpipe_matches_the_formula(p, m):
    plan = build_plan(p, m, 1.0, 1.0)
    s = plan.simulate()
    assert s.makespan == pytest.approx(one_f_one_b_makespan(p, m, 1.0, 1.0))
    busy = 2 * m
    assert 1 - busy / s.makespan == pytest.approx(gpipe_idle_fraction(p, m))


def test_split_backward_lowers_the_simulated_bubble():
    p, m = 4, 8
    whole = build_plan(p, m, 1, 1, 1, priorities="1f1b").simulate().makespan - m * 3
    split = build_plan(p, m, 1, 1, 1, split=True, priorities="zb").simulate().makespan - m * 3
    assert whole == formulas.one_f_one_b_bubble(p, 1, 1, 1)
    assert zb_h1_bubble(p, 1, 1, 1) <= split < whole


def test_plan_structure_and_string():
    plan = build_plan(2, 2, 10, 20, 5, split=True, optimizer_us=3)
    kinds = [t.kind for t in plan.tasks]
    assert kinds == ["F"] * 4 + ["Bx", "Bw"] * 4 + ["O"] * 2
    assert "Bw(1,0)" in str(plan) and "pipeline p=2 m=2" in str(plan)
    with pytest.raises(ValueError, match="priorities"):
        build_plan(2, 2, 1, 1, priorities="fastest")
    with pytest.raises(ValueError, match="m must be"):
        build_plan(2, 0, 1, 1)


def test_simulator_checks_its_input():
    with pytest.raises(ValueError, match="cycle"):
        simulate([1, 1], [[1], [0]], 1)
    with pytest.raises(ValueError, match="bad predecessor"):
        simulate([1], [[3]], 1)
    s = simulate([2, 2, 2], [[], [], []], 2, priorities=[0, 0, 5])
    assert list(s.start) == [0, 2, 0]      # the high-priority task starts first
