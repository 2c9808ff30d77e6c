"""Fixtures of the heterogeneous-worker tests (imported by the test modules: a conftest.py
here would shadow tests/conftest.py, which other tests import by name): one CPU worker plus
one OpenCL worker (PoCL on the CPU gives StarPU a second memory node without a GPU), under
dmda.

Modules that use the `hetero` fixture run in such a session and stop it at their end, so
that the next module gets the default runtime back (the root conftest starts it).  Without
an OpenCL device they skip with the reason; on CI (CI set, or TILETRAIN_REQUIRE_OPENCL=1)
they fail instead, since `make test` installs PoCL there."""
import os

import pytest

import tiletrain as tt

HETERO = dict(ncpu=1, nopencl=1, sched="dmda")


def _required() -> bool:
    return bool(os.environ.get("CI")) or os.environ.get("TILETRAIN_REQUIRE_OPENCL") == "1"


@pytest.fixture(scope="module")
def hetero_options():
    """Extra runtime options for a module's session (override in the module)."""
    return {}


@pytest.fixture(scope="module")
def hetero(hetero_options):
    if tt.is_initialized():
        tt.shutdown()
    try:
        rt = tt.init(**HETERO, **hetero_options)
    except RuntimeError as exc:
        msg = f"no OpenCL worker: {exc}"
        if _required():
            pytest.fail(msg)
        pytest.skip(msg)
    yield rt
    tt.shutdown()  # the next module's tests start the default runtime again


@pytest.fixture
def opencl_required() -> bool:
    """True where a missing OpenCL device must fail the tests rather than skip them."""
    return _required()
