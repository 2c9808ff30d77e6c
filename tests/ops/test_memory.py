"""Memory held by StarPU stays flat over repeated forward+backward: activations saved by
the tape are freed by dataflow once backward has used them."""
import gc

import numpy as np

import tiletrain as tt
import tiletrain.functional as F


def test_forward_backward_200_times_memory_is_flat(rng):
    tt.shutdown()
    rt = tt.init(ncpu=2, memory_limit_mb=2048)  # a limit turns on StarPU's memory accounting
    try:
        x = tt.from_numpy(rng.standard_normal((4, 8, 16)), (2, 4, 8))
        w1 = tt.from_numpy(rng.standard_normal((16, 32)) * 0.1, (8, 16)).requires_grad_()
        b1 = tt.from_numpy(np.zeros(32), 16).requires_grad_()
        w2 = tt.from_numpy(rng.standard_normal((32, 16)) * 0.1, (16, 8)).requires_grad_()
        samples = []
        for it in range(200):
            h = F.gelu(F.linear(x, w1, b1), approximate="tanh")
            y = F.linear(h, w2) + x
            loss = tt.sum(y * y, alpha=1.0 / y.size)
            loss.backward()
            float(loss)  # a training loop reads its loss every step...
            del h, y, loss
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
        assert m200["starpu_used_bytes"] <= bound, (m200, step_bytes)
        assert np.isfinite(w1.grad.numpy()).all()
    finally:
        tt.shutdown()
