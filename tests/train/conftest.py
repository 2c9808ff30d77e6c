import pytest

import tiletrain as tt


@pytest.fixture(autouse=True)
def runtime():
    """train() starts and stops its own runtime: run these tests with none up."""
    tt.shutdown()
    yield None
    tt.shutdown()
