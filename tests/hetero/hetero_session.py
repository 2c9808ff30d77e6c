"""Fixtures of the heterogeneous-worker tests (imported by the test modules: a conftest.py
here would shadow tests/conftest.py, which other tests import by name): one CPU worker plus
one OpenCL worker (PoCL on the CPU gives StarPU a second memory node without a GPU), under
dmda.

Modules that use the `hetero` fixture run in such a session and stop it at their end, so
that the next module gets the default runtime back (the root conftest starts it).  Without
an OpenCL device they skip with the reason -- a skip that a strict run (CI) does not allow
(tests/skips.py ALLOWED_SKIPS), since `make test` installs PoCL."""
import pytest

import tiletrain as tt

HETERO = dict(ncpu=1, nopencl=1, sched="dmda")


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
        pytest.skip(f"no OpenCL worker: {exc}")
    yield rt
    tt.shutdown()  # the next module's tests start the default runtime again

