"""Training steps with the OpenCL worker give the CPU-only losses and parameters
(float32): a two-layer MLP (linear + gelu + linear, sum loss, AdamW) and a small GPT
block (embedding, layer norm, causal attention, MLP, tied LM head, cross-entropy, gradient
clipping, AdamW); tiletrain/testing/device_cases.py."""
import numpy as np
import pytest

from tiletrain.testing.device_cases import TRAINING
from hetero_session import hetero, hetero_options  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("hetero")


@pytest.mark.parametrize("model", list(TRAINING))
def test_training_step_with_opencl_equals_cpu_only(model, hetero):
    steps = TRAINING[model]
    ref_losses, ref_params = steps("cpu")
    before = hetero.executed_tasks().get("opencl", 0)
    for kinds in ("opencl", None):  # every kernel on OpenCL; dmda's mix of both kinds
        ran = hetero.executed_tasks()
        losses, params = steps(kinds)
        ran = {k: n - ran.get(k, 0) for k, n in hetero.executed_tasks().items()}
        if kinds is None:  # the mixed pass did mix: tasks ran on both worker kinds
            assert ran.get("cpu", 0) > 0 and ran.get("opencl", 0) > 0, f"dmda ran {ran}"
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, err_msg=f"losses on {kinds or 'dmda'}")
        for i, (p, r) in enumerate(zip(params, ref_params)):
            np.testing.assert_allclose(p, r, rtol=1e-5, atol=1e-6, err_msg=f"parameter {i} on {kinds or 'dmda'}")
    assert hetero.executed_tasks().get("opencl", 0) > before
    assert ref_losses[-1] < ref_losses[0]  # it trains
