"""The examples run end to end (they are the documentation users copy)."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("script", ["train_gpt.py", "finetune_hf_gpt2.py", "train_llama.py"])
def test_example_runs(script, tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "examples" / script)], capture_output=True, text=True,
                       timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "loss" in r.stdout
