"""Memory held by StarPU stays flat over repeated forward+backward: activations saved by
the tape are freed by dataflow once backward has used them."""
import gc

import numpy as np

import tiletrain as tt
from tiletrain.testing.device_cases import block_lm_loss


def test_forward_backward_200_times_memory_is_flat(rng):
    tt.shutdown()
    rt = tt.init(ncpu=2, memory_limit_mb=2048)  # a limit turns on StarPU's memory accounting
    try:
        # a small transformer block with an LM loss: embedding, layer norm, attention,
        # MLP, cross-entropy
        B, T, C, V, H = 2, 8, 16, 11, 2
        ids = tt.from_numpy(rng.integers(0, V, (B, T)), (1, 4))
        targets = tt.from_numpy(rng.integers(0, V, (B, T)), (1, 4))
        wte = tt.from_numpy(rng.standard_normal((V, C)) * 0.1, (V, 8)).requires_grad_()
        ln_w = tt.from_numpy(np.ones(C), 8).requires_grad_()
        ln_b = tt.from_numpy(np.zeros(C), 8).requires_grad_()
        w_qkv = tt.from_numpy(rng.standard_normal((C, 3 * C)) * 0.1, (8, 8)).requires_grad_()
        w1 = tt.from_numpy(rng.standard_normal((C, 32)) * 0.1, (8, 16)).requires_grad_()
        b1 = tt.from_numpy(np.zeros(32), 16).requires_grad_()
        w2 = tt.from_numpy(rng.standard_normal((32, C)) * 0.1, (16, 8)).requires_grad_()
        samples = []
        for it in range(200):
            loss = block_lm_loss(ids, targets, wte, ln_w, ln_b, w_qkv, w1, b1, w2, n_head=H)
            loss.backward()
            float(loss)  # a training loop reads its loss every step...
            del loss
            tt.wait()    # ...and its optimizer step waits for the gradients
            if it in (98, 99, 199):
                gc.collect()
                tt.wait()
                samples.append(rt.memory())
        m99, m100, m200 = samples
        step_bytes = m100["created_tensor_bytes"] - m99["created_tensor_bytes"]  # all tiles one step creates
        assert step_bytes > 0 and m100["live_tensor_bytes"] > 0
        # Every tile a step registers is unregistered again: live bytes exactly flat.
        assert m200["live_tensor_bytes"] == m100["live_tensor_bytes"], (m100, m200)
        # StarPU's total also counts its cache of freed buffers, which it reuses; it can
        # never need more than the live tensors plus everything one step creates.  A leak of
        # a single tile per step would pass that bound well before step 200.
        bound = m200["live_tensor_bytes"] + step_bytes
        assert m200["starpu_used_bytes"] - m200["tile_structures_bytes"] <= bound, (m200, step_bytes)
        # StarPU's structures for the registered tiles (counted in its used bytes under a limit):
        # flat too, so no handle leaks either
        assert 0 < m200["tile_structures_bytes"] == m100["tile_structures_bytes"], (m100, m200)
        assert np.isfinite(w1.grad.numpy()).all() and np.isfinite(wte.grad.numpy()).all()
    finally:
        tt.shutdown()
