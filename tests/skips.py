"""The skip policy of the suite (its hooks are imported by tests/conftest.py; `-p skips` loads
them elsewhere): every skipped test is listed at the end with its reason, and a strict run
fails when a test skips for a reason that is not allowed below."""
import os
import re

import pytest

# A strict run (CI sets CI; `TILETRAIN_STRICT_TESTS=1` by hand) fails when any test skips for a
# reason that is not listed here: a missing reference library, MPI, OpenCL or a kernel path
# must fail the run, never hide behind a skip.  Each entry: a pattern of the skip reason, and
# why that skip is legitimate on the machines CI runs on.
STRICT = bool(os.environ.get("CI")) or os.environ.get("TILETRAIN_STRICT_TESTS") == "1"
ALLOWED_SKIPS = {
    # GPU tests: CI machines have no NVIDIA GPU (scripts/gpu_check.sh runs them on one)
    r"cupy is not installed": "cupy needs a CUDA GPU",
    r"built without CUDA|without its CUDA kernels|CUDA reports no GPU|no usable GPU|no CUDA worker|"
    r"this StarPU has CUDA": "GPU",
    # the MKL build is the alternative BLAS, checked by `make setup BLAS=mkl`, not by `make test`
    r"tiletrain is built with MKL|the mkl-devel wheel is not installed": "MKL build",
    # the OpenBLAS core-type comparison needs a CPU that can run more than one core type
    r"no other OpenBLAS core type runs on this CPU": "CPU without AVX2",
}
_skips: list[tuple[str, str]] = []


def _allowed(reason: str) -> str | None:
    return next((why for pattern, why in ALLOWED_SKIPS.items() if re.search(pattern, reason)), None)


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        lr = report.longrepr
        reason = lr[2] if isinstance(lr, tuple) else str(lr)
        _skips.append((report.nodeid, reason.removeprefix("Skipped: ")))


pytest_collectreport = pytest_runtest_logreport  # a whole module skipped at import (importorskip)


def pytest_terminal_summary(terminalreporter):
    """One line per skipped test with its reason, and whether the allow-list above admits it."""
    if not _skips:
        return
    tr = terminalreporter
    tr.section("skipped tests")
    for nodeid, reason in _skips:
        tr.line(f"{'allowed' if _allowed(reason) else 'NOT ALLOWED'}: {nodeid}: {reason}")
    bad = sum(1 for _, reason in _skips if not _allowed(reason))
    tr.line(f"skipped: {len(_skips)}, of which {bad} not in tests/skips.py ALLOWED_SKIPS"
            + (" -- this strict run fails" if bad and STRICT else ""))


def pytest_sessionfinish(session):
    passed = session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
    if STRICT and passed and any(not _allowed(reason) for _, reason in _skips):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
