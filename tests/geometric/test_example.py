"""examples/train_gcn.py runs, full-graph on the karate club and sampled on a small SBM, and
learns (the accuracy it prints at the end is well above chance)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("args,least", [(["--epochs", "12"], 0.8),
                                        (["--graph", "sbm", "--nodes", "3000", "--sampled", "--epochs", "2",
                                          "--roots", "200"], 0.5)])
def test_train_gcn_example(tmp_path, args, least):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "train_gcn.py"), "--ncpu", "1"] + args,
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("epoch") and float(last.split()[-1]) >= least, out.stdout
