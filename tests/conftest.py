import contextlib
import shutil
from pathlib import Path

import numpy as np
import pytest

import tiletrain as tt
from skips import (pytest_collectreport, pytest_runtest_logreport, pytest_sessionfinish,  # noqa: F401 (hooks)
                   pytest_terminal_summary)

# Tile grids used by every op test: one tile; an even grid; a smaller last tile on every axis.
GRIDS_2D = [
    ((6, 5), (6, 5)),      # one tile
    ((8, 6), (4, 3)),      # even grid
    ((11, 7), (4, 3)),     # smaller last tile along both axes
]
GRIDS_ND = [
    ((7,), (3,)),
    ((5, 4, 6), (5, 4, 6)),
    ((5, 4, 6), (2, 3, 4)),
    ((3, 2, 5, 4), (2, 2, 3, 3)),
]
FLOATS = [np.float32, np.float64]


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


RUNS = Path(__file__).resolve().parents[1] / "runs"  # the checkout's default run directories


@pytest.fixture(autouse=True)
def no_run_litter():
    """A test that trains passes a run or checkpoint directory under tmp_path: one that
    leaves a new runs/<date>-<model> in the checkout fails (and the directory is removed)."""
    before = set(RUNS.iterdir()) if RUNS.is_dir() else set()
    yield
    new = (set(RUNS.iterdir()) if RUNS.is_dir() else set()) - before
    for path in new:
        shutil.rmtree(path, ignore_errors=True)
    if new:
        pytest.fail(f"the test wrote {sorted(p.name for p in new)} under {RUNS}: pass ckpt_dir or run_dir")


@pytest.fixture(scope="session")
def runtime_config():
    return dict(ncpu=2)


@pytest.fixture(autouse=True)
def runtime(runtime_config):
    """One StarPU session for the whole run; tests that stop it get a fresh one.  Its workers
    are put to sleep while nothing is pending (awake, they poll and take the cores from the
    subprocesses that MPI and command-line tests launch); a submission wakes them."""
    if not tt.is_initialized():
        tt.init(**runtime_config)
    rt = tt.current()
    rt.idle()
    yield rt


def total_tasks() -> int:
    """Tile tasks submitted since the runtime started (all kernels)."""
    from tiletrain._ffi import lib
    return sum(lib.tt_kernel_ntasks(k) for k in range(lib.tt_kernel_count()))


@contextlib.contextmanager
def submits_nothing():
    """Fails if the code inside submitted any task (bad input must be rejected first)."""
    tt.wait()
    before = total_tasks()
    yield
    assert total_tasks() == before, "a rejected call submitted tasks"


@pytest.fixture
def nothing_submitted():
    """Fails the test if the code under it submitted any task (bad input must be rejected first)."""
    with submits_nothing():
        yield


@pytest.fixture
def rng():
    return np.random.default_rng(1234)

