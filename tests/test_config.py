"""tiletrain/config.py is the one place that reads TILETRAIN_* environment variables: nothing
else in the package -- Python or the C library -- reads one (the C side gets them in tt_config
at init).  The test greps the sources; ALLOWED lists the reads that must stay elsewhere, each
with its reason."""
import re
from pathlib import Path

import pytest

import tiletrain as tt
from tiletrain.config import _ENV, RuntimeConfig

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "tiletrain" / "config.py"

# (path relative to the repository, variable) -> why it cannot go through tiletrain/config.py
SIM_WRAPPERS = ("the simulation flavour's link-time wrappers of StarPU calls (__wrap_starpu_*) run inside StarPU, "
                "where no tt_config reaches; config.simulation_env / tiletrain.sim.run set the variable for the "
                "simulated process")
ALLOWED: dict[tuple[str, str], str] = {
    ("csrc/sim/sim_threads.c", "TILETRAIN_SIM_STATS_FILE"): SIM_WRAPPERS,
    ("csrc/sim/sim_threads.c", "TILETRAIN_SIM_SUBMIT_US"): SIM_WRAPPERS,
}

# A read of a TILETRAIN_ variable: os.environ[...] / .get / .pop / .setdefault, os.getenv,
# `"TILETRAIN_X" in os.environ`, and C's getenv / secure_getenv.
PY_READ = re.compile(r"""(?:os\.environ(?:\.(?:get|pop|setdefault))?\s*[\[(]\s*|os\.getenv\(\s*)f?["'](TILETRAIN_\w+)"""
                     r"""|["'](TILETRAIN_\w+)["']\s+(?:not\s+)?in\s+os\.environ""")
C_READ = re.compile(r"""\b(?:secure_)?getenv\s*\(\s*"(TILETRAIN_\w+)""")
# Any environment read at all with a name built at run time (it could hide a TILETRAIN_ read),
# and those allowed: file -> (the line, why).
PY_DYNAMIC = re.compile(r"""os\.(?:environ\.get|getenv)\(\s*(?!["'])""")
DYNAMIC_ALLOWED = {
    "tiletrain/runtime/__init__.py": ("saved = {k: os.environ.get(k) for k in values}",
                                      "_environment saves, sets and restores the STARPU_* variables that "
                                      "RuntimeConfig.starpu_env() resolved, around starpu_init"),
}


def reads(root: Path = ROOT) -> dict[tuple[str, str], list[int]]:
    """{(file, variable): [line numbers]} of TILETRAIN_* reads in tiletrain/ and csrc/."""
    found: dict[tuple[str, str], list[int]] = {}
    files = [(p, PY_READ) for p in (root / "tiletrain").rglob("*.py")]
    files += [(p, C_READ) for ext in ("*.c", "*.h", "*.cu") for p in (root / "csrc").rglob(ext)]
    for path, pattern in files:
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for m in pattern.finditer(line):
                name = next(g for g in m.groups() if g)
                found.setdefault((str(path.relative_to(root)), name), []).append(n)
    return found


def test_only_config_reads_tiletrain_variables():
    outside = {k: v for k, v in reads().items() if k[0] != "tiletrain/config.py" and k not in ALLOWED}
    assert not outside, ("TILETRAIN_* variables read outside tiletrain/config.py (add a RuntimeConfig field or a "
                         "function in config.py and pass the value on; C gets it in tt_config at init):\n"
                         + "\n".join(f"  {f}:{','.join(map(str, ls))}: {name}" for (f, name), ls in sorted(outside.items())))


def test_the_allow_list_is_still_needed():
    found = reads()
    stale = [k for k in ALLOWED if k not in found]
    assert not stale, f"ALLOWED entries with no read left (remove them): {stale}"


def test_no_environment_read_with_a_computed_name_outside_config():
    bad = []
    for path in (ROOT / "tiletrain").rglob("*.py"):
        if path == CONFIG:
            continue
        rel = str(path.relative_to(ROOT))
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if PY_DYNAMIC.search(line) and DYNAMIC_ALLOWED.get(rel, ("",))[0] != line.strip():
                bad.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bad, "environment reads with a computed name outside tiletrain/config.py:\n" + "\n".join(bad)


def test_the_grep_finds_reads(tmp_path):
    """The patterns catch each way of reading (synthetic files), and not a mere mention."""
    (tmp_path / "tiletrain").mkdir()
    (tmp_path / "csrc" / "sched").mkdir(parents=True)
    (tmp_path / "tiletrain" / "a.py").write_text(
        'import os\nx = os.environ.get("TILETRAIN_A")\ny = os.environ["TILETRAIN_B"]\nz = os.getenv("TILETRAIN_C")\n'
        'w = "TILETRAIN_D" in os.environ\n"see TILETRAIN_E"\n')
    (tmp_path / "csrc" / "sched" / "b.c").write_text('const char *v = getenv("TILETRAIN_F"); /* TILETRAIN_G */\n')
    got = {name for _, name in reads(tmp_path)}
    assert got == {"TILETRAIN_A", "TILETRAIN_B", "TILETRAIN_C", "TILETRAIN_D", "TILETRAIN_F"}


def test_every_variable_is_documented():
    """Each variable config.py reads is in docs/configuration.md."""
    text = CONFIG.read_text()
    names = set(re.findall(r"TILETRAIN_[A-Z_]+", text)) - {"TILETRAIN_POLICIES"}
    doc = (ROOT / "docs" / "configuration.md").read_text()
    missing = sorted(n for n in names if n not in doc)
    assert not missing, f"docs/configuration.md does not mention: {missing}"


def test_settings_reach_the_c_library(monkeypatch):
    """What config.py resolves is what the C side runs with (tt_config): the reuse cap and the
    switch (handles and buffers kept; none under a memory limit)."""
    from tiletrain._ffi import check, ffi, lib
    stats = ffi.new("tt_reuse_stats *")
    tt.shutdown()
    monkeypatch.setenv("TILETRAIN_REUSE_MB", "3")
    with tt.init(ncpu=1):
        check(lib.tt_reuse_get_stats(stats))
        assert (stats.cap_bytes, stats.handles) == (3 << 20, 1)
    with tt.init(ncpu=1, reuse_mb=5, mem_limit="64M"):
        check(lib.tt_reuse_get_stats(stats))
        assert (stats.cap_bytes, stats.handles, stats.buffers) == (5 << 20, 0, 0)


@pytest.mark.parametrize("name, value, message", [
    ("TILETRAIN_REUSE_MB", "lots", "TILETRAIN_REUSE_MB='lots' is not an integer"),
    ("TILETRAIN_REUSE_MB", "-1", "reuse_mb must be >= 0"),
    ("TILETRAIN_ASYNC_FREE", "maybe", "TILETRAIN_ASYNC_FREE='maybe' is not a boolean"),
    ("TILETRAIN_MPI_EXIT_GRACE", "0", "mpi_exit_grace must be > 0"),
    ("TILETRAIN_MPI_EXIT_GRACE", "soon", "TILETRAIN_MPI_EXIT_GRACE='soon' is not a number"),
    ("TILETRAIN_CP_IDLE_SLEEP_US", "-5", "cp_idle_sleep_us must be >= 0"),
])
def test_bad_values_are_refused(monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=re.escape(message)):
        RuntimeConfig.resolve()


def test_environment_and_arguments():
    env = {"TILETRAIN_REUSE_MB": "64", "TILETRAIN_ASYNC_FREE": "0", "TILETRAIN_TASKS_AHEAD": "500",
           "TILETRAIN_MPI_EXIT_GRACE": "2.5", "TILETRAIN_CP_YIELD": "0", "TILETRAIN_CP_IDLE_SLEEP_US": "0"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        cfg = RuntimeConfig.resolve()
        assert (cfg.reuse_mb, cfg.async_free, cfg.tasks_ahead, cfg.mpi_exit_grace, cfg.cp_yield,
                cfg.cp_idle_sleep_us) == (64, False, 500, 2.5, False, 0)
        assert RuntimeConfig.resolve(reuse_mb=8).reuse_mb == 8  # an argument wins
    cfg = RuntimeConfig.resolve()
    assert (cfg.reuse_mb, cfg.async_free, cfg.tasks_ahead, cfg.mpi_exit_grace, cfg.cp_yield,
            cfg.cp_idle_sleep_us) == (1024, True, 0, 1.0, True, 1000)
