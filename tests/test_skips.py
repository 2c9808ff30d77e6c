"""The skip policy (tests/skips.py) can fail a run: a strict run with a skip that is not
allowed exits non-zero and names it; an allowed skip, or a non-strict run, passes."""
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _pytest(tmp_path, reason: str, strict: bool) -> subprocess.CompletedProcess:
    (tmp_path / "test_one.py").write_text(
        f"import pytest\n\ndef test_ok():\n    pass\n\ndef test_skipped():\n    pytest.skip({reason!r})\n")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "TILETRAIN_STRICT_TESTS")}
    env.update(PYTHONPATH=str(TESTS), **({"TILETRAIN_STRICT_TESTS": "1"} if strict else {}))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "skips", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_one.py")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)


def test_a_strict_run_fails_on_a_skip_that_is_not_allowed(tmp_path):
    r = _pytest(tmp_path, "mpirun or a StarPU-MPI build of tiletrain is missing", strict=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "NOT ALLOWED: test_one.py::test_skipped: mpirun or a StarPU-MPI build" in r.stdout, r.stdout
    assert "this strict run fails" in r.stdout


def test_an_allowed_skip_or_a_plain_run_passes(tmp_path):
    r = _pytest(tmp_path, "cupy is not installed (GPU tests need cupy and an NVIDIA GPU)", strict=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "allowed: test_one.py::test_skipped: cupy is not installed" in r.stdout, r.stdout
    r = _pytest(tmp_path, "no OpenCL worker", strict=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "skipped: 1, of which 1 not in tests/skips.py ALLOWED_SKIPS" in r.stdout, r.stdout


def test_a_module_skipped_at_import_is_listed(tmp_path):
    (tmp_path / "test_two.py").write_text("import pytest\n\npytest.importorskip('no_such_module_here')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "TILETRAIN_STRICT_TESTS")}
    env.update(PYTHONPATH=str(TESTS), TILETRAIN_STRICT_TESTS="1")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "skips", "-p", "no:cacheprovider",
                        "--rootdir", str(tmp_path), str(tmp_path / "test_two.py")],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "NOT ALLOWED: test_two.py: could not import 'no_such_module_here'" in r.stdout, r.stdout
