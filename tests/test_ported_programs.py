"""PyTorch programs written once as functions of the module (tests/ported_programs.py), run
with `torch` and with `tiletrain` as that module: the same losses (float64, 1e-9), learning
rates and sampled tokens.  Only the import differs."""
import numpy as np
import pytest
import torch

import tiletrain as tt
from tiletrain.testing.ported_programs import mlp_program, nanogpt_init, nanogpt_program


@pytest.fixture
def float64_default():
    """The programs call set_default_dtype(float64); put both libraries back afterwards."""
    yield
    torch.set_default_dtype(torch.float32)
    tt.set_default_dtype(tt.float32)


def test_nanogpt_program_same_losses_and_tokens(float64_default):
    init = nanogpt_init(seed=3)
    data = np.random.default_rng(5).integers(0, 32, 300)
    ours = nanogpt_program(tt, init=init, data=data, steps=4, dtype=tt.float64, top_k=1)
    ref = nanogpt_program(torch, init=init, data=data, steps=4, dtype=torch.float64, top_k=1)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-9, atol=1e-9)
    assert ours[1] == ref[1]  # greedy top-k: the same tokens
    assert ours[2] == ref[2]  # the same state_dict names (the tril buffer is not persistent)
    assert ours[0][0] != ours[0][-1]  # it trained


def test_nanogpt_program_samples_with_top_k(float64_default):
    """top_k=5 sampling with a seeded Generator: reproducible, every token among the 5 most
    likely (the draws are tiletrain's, not torch's stream)."""
    init = nanogpt_init(seed=4)
    a = nanogpt_program(tt, init=init, steps=1, dtype=tt.float64, top_k=5, sample_tokens=8)
    b = nanogpt_program(tt, init=init, steps=1, dtype=tt.float64, top_k=5, sample_tokens=8)
    assert a[1] == b[1] and len(a[1]) == 9 and all(0 <= t < 32 for t in a[1])


def test_nanogpt_program_default_float32():
    """The program as it is usually run (no set_default_dtype): float32, close to torch."""
    init = {k: v.astype(np.float32) for k, v in nanogpt_init(seed=6).items()}
    ours = nanogpt_program(tt, init=init, steps=3)
    ref = nanogpt_program(torch, init=init, steps=3)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-4)
    assert ours[1] == ref[1]


def test_mlp_program_same_losses(float64_default):
    rng = np.random.default_rng(0)
    init = {"fc1.weight": rng.normal(0, 0.3, (32, 10)), "fc1.bias": rng.normal(0, 0.1, 32),
            "fc2.weight": rng.normal(0, 0.3, (4, 32)), "fc2.bias": rng.normal(0, 0.1, 4)}
    x, y = rng.normal(size=(60, 10)), rng.integers(0, 4, 60)
    ours = mlp_program(tt, init=init, x=x, y=y, epochs=3, dtype=tt.float64)
    ref = mlp_program(torch, init=init, x=x, y=y, epochs=3, dtype=torch.float64)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-9, atol=1e-9)
    assert ours[1] == ref[1]  # StepLR's learning rates, bit for bit
    assert abs(ours[2] - ref[2]) < 1e-12


def test_cnn_bn_program_same_losses_and_eval_logits(float64_default):
    """Conv2d + BatchNorm2d + ReLU + MaxPool2d / AvgPool2d + Linear: the training losses,
    the running statistics and the eval-mode logits (running statistics used) as torch's."""
    from tiletrain.testing.ported_programs import cnn_bn_init, cnn_bn_program
    rng = np.random.default_rng(1)
    init, x, y = cnn_bn_init(seed=2), rng.normal(size=(8, 2, 8, 8)), rng.integers(0, 3, 8)
    ours = cnn_bn_program(tt, init=init, x=x, y=y, steps=3, dtype=tt.float64)
    ref = cnn_bn_program(torch, init=init, x=x, y=y, steps=3, dtype=torch.float64)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(ours[1], ref[1], rtol=1e-9, atol=1e-9)
    assert ours[2].keys() == ref[2].keys() and ours[2]["features.1.num_batches_tracked"] == 3
    for k in ref[2]:
        np.testing.assert_allclose(ours[2][k], ref[2][k], rtol=1e-9, atol=1e-12)
    assert ours[0][0] != ours[0][-1]
    # eval differs from train mode: the running statistics, not the batch's, normalised
    assert not np.allclose(ref[2]["features.1.running_var"], 1.0)


@pytest.mark.parametrize("attention", ["sdpa", "masked"])
def test_llama_block_program_same_losses(float64_default, attention):
    """RMSNorm written out, rotary embeddings from cos/sin buffers, causal attention
    (scaled_dot_product_attention(is_causal=True) or a -inf mask buffer + softmax), SwiGLU,
    AdamW: torch's losses."""
    from tiletrain.testing.ported_programs import llama_block_init, llama_block_program
    init, tokens = llama_block_init(seed=2), np.random.default_rng(1).integers(0, 24, (2, 9))
    ours = llama_block_program(tt, init=init, tokens=tokens, steps=3, attention=attention, dtype=tt.float64)
    ref = llama_block_program(torch, init=init, tokens=tokens, steps=3, attention=attention, dtype=torch.float64)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-9, atol=1e-9)
    assert ours[1] == ref[1]  # the cos/sin/mask buffers are not persistent
    assert ours[0][0] > ours[0][-1]  # it trained


def test_cnn_bn_and_llama_programs_default_float32():
    """Both programs as usually run (no set_default_dtype): float32, close to torch."""
    from tiletrain.testing.ported_programs import cnn_bn_init, cnn_bn_program, llama_block_init, llama_block_program
    rng = np.random.default_rng(2)
    f32 = lambda p: {k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in p.items()}  # noqa: E731
    x, y = rng.normal(size=(8, 2, 8, 8)).astype(np.float32), rng.integers(0, 3, 8)
    ours = cnn_bn_program(tt, init=f32(cnn_bn_init(seed=3)), x=x, y=y, steps=2)
    ref = cnn_bn_program(torch, init=f32(cnn_bn_init(seed=3)), x=x, y=y, steps=2)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-4)
    np.testing.assert_allclose(ours[1], ref[1], rtol=1e-3, atol=1e-4)
    tokens = rng.integers(0, 24, (2, 9))
    ours = llama_block_program(tt, init=f32(llama_block_init(seed=3)), tokens=tokens, steps=2)
    ref = llama_block_program(torch, init=f32(llama_block_init(seed=3)), tokens=tokens, steps=2)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-4)


def test_wgan_gp_program_same_losses(float64_default):
    """A gradient penalty (torch.autograd.grad with create_graph=True, then backward through
    the gradient): the same float64 losses as torch to 1e-9."""
    from tiletrain.testing.ported_programs import wgan_gp_program
    rng = np.random.default_rng(11)
    d_in, d_hidden, batch, steps = 3, 8, 6, 4
    init = {"fc1.weight": rng.normal(0, 0.5, (d_hidden, d_in)), "fc1.bias": rng.normal(0, 0.1, d_hidden),
            "fc2.weight": rng.normal(0, 0.5, (d_hidden, d_hidden)), "fc2.bias": rng.normal(0, 0.1, d_hidden),
            "out.weight": rng.normal(0, 0.5, (1, d_hidden)), "out.bias": rng.normal(0, 0.1, 1)}
    real = rng.normal(1.0, 0.5, (steps, batch, d_in))
    fake = rng.normal(-0.5, 1.0, (steps, batch, d_in))
    mix = rng.uniform(size=(steps, batch, 1))
    ours = wgan_gp_program(tt, init=init, real=real, fake=fake, mix=mix, dtype=tt.float64)
    ref = wgan_gp_program(torch, init=init, real=real, fake=fake, mix=mix, dtype=torch.float64)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(ours[1], ref[1], rtol=1e-9, atol=1e-9)
    assert ours[1][0] > 1e-3 and ours[1][0] != ours[1][-1]  # a penalty that trains


def test_resnet_program_same_losses_lrs_and_eval(float64_default):
    """`out += shortcut(x)` residual blocks, parameter groups, Nesterov SGD, cosine schedule,
    deepcopy of the best state dict: torch's numbers."""
    from tiletrain.testing.ported_programs import resnet_program
    rng = np.random.default_rng(3)
    x = rng.normal(size=(16, 1, 8, 8))
    y = (x[:, 0, :4].mean(axis=(1, 2)) > 0).astype(np.int64) + 2 * (x[:, 0, 4:].mean(axis=(1, 2)) > 0)
    ours = resnet_program(tt, x=x, y=y, dtype=tt.float64)
    ref = resnet_program(torch, x=x, y=y, dtype=torch.float64)
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    assert ours[0][0] != ours[0][-1] and ours[2][0] != ours[2][1]


def test_sequence_program_same_losses_lrs_and_logits(float64_default):
    """Embedding, bidirectional LSTM, a Transformer encoder layer with a padding mask, GRU,
    RMSprop and ReduceLROnPlateau: torch's numbers."""
    from tiletrain.testing.ported_programs import sequence_program
    rng = np.random.default_rng(4)
    tokens = rng.integers(1, 9, (4, 6))
    tokens[1, 4:] = 0
    tokens[3, 2:] = 0
    labels = rng.integers(0, 3, 4)
    ours = sequence_program(tt, tokens=tokens, labels=labels, dtype=tt.float64)
    ref = sequence_program(torch, tokens=tokens, labels=labels, dtype=torch.float64)
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    assert ref[1][-1] < ref[1][0]  # the plateau scheduler acted
