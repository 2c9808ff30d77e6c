"""The fused kernels' tasks run on the OpenCL worker (PoCL) when it is preferred, by the task
records (tt.trace, so this module's session profiles; tests/hetero/test_fused_kernels.py
checks their results)."""
import numpy as np
import pytest

import tiletrain as tt
from tiletrain.testing.device_cases import run_case
from test_fused_kernels import FUSED, _counts
from hetero_session import hetero, hetero_options  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("hetero")


@pytest.fixture(scope="module")
def hetero_options():  # noqa: F811
    return {"profile": True}  # task records: which worker ran each task


def test_fused_tasks_run_on_the_opencl_worker(hetero):
    """Under prefer("opencl") the op case with every fused kernel submits them all, the task
    records put each of their tasks on the OpenCL worker, and no task at all runs on the CPU
    worker (a kernel without an OpenCL body would run there)."""
    kernels, ran = _counts(hetero)
    with tt.trace.recording() as rec:
        run_case("fused", np.float32, "opencl")
    kernels2, ran2 = _counts(hetero)
    kind = {w["id"]: w["kind"] for w in rec.trace.workers}
    tasks = rec.trace.tasks
    for n in FUSED:
        where = {kind[int(w)] for w in tasks["worker"][tasks["kernel"] == n]}
        assert where == {"opencl"}, f"{n} tasks ran on {where}"
    for n in FUSED:
        assert kernels2[n] > kernels[n], f"{n}: no task submitted"
    assert ran2.get("cpu", 0) == ran.get("cpu", 0), "tasks ran on the CPU worker"
    assert ran2.get("opencl", 0) > ran.get("opencl", 0)
