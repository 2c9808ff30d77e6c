"""Scheduling policies by name (StarPU's and tiletrain's own C policies), the precedence of
init(sched=...) over STARPU_SCHED, priority ranges, stage affinity and the tt-cp policy."""
import numpy as np
import pytest

import tiletrain as tt
from tiletrain.config import KNOWN_POLICIES, RuntimeConfig, tiletrain_policies
from tiletrain.runtime import registered_policies

from profiled_runtime import default_runtime_afterwards, restart  # noqa: F401 (autouse fixture)

ALL = list(KNOWN_POLICIES) + ["modular-eager", "modular-prio", "modular-heft"] + list(tiletrain_policies())
# measured: pheft and the modular prio/heft policies ignore the per-task worker mask;
# heteroprio aborts on it (tiletrain refuses affinity under heteroprio)
IGNORE_AFFINITY = {"pheft", "modular-prio", "modular-heft", "heteroprio"}


def small_op(rng):
    a = rng.standard_normal((5, 7))
    b = rng.standard_normal((7, 3))
    A, B = tt.from_numpy(a, tiles=(2, 3)), tt.from_numpy(b, tiles=(3, 2))
    np.testing.assert_allclose(((A * 2.0) @ B).numpy(), 2 * a @ b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sched", ALL)
def test_every_named_policy_runs_a_small_op(sched, rng):
    # profile=True: with profiling off, StarPU 1.3 sometimes aborts in the dm* policies
    # ("_starpu_driver_update_job_feedback: measured >= 0") when another task forces a perf
    # model's calibration while a task runs (the start time was never taken)
    rt = restart(sched=sched, profile=True)
    assert rt.sched == sched
    small_op(rng)


def test_tiletrain_policies_are_registered():
    assert "tt-cp" in tiletrain_policies()
    assert registered_policies() == tiletrain_policies()  # the config's names are the library's


def test_unknown_policy_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown scheduling policy 'fifo'.*eager.*dmda.*tt-cp"):
        RuntimeConfig(sched="fifo").validate()
    if tt.is_initialized():
        tt.shutdown()
    with pytest.raises(ValueError, match="tt-cp"):
        tt.init(sched="nope")


def test_sched_precedence_argument_environment_default(monkeypatch):
    if tt.is_initialized():
        tt.shutdown()
    monkeypatch.setenv("STARPU_SCHED", "eager")
    with tt.init(ncpu=2, sched="prio") as rt:         # argument > environment
        assert rt.sched == "prio"
    with tt.init(ncpu=2) as rt:                       # environment > default
        assert rt.sched == "eager"
    with tt.init(ncpu=2, sched="tt-cp") as rt:        # a C struct policy wins over STARPU_SCHED too
        assert rt.sched == "tt-cp"
    monkeypatch.setenv("STARPU_SCHED", "tt-cp")
    with tt.init(ncpu=2) as rt:
        assert rt.sched == "tt-cp"
    monkeypatch.delenv("STARPU_SCHED")
    with tt.init(ncpu=2) as rt:                       # tiletrain's default (config.DEFAULT_SCHED)
        assert rt.sched == "prio"


def test_priority_range_is_enforced():
    rt = restart(sched="eager", profile=False)
    assert rt.priority_range() == (0, 0)
    with pytest.raises(ValueError, match=r"priority 1 is outside the range \[0, 0\].*eager.*does not use"):
        with tt.priority(1):
            pass
    with tt.priority(0):
        pass
    with pytest.raises(ValueError, match="outside the range"):
        with tt.pipeline.priority_plan([0, 3]):
            pass
    with pytest.raises(ValueError, match="outside the range"):
        with tt.pipeline.priority_hints({"bwd": 2}), tt.tag(phase="bwd"):
            pass
    rt = restart(sched="prio", profile=False)
    with tt.priority(2**31 - 1), tt.priority(-2**31):
        pass


@pytest.mark.parametrize("sched", [s for s in ALL if s not in IGNORE_AFFINITY])
def test_affinity_pins_tasks(sched):
    restart(sched=sched)
    x = tt.from_numpy(np.arange(16.0), tiles=2)
    with tt.trace.recording() as rec:
        with tt.pipeline.affinity(1):
            y = x * 2.0
        with tt.pipeline.affinity([0]):
            z = y + 1.0
    w = rec.trace.tasks["worker"]
    assert (w[:8] == 1).all() and (w[8:] == 0).all()
    np.testing.assert_array_equal(z.numpy(), 2 * np.arange(16.0) + 1)
    with pytest.raises(ValueError, match="worker 7 does not exist"):
        with tt.pipeline.affinity(7):
            pass


def test_affinity_refused_under_heteroprio():
    restart(sched="heteroprio")
    with pytest.raises(ValueError, match="heteroprio policy cannot restrict"):
        with tt.pipeline.affinity(1):
            pass


def _ordered_run(sched, prios):
    """One worker: a long task first, then tasks with these priorities queue behind it."""
    restart(sched=sched, ncpu=1)
    data = [tt.from_numpy(np.zeros(1)) for _ in range(len(prios) + 2)]
    tt.wait()
    from tiletrain._ffi import lib
    with tt.trace.recording() as rec:
        with tt.priority(100):  # runs first, and long enough for the others to queue behind it
            lib.tt_spin(data[0]._handle(), data[0]._handle(), data[1]._handle(), data[0]._handle(), 200000, 1, 1)
        for i, p in enumerate(prios):
            with tt.priority(p):
                d0 = data[0]._handle()
                lib.tt_spin(d0, d0, data[i + 2]._handle(), d0, 0, 0, 1)
    t = rec.trace.tasks
    return list(np.argsort(t["start"][1:], kind="stable"))


def test_tt_cp_runs_by_priority_then_submission_order():
    # ids 0..5 with priorities: the order must be 5 (prio 9), 1, 3 (prio 4, submitted 1 before 3), 0, 2, 4
    assert _ordered_run("tt-cp", [0, 4, 0, 4, 0, 9]) == [5, 1, 3, 0, 2, 4]


def test_tt_cp_bottom_level_plan_replays_priorities():
    restart(sched="tt-cp")
    x = tt.from_numpy(np.ones((6, 6)), tiles=3)

    def step():
        return (x @ x) * 2.0

    with tt.trace.recording() as rec:
        step()
    plan = tt.pipeline.bottom_level_priorities(rec.trace)
    assert len(plan) == len(rec.trace) and plan.max() > plan.min()
    with tt.trace.recording() as rec2:
        with tt.pipeline.priority_plan(plan):
            y = step()
    np.testing.assert_array_equal(rec2.trace.tasks["priority"], plan)
    np.testing.assert_allclose(y.numpy(), 2 * np.ones((6, 6)) @ np.ones((6, 6)))
    with pytest.warns(RuntimeWarning, match="only 0 submissions"):
        with tt.pipeline.priority_plan(plan):
            pass
