"""Pipeline schedules as data: the Schedule record, the built-in schedules against their
papers' bubble formulas (unit durations, exact), CSV, and invalid schedules (no runtime)."""
import pytest

from tiletrain import trace
from tiletrain.pipeline import Action, Schedule, ScheduleError, formulas, schedules

CASES = [(name, p, m, kw) for name in schedules.NAMES for p in (2, 3, 4) for m in (4, 6, 8, 16)
         for kw in ({"virtual": 2}, {"virtual": 3}) if name == "interleaved-1f1b" and m % p == 0] + \
        [(name, p, m, kw) for name in schedules.NAMES for p in (2, 3, 4) for m in (4, 6, 8, 16)
         for kw in ({"chunks": 2}, {"chunks": 3}) if name == "seq1f1b"] + \
        [(name, p, m, {}) for name in schedules.NAMES for p in (2, 3, 4) for m in (4, 6, 8, 16)
         if name not in ("interleaved-1f1b", "seq1f1b") and not (name == "dualpipe-v" and m < 2 * p)]


@pytest.mark.parametrize("name,p,m,kw", CASES)
def test_builtin_simulation_matches_its_formula_exactly(name, p, m, kw):
    s = schedules.get(name, stages=p, microbatches=m, **kw)
    assert s.validate() is s and s.ranks == p and s.microbatches == m
    sim = s.simulate()
    idle, busy = formulas.schedule_bubble(name, p, m, virtual=kw.get("virtual", 2), chunks=kw.get("chunks", 2))
    assert sim.makespan == idle + busy                       # unit durations: exact
    for r in range(p):                                       # every rank has the formula's bubble
        assert sim.stage_idle[r] == pytest.approx(idle / (idle + busy), abs=1e-12)
    assert sim.idle_fraction == pytest.approx(
        formulas.schedule_idle_fraction(name, p, m, virtual=kw.get("virtual", 2), chunks=kw.get("chunks", 2)),
        abs=1e-12)


def test_formula_figures():
    f = formulas.schedule_idle_fraction
    assert f("1f1b", 4, 8) == pytest.approx(3 / 11)
    assert f("interleaved-1f1b", 4, 8, virtual=2) == pytest.approx(1.5 / 9.5)
    assert f("zb-h1", 4, 8) == pytest.approx(3 / 27)          # a third of 1F1B's bubble time
    assert f("zb-v", 4, 8) == pytest.approx(3 / 51)
    assert f("seq1f1b", 4, 8, chunks=2) == pytest.approx(3 / 19)
    assert f("zb-v", 4, 8) < f("1f1b", 4, 8) / 3
    with pytest.raises(ValueError, match="no formula"):
        f("fastest", 4, 8)


def test_peak_activations_follow_the_papers():
    p, m = 4, 8
    assert schedules.get("gpipe", p, m).simulate().peak_activations == m
    assert schedules.get("1f1b", p, m).simulate().stage_peak_activations == [4, 3, 2, 1]
    assert schedules.get("zb-h1", p, m).simulate().peak_activations == p     # 1F1B's memory
    assert schedules.get("zb-v", p, m).simulate().peak_activations == p      # 2p half-stage chunks
    assert schedules.get("seq1f1b", p, m, chunks=2).simulate().peak_activations < p
    emergent = schedules.get("emergent", p, m)
    assert not emergent.ordered
    assert emergent.simulate().makespan == schedules.get("1f1b", p, m).simulate().makespan
    # split backward, weight gradients last: ZB-H1's time at GPipe's memory
    ezb = schedules.get("emergent-zb", p, m).simulate()
    assert ezb.makespan == schedules.get("zb-h1", p, m).simulate().makespan and ezb.peak_activations == m


def test_notation_and_format():
    assert str(Action(2, "F", 0)) == "2F0" and str(Action(1, "W", 3, 2)) == "1W3.2"
    assert Action.parse(" 1I3 ") == Action(1, "I", 3) and Action.parse("0B2.1") == Action(0, "B", 2, 1)
    for bad in ("F0", "2X0", "2F", "-1F0", "2F0.x"):
        with pytest.raises(ScheduleError, match="bad action"):
            Action.parse(bad)
    for args in ((0, "X", 0), (-1, "F", 0), (0, "F", 1.5)):
        with pytest.raises(ScheduleError, match="bad action"):
            Action(*args)
    assert repr(schedules.get("zb-v", 2, 4)) == "<Schedule zb-v: 2 ranks, 4 stages, 4 micro-batches, 1 chunks>"
    text = schedules.get("1f1b", 2, 3).format()
    assert "Rank 0" in text and "Rank 1" in text and "Step 000: 0F0    1F0" in text
    assert text.splitlines()[0] == "schedule 1f1b: 2 ranks, 2 stages, 3 micro-batches"


@pytest.mark.parametrize("name,kw", [("zb-v", {}), ("seq1f1b", {"chunks": 3}), ("interleaved-1f1b", {})])
def test_csv_round_trip(tmp_path, name, kw):
    s = schedules.get(name, 2, 4, **kw)
    path = tmp_path / "s.csv"
    text = s.to_csv(path)
    assert text.splitlines()[0].split(",")[0] == str(s.actions[0][0])
    assert len(text.splitlines()) == 2                       # one row per rank
    back = Schedule.from_csv(path)
    assert back.actions == s.actions and back.name == "s"
    assert (back.stages, back.microbatches, back.chunks) == (s.stages, s.microbatches, s.chunks)
    assert back.validate().simulate().makespan == s.simulate().makespan
    # PyTorch's layout with empty (idle) cells reads too
    assert Schedule.from_csv("0F0,,0B0\n,1F0,1B0\n").actions == ((Action(0, "F", 0), Action(0, "B", 0)),
                                                                 (Action(1, "F", 0), Action(1, "B", 0)))


def test_invalid_schedules_name_the_offending_action(tmp_path):
    ok = [["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]]
    Schedule("ok", ok).validate()
    with pytest.raises(ScheduleError, match="missing action 1B1"):
        Schedule("x", [ok[0], ok[1][:-1]], microbatches=2).validate()
    with pytest.raises(ScheduleError, match="action 0F1 appears twice"):
        Schedule("x", [ok[0] + ["0F1"], ok[1]]).validate()
    with pytest.raises(ScheduleError, match="deadlock: action 0B0 on rank 0 waits for 1B0"):
        Schedule("x", [["0F0", "0B0", "0F1", "0B1"], ["1F0", "1F1", "1B1", "1B0"]]).validate()
    with pytest.raises(ScheduleError, match="action 1B1 on rank 1 waits for 1F1 .behind it on rank 1."):
        Schedule("x", [ok[0], ["1F0", "1B0", "1B1", "1F1"]]).validate()
    with pytest.raises(ScheduleError, match="action 1B1 on rank 0: stage 1 is on rank 1"):
        Schedule("x", [ok[0][:-1] + ["1B1"], ok[1][:-1] + ["0B1"]]).validate()
    with pytest.raises(ScheduleError, match="out of range"):
        Schedule("x", [ok[0] + ["0F5"], ok[1]], microbatches=2).validate()
    with pytest.raises(ScheduleError, match="missing action 1W0"):
        Schedule("x", [ok[0], ["1F0", "1I0", "1F1", "1B1"]]).validate()
    with pytest.raises(ScheduleError, match="1B0 .full backward. and 1I0"):
        Schedule("x", [ok[0], ["1F0", "1B0", "1I0", "1W0", "1F1", "1B1"]]).validate()
    with pytest.raises(ScheduleError, match="row 1: bad action"):
        Schedule.from_csv("0F0,0B0\n1F0,1Q0\n")
    with pytest.raises(FileNotFoundError):
        Schedule.from_csv(tmp_path / "nope.csv")
    with pytest.raises(ScheduleError, match="no actions"):
        Schedule("x", [[]])


def test_registry_checks_its_arguments():
    with pytest.raises(ValueError, match="unknown schedule 'fastest'"):
        schedules.get("fastest", 2, 4)
    with pytest.raises(ValueError, match="takes no virtual"):
        schedules.get("1f1b", 2, 4, virtual=2)
    with pytest.raises(ValueError, match="divisible"):
        schedules.get("interleaved-1f1b", 4, 6)
    with pytest.raises(ValueError, match="dualpipe-v needs"):
        schedules.get("dualpipe-v", 4, 4)
    with pytest.raises(ValueError, match="microbatches must be"):
        schedules.get("gpipe", 2, 0)
    with pytest.raises(ValueError, match="chunks must be"):
        schedules.get("seq1f1b", 2, 4, chunks=0)


def test_durations_and_chrome_trace(tmp_path):
    s = schedules.get("zb-h1", 4, 8)
    # F = B = W = 2: twice the unit times
    assert s.simulate({"F": 2, "I": 2, "W": 2}).makespan == 2 * s.simulate().makespan
    assert s.simulate(lambda a: 1.0).makespan == formulas.zb_h1_makespan(4, 8, 1, 1, 1)
    sim = s.simulate()
    tr = trace.load(sim.save_chrome(tmp_path / "zb.json"))
    assert len(tr) == 3 * 4 * 8 and set(tr.tasks["phase"]) == {"fwd", "bwd", "wgrad"}
    assert trace.makespan(tr) == pytest.approx(sim.makespan * 1000)
    assert sorted(set(tr.tasks["worker"])) == [0, 1, 2, 3]


def test_imports_run_one_way():
    """trace (records, metrics) <- pipeline (schedules, priorities) <- experiments (drivers
    above nn): no module imports a layer above its own, not even lazily.  The pipeline's
    executor modules (the one executor and its stage programs, the training glue) run
    models: they sit above nn, as tests/test_imports.py's LAYERS has the package."""
    import ast
    import pathlib

    import tiletrain
    root = pathlib.Path(tiletrain.__file__).parent
    above = {"trace": ("pipeline", "experiments", "nn"), "pipeline": ("experiments", "nn")}
    executors = {"model.py", "gnn.py", "noflush.py", "training.py"}
    for pkg, banned in above.items():
        for path in (root / pkg).glob("*.py"):
            ban = ("experiments",) if pkg == "pipeline" and path.name in executors else banned
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.level >= 2 and node.module:
                    assert node.module.split(".")[0] not in ban, f"{path.name} imports ..{node.module}"
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    parts = node.module.split(".")
                    assert not (parts[0] == "tiletrain" and len(parts) > 1 and parts[1] in ban), \
                        f"{path.name} imports {node.module}"


def test_pytorch_reads_our_actions():
    """Every cell of our CSV (no sequence chunks) is an action PyTorch's parser reads back as
    the same stage, kind and micro-batch."""
    import csv
    import io
    import torch.distributed.pipelining.schedules as pipelining
    kinds = {"F": "FORWARD", "I": "BACKWARD_INPUT", "W": "BACKWARD_WEIGHT", "B": "FULL_BACKWARD"}
    for name in ("zb-v", "interleaved-1f1b", "dualpipe-v"):
        s = schedules.get(name, 2, 4)
        for r, row in enumerate(csv.reader(io.StringIO(s.to_csv()))):
            for cell, ours in zip(row, s.actions[r]):
                theirs = pipelining._Action.from_str(cell)
                assert (theirs.stage_index, theirs.computation_type.name, theirs.microbatch_index) == \
                    (ours.stage, kinds[ours.kind], ours.microbatch)
