import pytest
from train_helpers import TEXT

import tiletrain as tt


@pytest.fixture(autouse=True)
def runtime():
    """train() starts and stops its own runtime: run these tests with none up."""
    tt.shutdown()
    yield None
    tt.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A text file of repeated Python lines (read only)."""
    f = tmp_path_factory.mktemp("data") / "corpus.txt"
    f.write_text(TEXT)
    return str(f)
