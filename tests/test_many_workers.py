"""More CPU workers than cores: tiletrain's own StarPU allows 256 CPU workers per process
(Debian's 4), and ncpu=16 on a 2-core machine (oversubscribed 8x) gives the losses of
2 workers, for the GPT training step (default policy and prio) and for pipeline schedules
(tests/pipeline/test_model_schedules.py's model and data; there every schedule gives the
plain step's losses at 2 workers).  Asking for more workers than the build allows is a clear
error that names the maximum."""
import numpy as np
import pytest

import tiletrain as tt
from tiletrain.runtime.hetero import build_option, max_cpu_workers

from pipeline.test_model_schedules import gpt, train  # the same tiny float64 GPT, M=4 micro-batches
from profiled_runtime import default_runtime_afterwards, restart  # noqa: F401 (fixture)

MANY = [16]  # (8 was measured too: the same losses; one oversubscribed count keeps the suite short)
SCHEDULES = ["1f1b", "interleaved-1f1b", "zb-v"]

needs_many = pytest.mark.skipif(
    max_cpu_workers() < max(MANY),
    reason=f"this StarPU build allows at most {max_cpu_workers()} CPU workers per process "
           f"(StarPU {build_option('starpu_source')})")


@pytest.fixture(scope="module")
def two_workers():
    restart(ncpu=2, sched="prio", profile=False)
    return train(gpt)


@needs_many
@pytest.mark.parametrize("ncpu", MANY)
def test_gpt_step_and_schedules_on_more_workers_than_cores(two_workers, ncpu):
    for sched in (None, "prio"):
        rt = restart(ncpu=ncpu, sched=sched, profile=False)
        assert sum(w.kind == "cpu" for w in rt.workers()) == ncpu
        np.testing.assert_allclose(train(gpt), two_workers, rtol=0, atol=1e-9, err_msg=f"{ncpu} workers, {sched}")
    for name in SCHEDULES:  # 2 schedule ranks: two groups of ncpu / 2 workers
        np.testing.assert_allclose(train(gpt, name, "deps"), two_workers, rtol=0, atol=1e-9,
                                   err_msg=f"{name} on {ncpu} workers")


def test_more_cpu_workers_than_the_build_allows_is_a_clear_error(monkeypatch):
    n = max_cpu_workers() + 1
    if tt.is_initialized():
        tt.shutdown()
    msg = rf"ncpu={n}: this StarPU build allows at most {max_cpu_workers()} CPU workers per process"
    with pytest.raises(ValueError, match=msg):
        tt.init(ncpu=n)
    monkeypatch.setenv("STARPU_NCPU", str(n))
    with pytest.raises(ValueError, match=msg):
        tt.init()
    assert not tt.is_initialized()
