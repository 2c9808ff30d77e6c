"""The examples run end to end (they are the documentation users copy)."""
import pathlib

import pytest

import preloaded

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("script", ["train_gpt.py", "finetune_hf_gpt2.py", "train_llama.py"])
def test_example_runs(script, tmp_path):
    r = preloaded.run([ROOT / "examples" / script], cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "loss" in r.stdout
