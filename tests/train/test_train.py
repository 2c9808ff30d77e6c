"""The training command end to end: loss falls, exact resume, Ctrl-C, generation, bad input."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import preloaded

from train_helpers import tiny_args as _args

from tiletrain import checkpoint as ck
from tiletrain.train import TrainArgs, train


def test_loss_falls(corpus, tmp_path):
    res = train(_args(corpus, steps=30, ckpt_dir=str(tmp_path / "ck"), sample_tokens=20))
    assert res.step == 30 and not res.stopped_early
    assert np.mean(res.train_losses[-5:]) < np.mean(res.train_losses[:5]) - 1.0
    assert res.val_losses[30] < res.val_losses[4]
    assert res.sample.startswith("def ") and len(res.sample) == 4 + 20
    arrays, meta = ck.load(tmp_path / "ck" / ck.CHECKPOINT_NAME)
    assert meta["step"] == 30 and "transformer.wte.weight" in arrays
    assert any(k.startswith("optimizer.") for k in arrays)


@pytest.mark.parametrize("dtype,exact", [("float64", True), ("float32", False)])
def test_resume_equals_uninterrupted(corpus, tmp_path, dtype, exact):
    kw = dict(dtype=dtype, micro_batches=2, dropout=0.1, steps=10)
    train(_args(corpus, ckpt_dir=str(tmp_path / "a"), **kw))
    first = train(_args(corpus, ckpt_dir=str(tmp_path / "b"), stop_after=6, **kw))
    assert first.stopped_early and first.step == 6
    second = train(_args(corpus, ckpt_dir=str(tmp_path / "b"), resume=True, **kw))
    assert second.step == 10
    a, ma = ck.load(tmp_path / "a" / ck.CHECKPOINT_NAME)
    b, mb = ck.load(tmp_path / "b" / ck.CHECKPOINT_NAME)
    assert sorted(a) == sorted(b) and ma["step"] == mb["step"] == 10
    # the optimizer's step tensors are saved as ints and load back as tensors counting on
    assert ma["optimizer"]["steps"] == mb["optimizer"]["steps"] and set(mb["optimizer"]["steps"].values()) == {10}
    for k in a:
        if exact:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        else:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-6, atol=1e-7, err_msg=k)


def test_bad_input(corpus, tmp_path):
    with pytest.raises(ValueError, match="--seq-len 32 exceeds --block-size 16"):
        train(_args(corpus, seq_len=32, block_size=16))
    with pytest.raises(ValueError, match="must be divisible by --n-head"):
        train(_args(corpus, n_embd=30, n_head=4))
    with pytest.raises(ck.CheckpointError, match="no checkpoint at"):
        train(_args(corpus, ckpt_dir=str(tmp_path / "none"), resume=True))
    train(_args(corpus, ckpt_dir=str(tmp_path / "c"), steps=4))
    with pytest.raises(ck.CheckpointError, match="different configuration: n_embd checkpoint=32 requested=64"):
        train(_args(corpus, ckpt_dir=str(tmp_path / "c"), resume=True, n_embd=64))
    path = tmp_path / "c" / ck.CHECKPOINT_NAME
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ck.CheckpointError, match="corrupt or truncated"):
        train(_args(corpus, ckpt_dir=str(tmp_path / "c"), resume=True))
    short = tmp_path / "short.txt"
    short.write_text("x" * 100)
    with pytest.raises(ValueError, match="too few for --seq-len"):
        train(_args(str(short), seq_len=16))


def _cli(*args, **kw):
    return preloaded.run(["-m", "tiletrain", *args], timeout=300, **kw)


def test_cli_train_and_generate(corpus, tmp_path):
    ckd = str(tmp_path / "ck")
    r = _cli("train", "--data", corpus, "--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--seq-len", "16",
             "--batch", "4", "--steps", "6", "--eval-every", "3", "--sample-tokens", "10", "--ckpt-dir", ckd)
    assert r.returncode == 0, r.stderr
    assert "step 6: train loss" in r.stdout + r.stderr and "sample:" in r.stdout
    r = _cli("generate", "--ckpt-dir", ckd, "--prompt", "class ", "--tokens", "12", "--temperature", "0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("class ") and len(r.stdout.rstrip("\n")) >= 6
    r = _cli("train", "--data", corpus, "--seq-len", "0")
    assert r.returncode == 2 and "--seq-len must be >= 1" in r.stderr


def test_ctrl_c_writes_a_checkpoint_and_stops(corpus, tmp_path):
    ckd = tmp_path / "ck"
    p = subprocess.Popen([sys.executable, "-m", "tiletrain", "train", "--data", corpus, "--n-layer", "1",
                          "--n-embd", "32", "--n-head", "2", "--seq-len", "16", "--batch", "4", "--steps", "100000",
                          "--eval-every", "0", "--no-progress", "--no-tensorboard", "--ckpt-dir", str(ckd)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:  # wait until it trains
            line = p.stdout.readline()
            if line.startswith("data:"):
                break
        time.sleep(2.0)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert "stopping after this step" in err and "stopped at step" in out
    arrays, meta = ck.load(ckd / ck.CHECKPOINT_NAME)
    assert meta["step"] >= 1 and "transformer.wte.weight" in arrays
    # the checkpoint and the run's metrics, nothing else (--no-tensorboard: no event files)
    assert sorted(os.listdir(ckd)) == sorted([ck.CHECKPOINT_NAME, "metrics.jsonl", "run.json"])


def test_memory_limit_mb_is_a_deprecated_alias_of_mem_limit():
    """One memory setting: mem_limit (--mem-limit); memory_limit_mb (--memory-limit-mb, MiB,
    the runtime's RuntimeConfig name) still works, with a DeprecationWarning."""
    from tiletrain.cli import build_parser
    with pytest.warns(DeprecationWarning, match="use mem_limit"):
        args = TrainArgs(memory_limit_mb=64)
    assert args.mem_limit == "64M" and args.memory_limit_mb is None
    with pytest.warns(DeprecationWarning):
        assert TrainArgs(memory_limit_mb=64, mem_limit="64M").mem_limit == "64M"
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="disagree"):
        TrainArgs(memory_limit_mb=64, mem_limit="1G")
    ns = build_parser().parse_args(["train", "--memory-limit-mb", "128"])
    with pytest.warns(DeprecationWarning):
        assert TrainArgs.from_namespace(ns).mem_limit == "128M"
