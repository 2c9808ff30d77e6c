"""Hugging Face GPT-2 compatibility: GPT.from_hf from a model or a state dict (torch tensors or
NumPy arrays), to_hf_state_dict back, config handling and errors.  The model here is the
tests' own plain-PyTorch GPT-2 with HF names, and the real transformers GPT2LMHeadModel
(transformers is in the test extra: that check runs, it does not skip)."""
import types

import numpy as np
import pytest

from tiletrain.nn import GPT, GPTConfig, Tiling

import torch
from torch_gpt2_ref import random_hf_state_dict, torch_model  # noqa: E402

CFG = GPTConfig(vocab_size=23, block_size=16, n_layer=2, n_head=2, n_embd=16)
FINE = Tiling(batch=1, time=4, width=8, hidden=24, vocab=8)


def hf_config(**over):
    """A stand-in for transformers.GPT2Config (the attributes from_hf reads)."""
    base = dict(vocab_size=23, n_positions=16, n_layer=2, n_head=2, n_embd=16, activation_function="gelu_new",
                layer_norm_epsilon=1e-5, n_inner=None, scale_attn_weights=True,
                scale_attn_by_inverse_layer_idx=False, tie_word_embeddings=True, resid_pdrop=0.1)
    return types.SimpleNamespace(**{**base, **over})


class FakeHFModel:
    """What from_hf needs of a GPT2LMHeadModel: .config and .state_dict() (torch tensors)."""

    def __init__(self, ref, config):
        self.ref, self.config = ref, config

    def state_dict(self):
        return self.ref.state_dict()


def _logits(model, idx):
    return model(idx).detach().numpy()


def test_from_hf_model_matches_reference_logits(rng):
    sd = random_hf_state_dict(CFG, rng)
    ref = torch_model(CFG, sd)
    model = GPT.from_hf(FakeHFModel(ref, hf_config()), tiling=FINE, dtype=np.float64)
    assert model.config == CFG  # read from the model's config; dropout 0
    idx = rng.integers(0, 23, (2, 11))
    want = ref(torch.tensor(idx)).detach().numpy()
    np.testing.assert_allclose(_logits(model, idx), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["torch", "numpy", "float32-torch"])
def test_from_hf_state_dict_with_config(rng, kind):
    sd = random_hf_state_dict(CFG, rng)
    ref = torch_model(CFG, sd)
    src = {"torch": ref.state_dict(), "numpy": sd,
           "float32-torch": {k: v.float() for k, v in ref.state_dict().items()}}[kind]
    model = GPT.from_hf(src, config=CFG, tiling=FINE, dtype=np.float64)
    for k, v in model.state_dict().items():
        np.testing.assert_allclose(v, sd[k], rtol=1e-7 if kind.startswith("float32") else 0, err_msg=k)
    # config as a dict or as a GPT2Config-like object works too
    assert GPT.from_hf(sd, config=vars(CFG)).config == CFG
    assert GPT.from_hf(sd, config=hf_config()).config == CFG


def test_from_hf_ignores_attention_buffers_and_accepts_gpt2model_keys(rng):
    sd = random_hf_state_dict(CFG, rng)
    idx = rng.integers(0, 23, (2, 8))
    want = _logits(GPT.from_hf(sd, config=CFG, dtype=np.float64), idx)
    with_buffers = dict(sd)
    for i in range(CFG.n_layer):  # what older transformers versions put in the state dict
        with_buffers[f"transformer.h.{i}.attn.bias"] = np.tril(np.ones((1, 1, 16, 16)))
        with_buffers[f"transformer.h.{i}.attn.masked_bias"] = np.array(-1e4)
    got = _logits(GPT.from_hf(with_buffers, config=CFG, dtype=np.float64), idx)
    np.testing.assert_array_equal(got, want)
    bare = {k[len("transformer."):]: v for k, v in sd.items() if k.startswith("transformer.")}  # GPT2Model
    got = _logits(GPT.from_hf(bare, config=CFG, dtype=np.float64), idx)
    np.testing.assert_array_equal(got, want)


def test_to_hf_state_dict_loads_into_the_reference(rng):
    model = GPT(CFG, FINE, dtype=np.float64, seed=3)
    hf = model.to_hf_state_dict()
    assert hf["lm_head.weight"] is hf["transformer.wte.weight"]
    ref = torch_model(CFG, hf)  # strict load into HF names and layouts
    assert list(hf) == list(ref.state_dict())
    idx = rng.integers(0, 23, (2, 11))
    np.testing.assert_allclose(ref(torch.tensor(idx)).detach().numpy(), _logits(model, idx), rtol=1e-10,
                               atol=1e-12)
    back = GPT.from_hf(hf, config=CFG, tiling=FINE, dtype=np.float64)
    np.testing.assert_array_equal(_logits(back, idx), _logits(model, idx))


def test_from_hf_errors(rng):
    sd = random_hf_state_dict(CFG, rng)
    with pytest.raises(ValueError, match=r"how many heads.*'vocab_size': 23.*'block_size': 16.*'n_layer': 2"):
        GPT.from_hf(sd)
    with pytest.raises(ValueError, match="n_layer: config 3, state dict 2"):
        GPT.from_hf(sd, config=GPTConfig(vocab_size=23, block_size=16, n_layer=3, n_head=2, n_embd=16))
    with pytest.raises(ValueError, match="bias must be True"):
        GPT.from_hf(sd, config=GPTConfig(vocab_size=23, block_size=16, n_layer=2, n_head=2, n_embd=16,
                                         bias=False))
    bad = dict(sd)
    key = "transformer.h.0.attn.c_attn.weight"
    bad[key] = bad[key].T  # torch.nn.Linear's (out, in) layout instead of Conv1D's
    with pytest.raises(ValueError, match=r"c_attn.weight: shape \(48, 16\) in the state dict, \(16, 48\)"):
        GPT.from_hf(bad, config=CFG)
    missing = dict(sd)
    del missing["transformer.ln_f.bias"]
    with pytest.raises(ValueError, match="missing keys: transformer.ln_f.bias"):
        GPT.from_hf(missing, config=CFG)
    ref = torch_model(CFG, sd)
    with pytest.raises(ValueError, match="activation_function='relu'"):
        GPT.from_hf(FakeHFModel(ref, hf_config(activation_function="relu")))
    with pytest.raises(ValueError, match="layer_norm_epsilon"):
        GPT.from_hf(FakeHFModel(ref, hf_config(layer_norm_epsilon=1e-6)))
    with pytest.raises(TypeError, match="GPT2LMHeadModel"):
        GPT.from_hf(42)
    with pytest.raises(TypeError, match="config must be"):
        GPT.from_hf(sd, config=42)


def test_real_transformers_gpt2(rng):
    """Same names, same named_parameters, same logits as GPT2LMHeadModel, both ways
    (transformers comes with the test extra: a missing one fails here, it is not skipped)."""
    import transformers
    hf_cfg = transformers.GPT2Config(vocab_size=23, n_positions=16, n_layer=2, n_head=2, n_embd=16,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(hf_cfg).double().eval()
    model = GPT.from_hf(hf, tiling=FINE, dtype=np.float64)
    assert list(model.state_dict()) == list(hf.state_dict())
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in hf.named_parameters()]
    idx = rng.integers(0, 23, (2, 11))
    want = hf(torch.tensor(idx)).logits.detach().numpy()
    np.testing.assert_allclose(_logits(model, idx), want, rtol=1e-9, atol=1e-12)
    other = GPT(model.config, dtype=np.float64, seed=5)
    hf.load_state_dict({k: torch.tensor(v) for k, v in other.to_hf_state_dict().items()})
    np.testing.assert_allclose(hf(torch.tensor(idx)).logits.detach().numpy(), _logits(other, idx), rtol=1e-9,
                               atol=1e-12)
