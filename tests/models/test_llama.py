"""tiletrain's Llama against transformers' LlamaForCausalLM with the same weights (HF names
and layouts both ways): logits, loss and every named gradient, 5 AdamW steps, tied and
untied embeddings, grouped-query attention (2 kv heads for 4 query heads), T = 11 (not a
multiple of any time tile), several tilings with smaller last tiles, float64 and float32;
config.json in and out; bad input.

transformers computes RMSNorm and the rotary cos/sin tables in float32 whatever the model's
dtype; for the float64 comparisons its two functions are patched to compute in the model's
dtype (cos/sin of the same float32 angles), which is what tiletrain does."""
import numpy as np
import pytest

from tiletrain.nn import Llama, LlamaConfig, Tiling
from tiletrain.optim import AdamW

import torch
import transformers
from transformers.models.llama import modeling_llama

CFG = dict(vocab_size=37, hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, max_position_embeddings=32, rope_theta=500.0, rms_norm_eps=1e-5)
TILINGS = {
    "one-tile": Tiling(batch=2, time=16, width=24, hidden=40, vocab=64),
    # T=11 in time tiles of 4 (4, 4, 3); width 24 in 2 tiles of 2 heads (1 kv head each);
    # hidden 40 in tiles of 16 (16, 16, 8); vocab 37 in tiles of 16 (16, 16, 5)
    "fine": Tiling(batch=1, time=4, width=12, hidden=16, vocab=16),
    # one query head per tile (half a kv group): 4 query tiles read 2 kv tiles
    "head": Tiling(batch=2, time=5, width=6, hidden=24, vocab=10),
}
TOL = {np.float64: 1e-9, np.float32: 1e-4}
B, T = 3, 11


def rel_err(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


@pytest.fixture
def hf_in_model_dtype(monkeypatch):
    """transformers' RMSNorm and rotary tables in the model's dtype instead of float32."""
    def rms(self, x):
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x

    def rotary(self, x, position_ids):
        freqs = position_ids[..., None].float() * self.inv_freq.float()  # float32 angles, as transformers
        emb = torch.cat((freqs, freqs), dim=-1).to(x.dtype)
        return emb.cos(), emb.sin()

    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", rms)
    monkeypatch.setattr(modeling_llama.LlamaRotaryEmbedding, "forward", rotary)


def _models(dtype, tiling, tied, seed=0):
    model = Llama(LlamaConfig(**CFG, tie_word_embeddings=tied), TILINGS[tiling], dtype=dtype, seed=seed)
    hf_cfg = transformers.LlamaConfig(**model.hf_config())
    ref = transformers.LlamaForCausalLM(hf_cfg).to(torch.float64 if dtype == np.float64 else torch.float32)
    ref.config._attn_implementation = "sdpa"  # eager's softmax is float32 whatever the dtype
    missing, unexpected = ref.load_state_dict({k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()},
                                              strict=False)
    assert not unexpected and set(missing) <= ({"lm_head.weight"} if tied else set())
    if tied:
        assert ref.lm_head.weight.data_ptr() == ref.model.embed_tokens.weight.data_ptr()
    return model, ref


def _batch(rng):
    return rng.integers(0, CFG["vocab_size"], (B, T)), rng.integers(0, CFG["vocab_size"], (B, T))


def _ref_loss(ref, idx, targets):
    logits = ref(torch.tensor(idx)).logits
    return logits, torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                     torch.tensor(targets).reshape(-1))


@pytest.mark.parametrize("dtype,tiling,tied", [(np.float64, "one-tile", False), (np.float64, "fine", True),
                                               (np.float64, "head", False), (np.float32, "fine", False)])
def test_logits_loss_and_every_gradient_match_transformers(rng, hf_in_model_dtype, dtype, tiling, tied):
    model, ref = _models(dtype, tiling, tied)
    idx, targets = _batch(rng)
    tol = TOL[dtype]
    logits = model(idx)
    loss = model.loss(idx, targets)
    loss.backward()
    ref_logits, ref_loss = _ref_loss(ref, idx, targets)
    ref_loss.backward()

    assert logits.shape == (B, T, CFG["vocab_size"])
    assert rel_err(logits.detach().numpy(), ref_logits.detach().numpy()) < tol
    assert abs(float(loss) - ref_loss.item()) / abs(ref_loss.item()) < tol
    names = [n for n, _ in model.named_parameters()]
    assert names == [n for n, _ in ref.named_parameters()]  # HF names, HF order (embedding once if tied)
    ref_grads = {n: p.grad.numpy() for n, p in ref.named_parameters()}
    for name, p in model.named_parameters():
        err = rel_err(p.grad.numpy(), ref_grads[name])
        assert err < tol, f"{name}: relative error {err:.2e}"


def test_float32_matches_unpatched_transformers(rng):
    """float32 against transformers as it is (float32 RMSNorm and rotary tables)."""
    model, ref = _models(np.float32, "head", True)
    idx, _ = _batch(rng)
    assert rel_err(model(idx).detach().numpy(), ref(torch.tensor(idx)).logits.detach().numpy()) < 1e-4


@pytest.mark.parametrize("dtype,tiling,tied", [(np.float64, "fine", False), (np.float32, "one-tile", True)])
def test_five_adamw_steps_match_torch(rng, hf_in_model_dtype, dtype, tiling, tied):
    model, ref = _models(dtype, tiling, tied)
    hyper = dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    opt, ref_opt = AdamW(model.parameters(), **hyper), torch.optim.AdamW(ref.parameters(), **hyper)
    losses, ref_losses = [], []
    idx, targets = _batch(rng)  # one batch, so that the loss must fall
    for _ in range(5):
        opt.zero_grad()
        loss = model.loss(idx, targets)
        loss.backward()
        opt.step()
        losses.append(float(loss))
        ref_opt.zero_grad()
        ref_loss = _ref_loss(ref, idx, targets)[1]
        ref_loss.backward()
        ref_opt.step()
        ref_losses.append(ref_loss.item())
    tol = TOL[dtype]
    assert rel_err(losses, ref_losses) < tol
    assert losses[-1] < losses[0]
    ref_sd = ref.state_dict()
    for name, a in model.state_dict().items():
        err = rel_err(a, ref_sd[name].numpy())
        assert err < tol, f"{name} after 5 steps: relative error {err:.2e}"


def test_state_dict_names_and_tied_head():
    untied = Llama(LlamaConfig(**CFG), TILINGS["fine"], dtype=np.float64).state_dict()
    tied = Llama(LlamaConfig(**CFG, tie_word_embeddings=True), TILINGS["fine"], dtype=np.float64).state_dict()
    assert "lm_head.weight" in untied and "lm_head.weight" not in tied
    assert set(untied) - set(tied) == {"lm_head.weight"}
    C, D = CFG["hidden_size"], CFG["hidden_size"] // CFG["num_attention_heads"]
    assert untied["model.layers.1.self_attn.k_proj.weight"].shape == (CFG["num_key_value_heads"] * D, C)
    assert untied["model.layers.0.mlp.gate_proj.weight"].shape == (CFG["intermediate_size"], C)
    assert untied["model.norm.weight"].shape == (C,)


def test_load_state_dict_round_trip_and_eval_logits_independent_of_tiling(rng):
    src = Llama(LlamaConfig(**CFG), TILINGS["one-tile"], dtype=np.float64, seed=1)
    sd = src.state_dict()
    idx, _ = _batch(rng)
    want = src(idx).detach().numpy()
    for tiling in ("fine", "head"):
        m = Llama(LlamaConfig(**CFG), TILINGS[tiling], dtype=np.float64, seed=2)
        m.load_state_dict(sd)
        assert rel_err(m(idx).detach().numpy(), want) < 1e-12


def test_hf_config_round_trip():
    model = Llama(LlamaConfig(**CFG, tie_word_embeddings=True), TILINGS["fine"], dtype=np.float64)
    d = model.hf_config()
    assert d["model_type"] == "llama" and d["architectures"] == ["LlamaForCausalLM"]
    hf = transformers.LlamaConfig(**d)
    assert hf.num_key_value_heads == 2 and hf.tie_word_embeddings and hf.head_dim == 6
    assert Llama.config_from_hf(hf.to_dict()) == model.config
    assert Llama.config_from_hf(d) == model.config


@pytest.mark.parametrize("key,value", [("hidden_act", "gelu"), ("rope_scaling", {"type": "linear", "factor": 2.0}),
                                       ("attention_bias", True), ("mlp_bias", True), ("head_dim", 8),
                                       ("rope_parameters", {"rope_type": "linear", "factor": 2.0})])
def test_config_from_hf_refuses_unsupported_values(key, value):
    d = dict(CFG, model_type="llama", **{key: value})
    with pytest.raises(ValueError, match=key):
        Llama.config_from_hf(d)


def test_bad_input_is_refused(nothing_submitted):
    with pytest.raises(ValueError, match="num_key_value_heads=3 must divide num_attention_heads=4"):
        LlamaConfig(**dict(CFG, num_key_value_heads=3))
    with pytest.raises(ValueError, match="num_attention_heads=5 must divide hidden_size=24"):
        LlamaConfig(**dict(CFG, num_attention_heads=5, num_key_value_heads=5))
    with pytest.raises(ValueError, match="Tiling.width=18"):
        Llama(LlamaConfig(**CFG), Tiling(width=18))


def test_bad_state_dict_and_ids_are_refused(rng):
    model = Llama(LlamaConfig(**CFG), TILINGS["fine"], dtype=np.float64)
    sd = model.state_dict()
    bad = dict(sd, **{"model.layers.0.self_attn.k_proj.weight": np.zeros((24, 24))})
    with pytest.raises(ValueError, match=r"k_proj.weight: shape \(24, 24\) in the state dict, \(12, 24\)"):
        model.load_state_dict(bad)
    with pytest.raises(ValueError, match="missing keys: lm_head.weight"):
        model.load_state_dict({k: v for k, v in sd.items() if k != "lm_head.weight"})
    with pytest.raises(ValueError, match="unexpected keys: model.rotary_emb.inv_freq"):
        model.load_state_dict(dict(sd, **{"model.rotary_emb.inv_freq": np.zeros(3)}))
    with pytest.raises(ValueError, match="Llama: cannot forward a sequence of length 33"):
        model(np.zeros((1, 33), np.int64))
    with pytest.raises(ValueError, match=r"Llama: targets has shape \(3, 10\), expected \(3, 11\)"):
        model.loss(*(_batch(rng)[0], np.zeros((3, 10), np.int64)))


def test_generate_extends_the_prompt(rng):
    model = Llama(LlamaConfig(**CFG), TILINGS["fine"], dtype=np.float32)
    idx, _ = _batch(rng)
    out = model.generate(idx[:, :4], 3, temperature=0)
    assert out.shape == (B, 7) and (out[:, :4] == idx[:, :4]).all()
    assert (out[:, 4] == model(idx[:, :4]).detach().numpy()[:, -1].argmax(-1)).all()
