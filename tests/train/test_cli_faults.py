"""Faults end cleanly: bad CLI input is refused before any work (`tiletrain: error:`, exit 2);
checkpoint I/O errors are one line with the path and the last good checkpoint; checkpoints
carry per-tensor checksums; stale temporaries go; --stop-after exits 0."""
import contextlib
import errno
import json

import numpy as np
import pytest

import preloaded

from tiletrain import checkpoint as ck
from tiletrain.train import TrainArgs, train
from tiletrain.utils.runlog import is_run_file, read_metrics
from train_helpers import cli_here


TINY = ["--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--seq-len", "16", "--batch", "2", "--steps", "2",
        "--eval-every", "2", "--eval-batches", "1", "--sample-tokens", "0", "--no-progress"]


def _cli(*args):
    return preloaded.run(["-m", "tiletrain", *args], timeout=300)


def _train(corpus, *args):
    return _cli("train", "--data", corpus, *TINY, *args)


def _refused(r, *words):
    """Exit 2 with one `tiletrain: error:` line naming `words`, and no training ran."""
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("tiletrain: error: ")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert "model:" not in r.stdout and "done at step" not in r.stdout
    return lines[0]


BAD_TRAIN = [
    (["--lr", "nan"], "--lr"), (["--lr", "inf"], "--lr"), (["--lr", "1e30"], "--lr"), (["--lr", "0"], "--lr"),
    (["--weight-decay", "nan"], "--weight-decay"), (["--weight-decay", "-0.1"], "--weight-decay"),
    (["--min-lr", "nan"], "--min-lr"), (["--min-lr", "1"], "--min-lr"),
    (["--grad-clip", "nan"], "--grad-clip"), (["--grad-clip", "-1"], "--grad-clip"),
    (["--grad-clip", "inf"], "--grad-clip"), (["--max-bytes", "-1"], "--max-bytes"),
    (["--eval-every", "-1"], "--eval-every"), (["--warmup", "-5"], "--warmup"),
    (["--dropout", "nan"], "--dropout"), (["--val-fraction", "nan"], "--val-fraction"),
    (["--stop-after", "0"], "--stop-after"), (["--seed", "-1"], "--seed"), (["--ncpu", "0"], "--ncpu"),
]


@pytest.mark.parametrize("argv,option", BAD_TRAIN, ids=[" ".join(a) for a, _ in BAD_TRAIN])
def test_bad_train_option(corpus, argv, option, capsys):
    args = ["train", "--data", corpus, *TINY, *argv]
    _refused(_cli(*args) if argv == BAD_TRAIN[0][0] else cli_here(capsys, *args), option)


BAD_OTHER = [
    (["generate", "--ckpt-dir", "x", "--temperature", "nan"], "--temperature"),
    (["generate", "--ckpt-dir", "x", "--tokens", "-1"], "--tokens"),
    (["generate", "--ckpt-dir", "x", "--top-k", "0"], "--top-k"),
    (["bench", "sched", "--reps", "0", "--no-files"], "--reps"),
    (["bench", "sched", "--tiles", "256", "0", "--no-files"], "--tiles"),
    (["trace", "pipeline", "--usec", "inf"], "--usec"),
]


@pytest.mark.parametrize("argv,option", BAD_OTHER, ids=[" ".join(a) for a, _ in BAD_OTHER])
def test_bad_option_of_other_commands(argv, option, capsys):
    _refused(_cli(*argv) if argv == BAD_OTHER[0][0] else cli_here(capsys, *argv), option)


def test_ckpt_dir_not_writable_fails_before_training(corpus, tmp_path):
    f = tmp_path / "file"
    f.write_text("not a directory")
    _refused(_train(corpus, "--ckpt-dir", str(f)), str(f), "not a directory")
    _refused(_train(corpus, "--ckpt-dir", str(f / "sub")), str(f / "sub"), "not writable")
    assert f.read_text() == "not a directory"


def _args(corpus, **kw):
    base = dict(n_layer=1, n_head=2, n_embd=32, seq_len=16, batch=2, steps=4, warmup=1, eval_every=2,
                eval_batches=1, sample_tokens=0, progress=False, data=[corpus], val_fraction=0.1)
    base.update(kw)
    return TrainArgs(**base)


def test_validate_is_the_python_api_too(corpus):
    for kw, option in [(dict(lr=float("nan")), "--lr"), (dict(grad_clip=-1.0), "--grad-clip"),
                       (dict(warmup=-5), "--warmup"), (dict(max_bytes=-1), "--max-bytes")]:
        with pytest.raises(ValueError, match=option):
            train(_args(corpus, **kw))


def test_write_error_is_one_line_with_the_last_good_checkpoint(corpus, tmp_path, monkeypatch, capsys):
    from tiletrain.cli import main
    real, calls = ck._atomic_file, []

    class FullDisk:  # the second checkpoint's file: the disk fills up after its header
        def __init__(self, f):
            self.f, self.n = f, 0

        def write(self, data):
            self.n += 1
            if self.n > 1:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.f.write(data)

    @contextlib.contextmanager
    def full_disk(path, *a, **kw):
        calls.append(path)
        with real(path, *a, **kw) as f:
            yield f if len(calls) == 1 else FullDisk(f)

    monkeypatch.setattr(ck, "_atomic_file", full_disk)
    ckd = tmp_path / "ck"
    rc = main(["train", "--data", corpus, *TINY, "--steps", "4", "--ckpt-dir", str(ckd)])
    err = capsys.readouterr().err
    assert rc == 1 and len(calls) == 2, err
    lines = [ln for ln in err.splitlines() if ln.startswith("tiletrain: error: ")]
    path = ckd / ck.CHECKPOINT_NAME
    assert lines == [f"tiletrain: error: cannot write checkpoint {path}: No space left on device (at step 4); "
                     f"the last good checkpoint is {path} at step 2"], err
    assert ck.load(path)[1]["step"] == 2  # the previous checkpoint is whole
    # the partial write is removed (the run's metrics.jsonl, run.json, events stay)
    assert sorted(f.name for f in ckd.iterdir() if not is_run_file(f.name)) == [ck.CHECKPOINT_NAME]
    assert [ln["step"] for ln in read_metrics(ckd)] == [1, 2, 3, 4]  # step 4 was logged before its checkpoint


def test_stop_after_exits_0_and_resume_beyond_steps(corpus, tmp_path):
    ckd = str(tmp_path / "ck")
    r = _train(corpus, "--steps", "4", "--stop-after", "1", "--ckpt-dir", ckd)
    assert r.returncode == 0 and "stopped at step 1" in r.stdout, r.stderr
    r = _train(corpus, "--steps", "2", "--ckpt-dir", ckd, "--resume")
    assert r.returncode == 0 and "done at step 2" in r.stdout, r.stderr
    # resuming a finished run: a clear message, nothing trained, the checkpoint untouched
    before = (tmp_path / "ck" / ck.CHECKPOINT_NAME).read_bytes()
    r = _train(corpus, "--steps", "2", "--ckpt-dir", ckd, "--resume")
    assert r.returncode == 0 and "training is already complete" in r.stdout, r.stderr
    assert "done at step" not in r.stdout
    assert (tmp_path / "ck" / ck.CHECKPOINT_NAME).read_bytes() == before
    # a checkpoint beyond --steps: an error naming both
    _refused(_train(corpus, "--steps", "1", "--ckpt-dir", ckd, "--resume"), "at step 2", "beyond --steps 1")


def _tensor_bytes(path):
    """{name: (start, end)} byte ranges of each tensor's data in a safetensors file."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    return {k: (8 + n + v["data_offsets"][0], 8 + n + v["data_offsets"][1])
            for k, v in header.items() if k != "__metadata__"}


def _flip(path, name, nbytes=16):
    start, end = _tensor_bytes(path)[name]
    raw = bytearray(path.read_bytes())
    for i in range(start, min(end, start + nbytes)):
        raw[i] ^= 0xFF
    path.write_bytes(bytes(raw))


@pytest.fixture
def trained(corpus, tmp_path):
    ckd = tmp_path / "trained"
    train(_args(corpus, steps=2, ckpt_dir=str(ckd)))
    return ckd


def test_corrupted_tensor_is_detected_on_resume(corpus, trained):
    path = trained / ck.CHECKPOINT_NAME
    name = next(k for k in sorted(_tensor_bytes(path)) if k.startswith("optimizer.") and "exp_avg" in k)
    _flip(path, name)
    _refused(_train(corpus, "--steps", "4", "--ckpt-dir", str(trained), "--resume"),
             repr(name), str(path), "checksum")


def test_every_corrupted_tensor_is_detected(trained, tmp_path):
    path = trained / ck.CHECKPOINT_NAME
    good = path.read_bytes()
    names = sorted(_tensor_bytes(path))
    detected = 0
    for name in names:
        bad = tmp_path / "bad.safetensors"
        bad.write_bytes(good)
        _flip(bad, name, nbytes=1)  # a single byte is enough
        with pytest.raises(ck.CheckpointError, match=f"tensor '{name}' fails its SHA-256 checksum") as e:
            ck.load(bad)
        assert str(bad) in str(e.value)
        detected += 1
    assert detected == len(names) > 10


def test_missing_metadata_keys(corpus, trained):
    path = trained / ck.CHECKPOINT_NAME
    arrays, meta = ck.load(path)
    del meta["optimizer"], meta["data_rng"]
    ck.save(path, arrays, meta)
    line = _refused(_train(corpus, "--steps", "4", "--ckpt-dir", str(trained), "--resume"), str(path), "lacks")
    assert "'optimizer.steps'" in line and "'data_rng'" in line and "KeyError" not in line
    del meta["config"]
    ck.save(path, arrays, meta)
    _refused(_cli("generate", "--ckpt-dir", str(trained)), "lacks 'config'")


def test_stale_temporaries_removed_at_next_save(tmp_path):
    p = tmp_path / ck.CHECKPOINT_NAME
    stale = [tmp_path / f".{ck.CHECKPOINT_NAME}.abc{i}.tmp" for i in range(2)]
    for s in stale:
        s.write_bytes(b"half a checkpoint")
    other = tmp_path / ".other.safetensors.x.tmp"
    other.write_bytes(b"not ours")
    ck.save(p, {"w": np.ones(3)}, {"step": 1})
    assert sorted(f.name for f in tmp_path.iterdir()) == sorted([ck.CHECKPOINT_NAME, other.name])


def test_old_checkpoint_without_checksums_loads_with_a_warning(tmp_path):
    from safetensors.numpy import save_file
    p = tmp_path / "old.safetensors"
    save_file({"w": np.arange(3.0)}, str(p), metadata={"format": ck.FORMAT, "metadata": json.dumps({"step": 3})})
    with pytest.warns(UserWarning, match="no checksums"):
        arrays, meta = ck.load(p)
    assert meta == {"step": 3} and arrays["w"].tolist() == [0.0, 1.0, 2.0]


def test_checksum_table_must_match_the_tensors(tmp_path):
    from safetensors.numpy import save_file
    p = tmp_path / "c.safetensors"
    save_file({"w": np.zeros(2), "v": np.zeros(2)}, str(p),
              metadata={"format": ck.FORMAT, "metadata": "{}", "checksums": json.dumps({"w": ck.checksum(np.zeros(2))})})
    with pytest.raises(ck.CheckpointError, match="checksum table does not match the tensors.*v"):
        ck.load(p)
