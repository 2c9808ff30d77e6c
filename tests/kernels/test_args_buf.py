"""Every kernel's argument struct fits tt_args_buf (an expander's room for any kernel's
arguments, csrc/tt_internal.h): the generated codelets assert it at compile time, so a kernel
whose struct outgrows the buffer does not build (no run-time check in the expanders)."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"


def _starpu_env() -> dict:
    """pkg-config's environment for the StarPU this checkout builds against (build/starpu.env,
    written by `make setup`: its own build's prefix), else the system's."""
    env = dict(os.environ)
    record = ROOT / "build" / "starpu.env"
    prefix = dict(line.split("=", 1) for line in record.read_text().splitlines()
                  if "=" in line and not line.startswith("#")).get("STARPU_PREFIX") if record.exists() else None
    if prefix:
        env["PKG_CONFIG_PATH"] = os.pathsep.join(p for p in (f"{prefix}/lib/pkgconfig", env.get("PKG_CONFIG_PATH")) if p)
    return env


def _compile(gen: Path, inc: Path) -> subprocess.CompletedProcess:
    flags = subprocess.run(["pkg-config", "--cflags", "starpu-1.3"], capture_output=True, text=True,
                           check=True, env=_starpu_env()).stdout.split()
    return subprocess.run([shutil.which("cc") or "gcc", "-std=gnu11", "-fsyntax-only", f"-I{inc}", f"-I{CSRC}",
                           f"-I{CSRC / 'include'}", f"-I{gen}", *flags, str(gen / "tt_kernels_gen.c")],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")) or not shutil.which("pkg-config"),
                    reason="needs a C compiler and pkg-config")
def test_an_argument_struct_larger_than_tt_args_buf_does_not_compile(tmp_path):
    gen, small, real = tmp_path / "gen", tmp_path / "small", tmp_path / "real"
    for d in (gen, small, real):
        d.mkdir()
    subprocess.run([sys.executable, str(CSRC / "gen_kernels.py"), str(CSRC / "kernels.def"), str(gen)], check=True,
                   capture_output=True, text=True)
    header = (CSRC / "tt_internal.h").read_text()
    (real / "tt_internal.h").write_text(header)
    ok = _compile(gen, real)
    assert ok.returncode == 0, ok.stderr[-2000:]
    # the same header with room for one int64 (every struct has at least dtype and one more field)
    shrunk, n = re.subn(r"int64_t i\[\d+\];\s*double d\[\d+\];", "int64_t i[1]; double d[1];", header)
    assert n == 1, "tt_args_buf's layout changed: update this test"
    (small / "tt_internal.h").write_text(shrunk)
    bad = _compile(gen, small)
    assert bad.returncode != 0
    assert re.search(r"tt_args_\w+ is larger than tt_args_buf \(csrc/tt_internal.h\)", bad.stderr), bad.stderr[-2000:]
