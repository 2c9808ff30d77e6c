"""The fused kernels on the OpenCL worker (PoCL): gemm_bias (a linear layer's first gemm task
with a bias), gemm_gelu (the GELU epilogue), layer_norm_row, rms_norm_row, add_layer_norm_row,
add_rms_norm_row.  Each OpenCL body against the CPU body on the same inputs; their tasks run on
the OpenCL worker when it is preferred (test_fused_kernels_trace.py); a GPT forward + backward with
every kernel on the OpenCL worker, and with dmda mixing both kinds, equals the CPU-only one."""
import itertools

import numpy as np
import pytest

import tiletrain as tt
from tiletrain._ffi import lib
from tiletrain.nn.gpt import GPT, GPTConfig, Tiling
from tiletrain.runtime.hetero import kernel_devices, run_kernel
from tiletrain.runtime.kernels import kernel_id
from tiletrain.testing.device_cases import placed
from tiletrain.testing.references import REFERENCES
from hetero_session import hetero, hetero_options  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("hetero")

FUSED = ["gemm_bias", "gemm_gelu", "layer_norm_row", "rms_norm_row", "add_layer_norm_row", "add_rms_norm_row"]
CODE = {np.float32: lib.TT_F32, np.float64: lib.TT_F64}
TOL = {np.float32: 1e-5, np.float64: 1e-12}


def _cases(name, dtype, rng):
    """The registry's cases; gemm_gelu's with every (first, approx, deriv)."""
    if name != "gemm_gelu":
        for _ in range(4):  # gemm_bias draws its transposes at random
            yield REFERENCES[name].case(rng, dtype)
        return
    for first, approx, deriv in itertools.product((0, 1), repeat=3):
        fields, bufs = REFERENCES[name].case(rng, dtype)
        fields = dict(fields, first=first, approx=approx, deriv=deriv)
        if not first:  # the end of a chain: c holds the partial sums
            bufs[3] = rng.standard_normal(bufs[3].shape).astype(dtype)
        yield fields, bufs


def test_fused_kernels_have_opencl_bodies():
    for name in FUSED:
        assert "opencl" in kernel_devices(name), name


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", FUSED)
def test_opencl_body_equals_cpu_body(name, dtype):
    rng = np.random.default_rng(11)
    for fields, bufs in _cases(name, dtype, rng):
        cpu = [np.ascontiguousarray(b).copy() for b in bufs]
        dev = [b.copy() for b in cpu]
        run_kernel(name, fields, cpu, "cpu", CODE[dtype])
        run_kernel(name, fields, dev, "opencl", CODE[dtype])
        for i, (c, d) in enumerate(zip(cpu, dev)):
            assert not np.isnan(c).any(), f"{name} buffer {i}: the case left NaN (an unwritten output)"
            np.testing.assert_allclose(d, c, rtol=TOL[dtype], atol=TOL[dtype],
                                       err_msg=f"{name} {fields} buffer {i}: OpenCL vs CPU")


def _counts(hetero):
    tt.wait()
    return {n: lib.tt_kernel_ntasks(kernel_id(n)) for n in FUSED}, dict(hetero.executed_tasks())


# width 16 = n_embd: whole rows per tile (layer_norm_row), c_fc one gemm_gelu task per output
# tile; width 8: split rows (the stats kernels), c_fc chains of gemm_bias + gemm_gelu
TILINGS = {"whole-rows": Tiling(batch=2, time=8, width=16, hidden=32, vocab=16),
           "split-rows": Tiling(batch=1, time=8, width=8, hidden=24, vocab=10)}


def _gpt_loss_and_grads(kinds, dtype, tiling):
    cfg = GPTConfig(vocab_size=29, block_size=16, n_layer=2, n_head=2, n_embd=16, dropout=0.0)
    data = np.random.default_rng(5)
    idx, targets = data.integers(0, 29, (2, 16)), data.integers(0, 29, (2, 16))
    with placed(kinds):
        model = GPT(cfg, tiling, dtype=dtype, seed=3)
        # GPT's initial biases are 0 and LayerNorm weights 1: draw them, so that a bias or a
        # weight the device bodies dropped would show
        rng = np.random.default_rng(7)
        model.load_state_dict({k: v + 0.5 * rng.standard_normal(v.shape) for k, v in model.state_dict().items()
                               if k.endswith(".bias") or ".ln_" in k}, strict=False)
        loss = model.loss(idx, targets)
        loss.backward()
        return float(loss), {n: p.grad.numpy() for n, p in model.named_parameters()}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("tiling", list(TILINGS))
def test_gpt_forward_backward_with_opencl_equals_cpu_only(tiling, dtype, hetero):
    ref_loss, ref_grads = _gpt_loss_and_grads("cpu", dtype, TILINGS[tiling])
    tol = dict(rtol=1e-4, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    for kinds in ("opencl", None):  # every kernel on OpenCL; dmda's mix of both kinds
        kernels, ran = _counts(hetero)
        loss, grads = _gpt_loss_and_grads(kinds, dtype, TILINGS[tiling])
        kernels2, ran2 = _counts(hetero)
        if kinds == "opencl":
            assert ran2.get("cpu", 0) == ran.get("cpu", 0), "tasks ran on the CPU worker"
            used = {n for n in FUSED if kernels2[n] > kernels[n]}
            assert {"gemm_bias", "gemm_gelu"} <= used, used
            if tiling == "whole-rows":
                assert "layer_norm_row" in used, used
        np.testing.assert_allclose(loss, ref_loss, **tol, err_msg=f"loss on {kinds or 'dmda'}")
        assert grads.keys() == ref_grads.keys()
        for n in ref_grads:
            np.testing.assert_allclose(grads[n], ref_grads[n], **tol, err_msg=f"grad of {n} on {kinds or 'dmda'}")
