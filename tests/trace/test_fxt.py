"""StarPU's FxT trace (tiletrain's own StarPU is built --with-fxt): off unless asked for;
`tiletrain trace run --fxt DIR` records one GPT training step both ways and `tiletrain trace
fxt DIR` converts StarPU's (starpu_fxt_tool, found through the run path) and finds the same
tasks, kernel by kernel, as tiletrain's own trace; TILETRAIN_FXT=1 traces a whole session."""
import os
import subprocess
import sys

import pytest

from tiletrain.runtime.hetero import build_option

pytestmark = pytest.mark.skipif(build_option("starpu_fxt") != "yes",
                                reason="this StarPU was built without FxT (STARPU=system: Debian's)")

GPT = ["--workload", "gpt", "--tile", "64", "--warmup", "0", "--ncpu", "2", "--param", "n_layer=1",
       "--param", "n_embd=64", "--param", "n_head=2", "--param", "T=32", "--param", "B=2", "--param", "vocab=64"]


def run(args, cwd, env=None, **kw):
    env = {**{k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}, **(env or {})}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=180,
                          **kw)


def test_one_step_traced_both_ways_has_the_same_tasks(tmp_path):
    d = tmp_path / "fxt"
    r = run(["-m", "tiletrain", "trace", "run", *GPT, "--fxt", str(d), "-o", str(tmp_path / "t.json")], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert [f.name for f in d.iterdir() if f.name.startswith("prof_file_")], list(d.iterdir())
    r = run(["-m", "tiletrain", "trace", "fxt", str(d)], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "task counts equal" in r.stdout and "gemm" in r.stdout, r.stdout
    assert (d / "paje.trace").stat().st_size > 0 and (d / "tasks.rec").exists()


def test_fxt_is_off_by_default_and_on_with_the_environment(tmp_path):
    code = ("import tiletrain as tt\n"
            "tt.init(ncpu=1)\n"
            "(tt.from_numpy(__import__('numpy').ones((4, 4)), 2) * 2.0).numpy()\n"
            "tt.shutdown()\n")
    user = f"ttfxt{os.getpid()}"
    off = run(["-c", code], tmp_path, {"USER": user, "TILETRAIN_FXT_DIR": str(tmp_path / "d")})
    assert off.returncode == 0, off.stderr
    assert not (tmp_path / "d").exists() and not os.path.exists(f"/tmp/prof_file_{user}_0")
    on = run(["-c", code], tmp_path, {"USER": user, "TILETRAIN_FXT": "1", "TILETRAIN_FXT_DIR": str(tmp_path / "d")})
    assert on.returncode == 0, on.stderr
    assert (tmp_path / "d" / f"prof_file_{user}_0").stat().st_size > 0
