"""`tiletrain train`'s --schedule: which schedule a --dist layout steps (1F1B by default, a
built-in name, a CSV file), and the options that do not fit, rejected with a message that
says why before anything runs (pure: no runtime, no MPI)."""
import pytest

from tiletrain.pipeline import schedules
from tiletrain.pipeline.training import DEFAULT_SCHEDULE, training_schedule
from tiletrain.train import TrainArgs

CSV = "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n"


def test_the_layout_picks_the_schedule(tmp_path):
    assert DEFAULT_SCHEDULE == "1f1b"
    s = training_schedule(None, "pipeline", 4, n_layer=4, world=2)
    assert s.actions == schedules.get("1f1b", 2, 4).actions
    s = training_schedule("zb-v", "pipeline+data", 4, n_layer=4, world=4, stages=2)   # 2 stages x 2 replicas
    assert (s.name, s.ranks, s.stages) == ("zb-v", 2, 4)
    f = tmp_path / "mine.csv"
    f.write_text(CSV)
    s = training_schedule(str(f), "pipeline", 2, n_layer=2, world=2)
    assert (s.name, s.ranks, s.microbatches) == ("mine", 2, 2)
    # no stage to pipeline: single, data, and one process
    assert training_schedule(None, "single", 4, n_layer=4, world=2) is None
    assert training_schedule(None, "data", 4, n_layer=4, world=2) is None
    assert training_schedule("gpipe", "pipeline", 4, n_layer=4, world=1) is None
    # one process, --stages S: S stages on groups of workers (pb and local too)
    s = training_schedule("pb", "pipeline", 4, n_layer=4, world=1, stages=2)
    assert (s.name, s.ranks, s.flush) == ("pb", 2, False)
    assert training_schedule("local", "pipeline", 4, n_layer=4, world=1, stages=3).local
    # a saved pb or local schedule is that schedule again (its #schedule header row)
    for name, kw in (("pb", {}), ("local", {"queue": 1})):
        want = schedules.get(name, 2, 4, **kw)
        want.to_csv(tmp_path / f"{name}.csv")
        s = training_schedule(str(tmp_path / f"{name}.csv"), "pipeline", 4, n_layer=4, world=1, stages=2)
        assert (s.actions, s.flush, s.local, s.queue, s.delays()) == (want.actions, want.flush, want.local,
                                                                      want.queue, want.delays())
    with pytest.raises(ValueError, match="updates every stage during the step, with one replica"):
        training_schedule(str(tmp_path / "pb.csv"), "pipeline+data", 4, n_layer=4, world=4, stages=2)
    with pytest.raises(ValueError, match="under mpirun the stages are the 2 ranks"):
        training_schedule("pb", "pipeline", 4, n_layer=4, world=2, stages=3)


@pytest.mark.parametrize("spec, mode, kw, message", [
    ("gpipe", "data", {}, "--schedule is for --dist pipeline or pipeline+data (--dist data runs no pipeline)"),
    ("nope", "pipeline", {}, "--schedule 'nope': neither a built-in schedule (gpipe, 1f1b"),
    ("CSV", "pipeline", dict(world=3), "the schedule has 2 stages (rows), --dist pipeline on this job needs 3"),
    ("CSV", "pipeline", dict(micro_batches=4), "the schedule has 2 micro-batches, --dist pipeline on this job needs 4"),
    ("BAD", "pipeline", {}, "--schedule"),
    ("zb-v", "pipeline", dict(n_layer=3), "zb-v: 4 virtual stages but the model has only 3 layers"),
    ("interleaved-1f1b", "pipeline", dict(micro_batches=3), "--schedule interleaved-1f1b on 2 stages x "
                                                             "--micro-batches 3"),
    ("pb", "pipeline+data", dict(world=4, stages=2), "--schedule pb updates every stage during the step, with one "
                                                      "replica"),
])
def test_a_schedule_that_does_not_fit_is_rejected(tmp_path, spec, mode, kw, message):
    (tmp_path / "c.csv").write_text(CSV)
    (tmp_path / "bad.csv").write_text("0F0,0B1\n")
    spec = {"CSV": str(tmp_path / "c.csv"), "BAD": str(tmp_path / "bad.csv")}.get(spec, spec)
    args = dict(world=2, micro_batches=2, n_layer=4) | kw
    with pytest.raises(ValueError, match=None) as exc:
        training_schedule(spec, mode, args["micro_batches"], args["n_layer"], world=args["world"],
                          stages=args.get("stages"))
    assert message in str(exc.value)


def test_train_args_check_the_schedule_option(tmp_path):
    TrainArgs(dist="pipeline", schedule="gpipe").validate()
    with pytest.raises(ValueError, match="--schedule is for --dist pipeline or pipeline"):
        TrainArgs(schedule="gpipe").validate()
    with pytest.raises(ValueError, match="neither a built-in schedule"):
        TrainArgs(dist="pipeline", schedule=str(tmp_path / "missing.csv")).validate()
