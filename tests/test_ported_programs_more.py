"""More PyTorch programs (tiletrain/testing/ported_programs_more.py) run with `torch` and with
`tiletrain` as the module: a VAE, a Transformer-encoder classifier, a packed-sequence LSTM
tagger, a U-Net with a torch.save/torch.load checkpoint round trip, a physics-informed MLP
with second derivatives and LBFGS, a seeded character LM, an MLP-mixer with masked pooling.
The same losses and outputs in float64 (1e-9)."""
import numpy as np
import pytest
import torch

import tiletrain as tt
from tiletrain.testing import ported_programs_more as P


@pytest.fixture
def float64_default():
    """The programs call set_default_dtype(float64); put both libraries back afterwards."""
    yield
    torch.set_default_dtype(torch.float32)
    tt.set_default_dtype(tt.float32)


def _both(program, dtype=True, **kw):
    ours = program(tt, dtype=tt.float64 if dtype else None, **kw)
    if dtype:
        tt.set_default_dtype(tt.float32)
    ref = program(torch, dtype=torch.float64 if dtype else None, **kw)
    if dtype:
        torch.set_default_dtype(torch.float32)
    return ours, ref


def _close(ours, ref, rtol=1e-9, atol=1e-9):
    assert len(ours) == len(ref)
    for u, v in zip(ours, ref):
        np.testing.assert_allclose(np.asarray(u, float), np.asarray(v, float), rtol=rtol, atol=atol)


def _vae_data(seed=0):
    rng = np.random.default_rng(seed)
    return (rng.random((24, 10)) > 0.5).astype(np.float64), rng.standard_normal((2, 2, 16, 3))


@pytest.mark.parametrize("kl", ["distributions", "closed"])
def test_vae_program(float64_default, kl):
    x, noise = _vae_data()
    ours, ref = _both(P.vae_program, x=x, noise=noise, kl=kl)
    _close(ours, ref)
    assert ref[0][-1] < ref[0][0]


def test_vae_program_default_float32():
    """As usually run (no set_default_dtype): float32 throughout, close to torch."""
    x, noise = _vae_data(1)
    ours, ref = _both(P.vae_program, dtype=False, x=x.astype(np.float32), noise=noise.astype(np.float32))
    _close(ours, ref, rtol=1e-4, atol=1e-5)


def test_transformer_classifier_program(float64_default):
    rng = np.random.default_rng(2)
    tokens = rng.integers(1, 12, (8, 7))
    tokens[0, 5:], tokens[3, 3:], tokens[6, 6:] = 0, 0, 0  # padding, masked out of attention and pooling
    ours, ref = _both(P.transformer_classifier_program, tokens=tokens, labels=rng.integers(0, 3, 8), steps=4)
    _close(ours, ref)
    assert ref[2][0] < ref[2][-1]  # the warm-up raised the learning rate
    assert ref[0][-1] < ref[0][0]


def test_lstm_tagger_program(float64_default):
    rng = np.random.default_rng(3)
    lengths = [5, 3, 6, 3, 2]  # unsorted, with a tie: enforce_sorted=False
    sentences = [rng.integers(1, 9, n) for n in lengths]
    tags = [rng.integers(0, 4, n) for n in lengths]
    ours, ref = _both(P.lstm_tagger_program, sentences=sentences, tags=tags, steps=4)
    _close(ours, ref)
    assert ref[0][-1] < ref[0][0]


def test_unet_program_with_checkpoint_round_trip(float64_default, tmp_path):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 2, 8, 8))
    y = (rng.random((6, 1, 8, 8)) > 0.6).astype(np.float64)
    ours = P.unet_program(tt, x=x, y=y, path=tmp_path / "ours.pt", dtype=tt.float64)
    tt.set_default_dtype(tt.float32)
    ref = P.unet_program(torch, x=x, y=y, path=tmp_path / "ref.pt", dtype=torch.float64)
    _close(ours, ref)
    assert ref[2][-1] < ref[2][0]  # ReduceLROnPlateau lowered the learning rate
    # training on after the reload is training on without it: the momentum buffers and the
    # scheduler's state came back
    whole = P.unet_program(tt, x=x, y=y, path=tmp_path / "whole.pt", epochs=4, resume_epochs=0, dtype=tt.float64)
    np.testing.assert_allclose(whole[0], ours[0] + ours[1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("optimizer,line_search_fn", [("lbfgs", None), ("lbfgs", "strong_wolfe"), ("adam", None)])
def test_pinn_program(float64_default, optimizer, line_search_fn):
    ours, ref = _both(P.pinn_program, optimizer=optimizer, line_search_fn=line_search_fn, steps=4)
    _close(ours, ref)
    assert ref[0][-1] < ref[0][0]


def test_seeded_program_needs_nothing_copied(float64_default):
    """Only manual_seed: default initialisation, random data, shuffling and sampling all give
    torch's numbers, so the losses and the sampled tokens agree with nothing copied across."""
    ours = P.seeded_program(tt, dtype=tt.float64)
    ref = P.seeded_program(torch, dtype=torch.float64)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-9, atol=1e-9)
    assert ours[1] == ref[1]
    assert ours[0][-1] < ours[0][0]


def test_seeded_program_default_float32():
    ours, ref = P.seeded_program(tt, epochs=1), P.seeded_program(torch, epochs=1)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-4)


def test_mixer_program(float64_default):
    """Padding, masked pooling, label smoothing, amsgrad, CosineAnnealingLR and a BytesIO
    checkpoint: the same losses, accuracies, learning rates and probabilities (torch's
    manual_seed: the same initial weights in both)."""
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 20, (48, 12))
    ids[:, -3:] = 0
    ids[5, 4:] = 0
    labels = (ids[:, 0] + ids[:, 1]) % 3
    (losses, accs, lrs, same, probs), ref = _both(P.mixer_program, ids=ids, labels=labels)
    _close([losses, lrs], ref[0:1] + ref[2:3])
    assert accs == ref[1] and same and ref[3]
    np.testing.assert_allclose(probs, ref[4], rtol=1e-12)
    assert ref[0][-1] < ref[0][0]
