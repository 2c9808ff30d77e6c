"""Run directories (issue 36): metrics.jsonl equals what train prints and returns; run.json;
TensorBoard events read back (tensorboard's own EventAccumulator) equal metrics.jsonl; a
SIGKILL between a checkpoint and a log line (either order) leaves one line per step after the
resume; --trace-step's trace and metrics; `tiletrain runs show/compare/list` (PNGs with the
right curves); an older run directory without metrics is a one-line message; RunLogger from a
loop of one's own."""
import dataclasses
import functools
import io
import json
import re
import subprocess
import sys

import numpy as np
import pytest

import preloaded

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util
from train_helpers import cli_here, tiny_args

import tiletrain as tt
from tiletrain import checkpoint as ck
from tiletrain.cli import main
from tiletrain.train import TrainArgs, train
from tiletrain.train.runs import figure_compare, figure_run
from tiletrain.utils import RunLogger
from tiletrain.utils.runlog import EVENTS_SUFFIX, RunLogError, is_run_file, read_metrics, read_run, read_texts

KEYS = {"step", "train_loss", "lr", "grad_norm", "tokens_per_s", "gflops", "step_time_s", "peak_memory_bytes",
        "elapsed_s", "time"}


_args = functools.partial(tiny_args, steps=8)


def _events(run_dir):
    ea = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    return ea


def _scalar_steps(ea, tag):
    return [(e.step, e.value) for e in ea.Scalars(tag)]


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    """Two short runs (the first traced at step 6, with a sample at the end), their printed
    output and TrainResults."""
    tt.shutdown()
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for name, kw in (("a", dict(trace_step=6, sample_tokens=8)), ("b", dict(lr=1e-3))):
        buf = io.StringIO()
        res = train(_args(corpus, ckpt_dir=str(root / name), **kw), out=buf)
        out[name] = (root / name, buf.getvalue(), res)
    return out


def test_metrics_equal_the_printed_and_returned_losses(trained):
    run_dir, printed, res = trained["a"]
    lines = read_metrics(run_dir)
    assert [ln["step"] for ln in lines] == list(range(1, 9))
    assert [ln["train_loss"] for ln in lines] == res.train_losses
    assert {ln["step"]: ln["val_loss"] for ln in lines if "val_loss" in ln} == res.val_losses == {
        4: res.val_losses[4], 8: res.val_losses[8]}
    shown = re.findall(r"step (\d+): train loss ([\d.]+), val loss ([\d.]+)", printed)
    assert len(shown) == 2
    for step, tl, vl in shown:
        line = lines[int(step) - 1]
        assert f"{line['train_loss']:.4f}" == tl and f"{line['val_loss']:.4f}" == vl
    for ln in lines:
        assert KEYS <= set(ln), set(ln)
        assert ln["tokens_per_s"] > 0 and ln["step_time_s"] > 0 and ln["peak_memory_bytes"] > 1 << 20
        assert ln["tokens_per_s"] == pytest.approx(64 / ln["step_time_s"])  # 4 x 16 tokens in the measured time
        assert ln["grad_norm"] > 0
    assert np.all(np.diff([ln["elapsed_s"] for ln in lines]) > 0)
    lr = [ln["lr"] for ln in lines]
    assert lr[0] == pytest.approx(1.5e-3) and lr[1] == pytest.approx(3e-3)  # warm-up of 2 steps to --lr
    run = read_run(run_dir)
    assert set(run["config"]) == {f.name for f in dataclasses.fields(TrainArgs)}
    assert run["config"]["trace_step"] == 6 and run["config"]["ckpt_dir"] == str(run_dir)
    assert run["seed"] == 0 and run["model_type"] == "gpt2" and run["tiletrain"] == tt.__version__
    assert run["starpu"] and run["blas"] and run["machine"]["cpus"] >= 1 and run["started"]
    assert run["n_params"] > 0 and run["last"]["step"] == 8
    assert [t["tag"] for t in read_texts(run_dir)] == ["sample"] and read_texts(run_dir)[0]["text"] == res.sample


def test_step_times_add_up_to_the_training_time(trained):
    """A step's time is the spacing of its completion after the previous one's (an evaluation
    excluded); the steps' times are parts of the run's time, and the printed overall figure is
    the logged one: every token over the whole run (evaluations and checkpoints included, so
    it is below the steps' own throughput by as much as they took)."""
    for name in ("a", "b"):
        run_dir, printed, _ = trained[name]
        lines = read_metrics(run_dir)
        for prev, ln in zip(lines, lines[1:]):
            if "val_loss" not in prev:  # no evaluation between the two completions
                assert ln["step_time_s"] == pytest.approx(ln["elapsed_s"] - prev["elapsed_s"], rel=1e-6, abs=1e-6)
        last = read_run(run_dir)["last"]
        overall = float(re.search(r"([\d,]+) tokens/s", printed).group(1).replace(",", ""))
        assert overall == pytest.approx(last["tokens_per_s"], abs=0.5)
        assert last["tokens_per_s"] == pytest.approx(64 * len(lines) / last["elapsed_s"])
        steps_time = sum(ln["step_time_s"] for ln in lines)
        assert steps_time <= lines[-1]["elapsed_s"] * (1 + 1e-6) and lines[-1]["elapsed_s"] <= last["elapsed_s"]


def test_tensorboard_events_read_back_equal_the_metrics(trained):
    run_dir, _, _ = trained["a"]
    lines = read_metrics(run_dir)
    ea = _events(run_dir)
    numeric = {k for ln in lines for k, v in ln.items() if k not in ("step", "time") and not isinstance(v, bool)}
    assert set(ea.Tags()["scalars"]) == numeric
    for key in numeric:
        want = [(ln["step"], np.float32(ln[key])) for ln in lines if key in ln]
        assert _scalar_steps(ea, key) == want, key
    config = tensor_util.make_ndarray(ea.Tensors("config")[0].tensor_proto).item().decode()
    assert '"trace_step": 6' in config
    (sample,) = ea.Tensors("sample")
    assert sample.step == 8 and tensor_util.make_ndarray(sample.tensor_proto).item().decode() == trained["a"][2].sample


def test_trace_step_writes_the_steps_trace_and_metrics(trained):
    run_dir, printed, _ = trained["a"]
    assert "step 6 traced:" in printed and "critical path" in printed
    trace = tt.trace.load(run_dir / "trace-step6.json")
    m = json.loads((run_dir / "trace-step6-metrics.json").read_text())
    assert m["step"] == 6 and m["ntasks"] == len(trace) > 0
    assert 0 < m["critical_path_us"] <= m["makespan_us"] and m["idle_fraction"] and "makespan" in m["summary"]
    assert [ln.get("traced") for ln in read_metrics(run_dir)] == [None] * 5 + [True] + [None] * 2
    assert not list(trained["b"][0].glob("trace-step*"))


def _main(*argv):
    return main([str(a) for a in argv])


def _png(path):
    data = path.read_bytes()
    return len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"


def test_runs_show_compare_and_list(trained, tmp_path, capsys, monkeypatch):
    a, b = trained["a"][0], trained["b"][0]
    assert _main("runs", "show", a) == 0
    out = capsys.readouterr().out
    assert f"train loss   {read_metrics(a)[-1]['train_loss']:.4f} (step 8)" in out and "trace-step6.json" in out
    assert _png(a / "loss.png")
    fig = figure_run(read_metrics(a))
    assert [len(ax.get_lines()) for ax in fig.axes] == [2, 1]  # train and validation loss; lr
    assert [ln.get_label() for ln in fig.axes[0].get_lines()] == ["train", "validation"]
    monkeypatch.chdir(tmp_path)
    assert _main("runs", "compare", a, b) == 0
    out = capsys.readouterr().out
    assert _png(tmp_path / "runs-compare.png")
    rows = [ln for ln in out.splitlines() if ln.startswith(("a ", "b "))]
    assert len(rows) == 2 and f"{read_metrics(b)[-1]['val_loss']:.4f}" in rows[1]
    fig = figure_compare([("a", read_metrics(a)), ("b", read_metrics(b))])
    assert [len(ax.get_lines()) for ax in fig.axes] == [2, 2, 2]  # train loss, val loss, tokens/s: one per run
    assert _main("runs", "compare", a, b, "--out", tmp_path / "c.png") == 0 and _png(tmp_path / "c.png")
    old = a.parent / "old"  # a run directory of a tiletrain from before metrics logs
    old.mkdir()
    (old / ck.CHECKPOINT_NAME).write_bytes(b"x")
    capsys.readouterr()
    assert _main("runs", "list", a.parent) == 0
    out = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in out[2:]] == ["a", "b", "old"] and "older run" in out[4]


@pytest.mark.parametrize("argv,words", [
    (["show", "{old}"], ["has no metrics.jsonl", "before metrics logs", "--resume"]),
    (["show", "{empty}"], ["has no metrics.jsonl", "not a run directory"]),
    (["compare", "{old}", "{empty}"], ["has no metrics.jsonl"]),
    (["list", "{missing}"], ["is not a directory"]),
])
def test_a_directory_without_metrics_is_a_clear_message(tmp_path, argv, words, capsys):
    """`tiletrain runs ...` (cli.main in this process: nothing starts the runtime)."""
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / ck.CHECKPOINT_NAME).write_bytes(b"x")
    (tmp_path / "empty").mkdir()
    dirs = {k: tmp_path / k for k in ("old", "empty", "missing")}
    r = cli_here(capsys, "runs", *[a.format(**dirs) for a in argv])
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("tiletrain: error: ")
    for w in words:
        assert w in line, line


KILL = """if True:
    import json, os, signal, sys
    import tiletrain.train.loop as loop
    from tiletrain.train import TrainArgs, train
    where, at, kw = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    real = getattr(loop, where)
    def dying(run, *a):
        real(run, *a)
        if run.step == at:
            os.kill(os.getpid(), signal.SIGKILL)  # killed right after the step's checkpoint / metrics line
    setattr(loop, where, dying)
    train(TrainArgs(**kw))
"""


@pytest.mark.parametrize("where", ["save", "record"])
def test_a_kill_between_checkpoint_and_log_line_leaves_one_line_per_step(corpus, tmp_path, where):
    """Killed right after step 4's checkpoint (before step 5's line) or right after step 4's
    line (before its checkpoint: the resume from step 2's drops it and trains it again):
    after the resume, metrics.jsonl and the TensorBoard events have each step once, equal to
    an uninterrupted run's (float64: bitwise)."""
    kw = dict(steps=6, eval_every=2, dtype="float64")
    ref = train(_args(corpus, ckpt_dir=str(tmp_path / "ref"), **kw))
    d = tmp_path / "killed"
    args = dataclasses.asdict(_args(corpus, ckpt_dir=str(d), **kw))
    r = subprocess.run([sys.executable, "-c", KILL, where, "4", json.dumps(args)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == -9, r.stderr[-2000:]
    before = [ln["step"] for ln in read_metrics(d)]
    assert before == [1, 2, 3, 4] and ck.load(d / ck.CHECKPOINT_NAME)[1]["step"] == (4 if where == "save" else 2)
    out = io.StringIO()
    res = train(_args(corpus, ckpt_dir=str(d), resume=True, **kw), out=out)
    assert res.step == 6
    lines = read_metrics(d)
    assert [ln["step"] for ln in lines] == list(range(1, 7))
    assert [ln["train_loss"] for ln in lines] == ref.train_losses
    assert ("dropped 2 lines" in out.getvalue()) == (where == "record")
    ea = _events(d)
    assert _scalar_steps(ea, "train_loss") == [(i + 1, np.float32(v)) for i, v in enumerate(ref.train_losses)]
    assert len(list(d.glob(f"*{EVENTS_SUFFIX}"))) == 1
    assert [e["step"] for e in read_run(d)["resumes"]] == [4 if where == "save" else 2]


def test_cli_run_dir_no_tensorboard_and_a_second_run_refused(corpus, tmp_path):
    tiny = ["--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--seq-len", "16", "--batch", "2", "--steps", "2",
            "--eval-every", "0", "--sample-tokens", "0", "--no-progress"]
    d = tmp_path / "r"
    r = preloaded.run(["-m", "tiletrain", "train", "--data", corpus, *tiny, "--run-dir", str(d),
                        "--no-tensorboard"], timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"run: {d}" in r.stdout
    assert sorted(p.name for p in d.iterdir()) == ["metrics.jsonl", "run.json"]
    assert [ln["step"] for ln in read_metrics(d)] == [1, 2]
    r = preloaded.run(["-m", "tiletrain", "train", "--data", corpus, *tiny, "--run-dir", str(d)], timeout=300)
    assert r.returncode == 2 and "already holds the metrics of a run" in r.stderr and "--overwrite" in r.stderr
    assert "model:" not in r.stdout
    c = tmp_path / "ck"  # a --ckpt-dir whose run was killed before its first checkpoint: started over
    c.mkdir()
    (c / "metrics.jsonl").write_text('{"step": 1, "train_loss": 9.0}\n')
    r = preloaded.run(["-m", "tiletrain", "train", "--data", corpus, *tiny, "--ckpt-dir", str(c)], timeout=300)
    assert r.returncode == 0 and "stopped before its first checkpoint: starting over" in r.stdout, r.stderr
    assert [ln["step"] for ln in read_metrics(c)] == [1, 2] and read_metrics(c)[0]["train_loss"] != 9.0
    r = preloaded.run(["-m", "tiletrain", "train", "--data", corpus, *tiny, "--trace-step", "3"], timeout=300)
    assert r.returncode == 2 and "--trace-step 3 is beyond --steps 2" in r.stderr


# -- RunLogger alone (no runtime): a loop of one's own

def test_run_logger_in_a_loop_of_ones_own(tmp_path):
    d = tmp_path / "mine"
    with RunLogger(d, config={"lr": 0.1}, seed=3) as log:
        for step in range(1, 4):
            log.log(step, train_loss=1.0 / step, lr=0.1, note="x")
        log.text("sample", "def f():", step=3)
        with pytest.raises(RunLogError, match="step 3 is not after the last step logged"):
            log.log(3, train_loss=0.0)
    assert [ln["train_loss"] for ln in read_metrics(d)] == [1.0, 0.5, 1 / 3]
    assert read_run(d)["config"] == {"lr": 0.1} and read_run(d)["seed"] == 3
    ea = _events(d)
    assert _scalar_steps(ea, "lr") == [(s, np.float32(0.1)) for s in (1, 2, 3)] and "note" not in ea.Tags()["scalars"]
    assert all(is_run_file(p.name) for p in d.iterdir())
    with pytest.raises(RunLogError, match="already holds the metrics of a run"):
        RunLogger(d)
    with RunLogger(d, overwrite=True, tensorboard=False) as log:  # a new run: the old metrics, texts, events go
        log.log(1, train_loss=7.0)
    assert read_metrics(d) == [{"step": 1, "train_loss": 7.0, "time": read_metrics(d)[0]["time"]}]
    assert read_texts(d) == [] and not list(d.glob("events.*"))


def test_run_logger_resume_drops_later_lines_and_a_torn_one(tmp_path):
    d = tmp_path / "r"
    with RunLogger(d) as log:
        for step in range(1, 6):
            log.log(step, train_loss=float(step), elapsed_s=step * 0.5)
        log.text("sample", "late", step=5)
    with open(d / "metrics.jsonl", "ab") as f:
        f.write(b'{"step": 6, "train_lo')  # a kill in the middle of a write
    with pytest.raises(RunLogError, match="resume that run or overwrite it"):
        RunLogger(d)
    with RunLogger(d, resume_step=3) as log:
        assert log.dropped == 2 and log.last_step == 3 and log.base_elapsed == 1.5
        log.log(4, train_loss=40.0)
    assert [(ln["step"], ln["train_loss"]) for ln in read_metrics(d)] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]
    assert read_texts(d) == [] and [r["step"] for r in read_run(d)["resumes"]] == [3]
    assert _scalar_steps(_events(d), "train_loss") == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]
    (d / "metrics.jsonl").write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(RunLogError, match=r"metrics.jsonl:2: a corrupt metrics line"):
        read_metrics(d)
