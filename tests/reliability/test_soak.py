"""The fault soak, short (issue 29): `tiletrain train` under `mpirun -np 2` killed 5 times with
SIGKILL (one rank, both ranks, during a checkpoint write) and resumed: no checkpoint lost or
corrupt, no temporary left, every checkpoint's losses and tensors equal to an uninterrupted
run's (float64).  benchmarks/soak.py runs the same with 50 kills; tests/reliability/soak.py
holds both."""
import json
import signal
import subprocess
import sys

import numpy as np
import pytest

import tiletrain.checkpoint as ck
from soak import KINDS, Reference, SoakConfig, SoakReport, audit_end, audit_kill, format_report, run_soak
from mpi_launch import requires_mpi  # soak.py put tests/mpi on the path


@requires_mpi
@pytest.mark.mpi
def test_a_kill_of_each_kind_loses_nothing_and_resumes_exactly(tmp_path):
    report = run_soak(SoakConfig(kills=3, seed=3, steps=6, every=2), tmp_path)  # one round of KINDS
    text = format_report(report)
    assert not report.failures, text
    assert report.total_kills == 3 and all(report.kills[k] for k in KINDS), text
    assert report.trainings >= 1 and report.steps_compared >= 3, text


def _checkpoint(folder, train_loss, w, step=6):
    meta = {"config": {}, "train_args": {}, "step": step, "optimizer": {"steps": {}, "param_groups": []},
            "data_rng": {}, "dropout_rng": {}, "losses": {"train": train_loss, "val": 2.0}}
    ck.save(folder / ck.CHECKPOINT_NAME, {"w": w}, meta)
    _metrics(folder, range(1, step + 1))


def _metrics(folder, steps):
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "train_loss": 1.0}) + "\n" for s in steps))


def _audit(folder, ref=None, newest=None):
    report = SoakReport(SoakConfig(steps=6))
    if ref is None:
        audit_kill(folder, newest, report)
    else:
        audit_end(folder, ref, report)
    return report.failures


def test_the_soak_checks_catch_a_lost_checkpoint(tmp_path):
    assert _audit(tmp_path, newest=None) == []  # none written yet: nothing to lose
    assert "the checkpoint of step 4 is lost (left: none)" in _audit(tmp_path, newest=4)[0]
    _checkpoint(tmp_path, 1.0, np.zeros(3), step=2)
    assert "the checkpoint of step 4 is lost (left: step 2)" in _audit(tmp_path, newest=4)[0]
    _checkpoint(tmp_path, 1.0, np.zeros(3), step=4)
    assert _audit(tmp_path, newest=4) == []


def test_the_soak_checks_catch_a_loss_a_tensor_a_temporary_and_a_corrupt_checkpoint(tmp_path):
    w = np.linspace(0.0, 1.0, 6)
    ref = Reference({6: {"train": 1.0, "val": 2.0}}, {6: {"w": w}}, step_s=0.1, tail_s=0.1)
    _checkpoint(tmp_path, 1.0, w)
    assert _audit(tmp_path, ref) == []
    _metrics(tmp_path, [1, 2, 3, 4, 4, 5, 6])  # a step logged twice (a resume that did not truncate)
    assert "metrics.jsonl holds the steps [1, 2, 3, 4, 4, 5, 6], not 1..6 once each" in _audit(tmp_path, ref)[0]
    _checkpoint(tmp_path, 1.0 + 1e-9, w)
    assert "the losses differ from the uninterrupted run's by 1e-09" in _audit(tmp_path, ref)[0]
    _checkpoint(tmp_path, 1.0, w + 1e-9)
    assert "the tensors by 1e-09" in _audit(tmp_path, ref)[0]
    _checkpoint(tmp_path, 1.0, w)
    (tmp_path / f".{ck.CHECKPOINT_NAME}.x1.tmp").write_bytes(b"cut")
    assert _audit(tmp_path, ref) == [f"left in the checkpoint directory: .{ck.CHECKPOINT_NAME}.x1.tmp"]
    (tmp_path / f".{ck.CHECKPOINT_NAME}.x1.tmp").unlink()
    path = tmp_path / ck.CHECKPOINT_NAME
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # a flipped bit in w, the file's only tensor
    path.write_bytes(bytes(data))
    assert "fails its SHA-256 checksum" in _audit(tmp_path, ref)[0]


def test_a_kill_while_train_tests_the_checkpoint_directory_leaves_nothing_in_it(tmp_path):
    """train() proves --ckpt-dir writable with a probe file first: a SIGKILL while the probe
    exists must not leave it behind (it used to stay in the directory for good)."""
    code = """if True:
        import os, signal, sys, tempfile
        import tiletrain.checkpoint as ck
        def dying(make):
            def made(*a, **k):
                make(*a, **k)
                os.kill(os.getpid(), signal.SIGKILL)  # the job is killed while the probe exists
            return made
        for name in ("mkstemp", "NamedTemporaryFile", "TemporaryFile"):
            setattr(tempfile, name, dying(getattr(tempfile, name)))
        ck.check_writable(sys.argv[1])
    """
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ckpt")], capture_output=True, text=True)
    assert res.returncode == -signal.SIGKILL, res.stderr
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == []
