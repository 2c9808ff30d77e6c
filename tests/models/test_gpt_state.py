"""GPT state: initialisation, state_dict round trip, strict loading errors, bad inputs,
dropout in train/eval mode, the tiling argument."""
import math

import numpy as np
import pytest

import tiletrain as tt
from tiletrain.nn import GPT, GPTConfig, Tiling
from tiletrain.nn.module import state_arrays

CFG = GPTConfig(vocab_size=23, block_size=16, n_layer=2, n_head=2, n_embd=16)
FINE = Tiling(batch=1, time=4, width=8, hidden=24, vocab=8)
HF_KEYS = (["transformer.wte.weight", "transformer.wpe.weight"]
           + [f"transformer.h.{i}.{n}" for i in range(2) for n in (
               "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
               "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
               "mlp.c_proj.weight", "mlp.c_proj.bias")]
           + ["transformer.ln_f.weight", "transformer.ln_f.bias", "lm_head.weight"])


def _idx(rng, B=2, T=11):
    return rng.integers(0, CFG.vocab_size, (B, T))


def test_names_shapes_and_tied_head():
    model = GPT(CFG, FINE)
    sd = model.state_dict()
    assert list(sd) == HF_KEYS
    assert [n for n, _ in model.named_parameters()] == HF_KEYS[:-1]  # lm_head listed once, as wte
    assert sd["lm_head.weight"] is sd["transformer.wte.weight"]
    assert model.lm_head.weight is model.transformer.wte.weight
    C = CFG.n_embd
    assert sd["transformer.h.0.attn.c_attn.weight"].shape == (C, 3 * C)
    assert sd["transformer.h.0.mlp.c_fc.weight"].shape == (C, 4 * C)
    assert sd["transformer.h.0.mlp.c_proj.weight"].shape == (4 * C, C)
    assert sd["transformer.wpe.weight"].shape == (CFG.block_size, C)
    assert all(isinstance(p, tt.Tensor) and p.requires_grad for p in model.parameters())
    assert model.num_params() == sum(a.numel() for k, a in sd.items() if k != "lm_head.weight")


def test_initialisation_follows_gpt2_and_is_reproducible():
    cfg = GPTConfig(vocab_size=64, block_size=32, n_layer=3, n_head=4, n_embd=64)
    a = state_arrays(GPT(cfg, seed=7))
    b = state_arrays(GPT(cfg, seed=7))
    c = state_arrays(GPT(cfg, seed=8))
    d = state_arrays(GPT(cfg, seed=7, dtype=np.float64))
    for k in a:
        assert np.array_equal(a[k], b[k]), k
        assert a[k].dtype == np.float32 and d[k].dtype == np.float64
        np.testing.assert_allclose(a[k], d[k], rtol=1e-6, atol=1e-9)  # same draws, other precision
    assert not np.array_equal(a["transformer.wte.weight"], c["transformer.wte.weight"])
    for k, v in a.items():
        if k.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            assert np.all(v == 1), k
        elif k.endswith(".bias"):
            assert np.all(v == 0), k
        else:
            std = 0.02 / math.sqrt(2 * cfg.n_layer) if k.endswith("c_proj.weight") else 0.02
            assert abs(v.std() / std - 1) < 0.1, (k, v.std(), std)
            assert abs(v.mean()) < 0.2 * std, k


def test_state_dict_round_trip_gives_identical_logits(rng):
    idx = _idx(rng)
    src = GPT(CFG, FINE, dtype=np.float64, seed=1)
    sd = src.state_dict()
    dst = GPT(CFG, FINE, dtype=np.float64, seed=2)
    assert not np.array_equal(dst(idx).detach().numpy(), src(idx).detach().numpy())
    result = dst.load_state_dict(sd)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert np.array_equal(dst(idx).detach().numpy(), src(idx).detach().numpy())
    # across tilings and dtypes too (values converted to the model's dtype)
    other = GPT(CFG, Tiling(), dtype=np.float32, seed=3)
    other.load_state_dict(sd)
    np.testing.assert_allclose(other(idx).detach().numpy(), src(idx).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_state_dict_shares_the_parameters_and_state_arrays_copy(rng):
    """As torch's: the values are detached tensors on the parameters' tiles; state_arrays copies."""
    model = GPT(CFG, FINE)
    sd = model.state_dict()
    v = sd["transformer.wpe.weight"]
    assert isinstance(v, tt.Tensor) and not isinstance(v, tt.nn.Parameter) and not v.requires_grad
    arrays = state_arrays(model)
    before = arrays["transformer.wpe.weight"].copy()
    arrays["transformer.wpe.weight"][:] = 5.0
    np.testing.assert_array_equal(model.transformer.wpe.weight.detach().numpy(), before)
    with tt.no_grad():
        v.mul_(2.0)
    np.testing.assert_array_equal(model.transformer.wpe.weight.detach().numpy(), 2 * before)


def test_load_keeps_parameter_objects_and_tying(rng):
    """Loading writes in place: an optimizer holding the parameters and the tied head stay valid."""
    model = GPT(CFG, FINE, dtype=np.float64)
    params = list(model.parameters())
    sd = GPT(CFG, FINE, dtype=np.float64, seed=5).state_dict()
    model.load_state_dict(sd)
    assert all(p is q for p, q in zip(params, model.parameters()))
    assert np.array_equal(model.lm_head.weight.detach().numpy(), sd["transformer.wte.weight"])


def test_tied_weight_needs_one_name_and_equal_values():
    model = GPT(CFG, FINE, dtype=np.float64)
    sd = GPT(CFG, FINE, dtype=np.float64, seed=4).state_dict()
    wte = sd.pop("lm_head.weight")
    model.load_state_dict(sd)  # the head is the same parameter as wte: one name suffices
    assert np.array_equal(model.state_dict()["lm_head.weight"], wte)
    sd["lm_head.weight"] = wte + 1.0
    with pytest.raises(ValueError, match="lm_head.weight and transformer.wte.weight are the same"):
        model.load_state_dict(sd)


def test_strict_loading_errors_name_every_problem_and_change_nothing():
    model = GPT(CFG, FINE, dtype=np.float64)
    good = model.state_dict()
    sd = GPT(CFG, FINE, dtype=np.float64, seed=9).state_dict()
    del sd["transformer.h.1.mlp.c_fc.bias"]
    sd["transformer.h.2.ln_1.weight"] = np.ones(16)
    sd["transformer.ln_f.weight"] = np.ones(17)
    with pytest.raises(ValueError) as e:
        model.load_state_dict(sd)
    msg = str(e.value)
    assert "missing keys: transformer.h.1.mlp.c_fc.bias" in msg
    assert "unexpected keys: transformer.h.2.ln_1.weight" in msg
    assert "transformer.ln_f.weight: shape (17,) in the state dict, (16,) in the model" in msg
    for k, v in model.state_dict().items():  # nothing was written
        assert np.array_equal(v, good[k]), k
    # strict=False: missing and unexpected keys are reported, shapes must still match
    with pytest.raises(ValueError, match="shape"):
        model.load_state_dict(sd, strict=False)
    sd["transformer.ln_f.weight"] = np.full(16, 2.0)
    res = model.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["transformer.h.1.mlp.c_fc.bias"]
    assert res.unexpected_keys == ["transformer.h.2.ln_1.weight"]
    assert np.all(model.transformer.ln_f.weight.detach().numpy() == 2.0)
    with pytest.raises(TypeError, match="mapping"):
        model.load_state_dict([1, 2])
    with pytest.raises(TypeError, match="transformer.wpe.weight"):
        model.load_state_dict({**good, "transformer.wpe.weight": "abc"})


def test_bad_inputs(rng):
    model = GPT(CFG, FINE)
    with pytest.raises(ValueError, match="length 17: block_size is only 16"):
        model(_idx(rng, T=17))
    with pytest.raises(ValueError, match="length 17: block_size is only 16"):
        model.loss(_idx(rng, T=17), _idx(rng, T=17))
    with pytest.raises(ValueError, match=r"2-D \(B, T\)"):
        model(np.arange(5))
    with pytest.raises(ValueError, match=r"idx is empty \(shape \(0, 4\)\)"):
        model(np.zeros((0, 4), np.int64))
    with pytest.raises(TypeError, match="integer"):
        model(np.zeros((2, 3)))
    with pytest.raises(TypeError, match="int64"):
        model(tt.from_numpy(np.zeros((2, 3))))
    with pytest.raises(ValueError, match="targets has shape"):
        model.loss(_idx(rng), _idx(rng, T=10))
    with pytest.raises(ValueError, match="out of range"):
        model(np.full((2, 4), CFG.vocab_size))
    with pytest.raises(ValueError, match="out of range"):
        model.loss(_idx(rng, T=4), np.full((2, 4), 99))


def test_targets_equal_to_minus_100_are_ignored(rng):
    model = GPT(CFG, FINE, dtype=np.float64)
    idx, tgt = _idx(rng), _idx(rng)
    part = tgt.copy()
    part[:, 5:] = -100
    logits = model(idx).detach().numpy()[:, :5]
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    want = -np.take_along_axis(logp, tgt[:, :5, None], -1).mean()
    assert abs(float(model.loss(idx, part)) - want) < 1e-12


def test_config_and_tiling_validation():
    with pytest.raises(ValueError, match="n_head=3 must divide n_embd=16"):
        GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=3, n_embd=16)
    with pytest.raises(ValueError, match="GPTConfig.vocab_size"):
        GPTConfig(vocab_size=0, block_size=4, n_layer=1, n_head=1, n_embd=16)
    with pytest.raises(ValueError, match="dropout"):
        GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=1, n_embd=16, dropout=1.0)
    with pytest.raises(ValueError, match="Tiling.time"):
        Tiling(time=0)
    with pytest.raises(ValueError, match=r"Tiling.width=12 must be a multiple of the head size 8 .*"
                                         r"\[8, 16\]"):
        GPT(CFG, Tiling(width=12))
    with pytest.raises(ValueError, match="Tiling.width=24"):
        GPT(CFG, Tiling(width=24))
    with pytest.raises(TypeError, match="GPTConfig"):
        GPT(dict(vocab_size=5))
    with pytest.raises(TypeError, match="float32 or float64"):
        GPT(CFG, dtype=np.int64)
    t = Tiling().resolve(CFG)
    assert (t.width, t.hidden, t.vocab) == (16, 64, 23)
    assert Tiling(hidden=1000, vocab=1000).resolve(CFG).hidden == 64
    assert Tiling().rows(8, 256) == (2, 256) and Tiling().rows(4, 32) == (4, 32)   # about 512 rows
    assert Tiling().rows(8, 128) == (4, 128) and Tiling().rows(64, 32) == (16, 32)
    assert Tiling(batch=3, time=5).rows(2, 4) == (2, 4)
    cfg = GPTConfig(vocab_size=8192, block_size=1024, n_layer=1, n_head=12, n_embd=768)
    assert Tiling().resolve(cfg).width == 768 and Tiling().resolve(cfg).vocab == 1024
    def heads(h, c):
        return GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=h, n_embd=c)
    assert Tiling().resolve(heads(25, 1600)).width == 320   # the largest tile of whole heads <= 1024
    assert Tiling().resolve(heads(1, 2048)).width == 2048   # one head wider than 1024: the whole head


def test_tiling_reaches_every_tensor(rng):
    model = GPT(CFG, FINE)
    assert model.transformer.wte.weight.tiles == (8, 8)
    assert model.transformer.h[0].attn.c_attn.weight.tiles == (8, 8)
    assert model.transformer.h[0].mlp.c_fc.weight.tiles == (8, 24)
    assert model.transformer.h[0].mlp.c_proj.weight.tiles == (24, 8)
    assert model.transformer.h[0].ln_1.weight.tiles == (8,)
    assert model(_idx(rng)).tiles == (1, 4, 8)


def test_dropout_is_active_in_training_only(rng):
    cfg = GPTConfig(vocab_size=23, block_size=16, n_layer=2, n_head=2, n_embd=16, dropout=0.3)
    model = GPT(cfg, FINE, dtype=np.float64)
    plain = GPT(CFG, FINE, dtype=np.float64)
    plain.load_state_dict(model.state_dict())
    idx = _idx(rng)
    assert model.training and all(m.training for m in model.modules())
    a, b = model(idx).detach().numpy(), model(idx).detach().numpy()
    assert not np.allclose(a, b)                      # a fresh mask every call
    assert model.eval() is model and not any(m.training for m in model.modules())
    np.testing.assert_array_equal(model(idx).detach().numpy(), plain(idx).detach().numpy())
    model.train()
    assert all(m.training for m in model.modules())


def test_bias_false_has_no_biases_and_trains(rng):
    cfg = GPTConfig(vocab_size=23, block_size=16, n_layer=1, n_head=2, n_embd=16, bias=False)
    model = GPT(cfg, FINE, dtype=np.float64)
    names = [n for n, _ in model.named_parameters()]
    assert not any(n.endswith(".bias") for n in names)
    assert "transformer.h.0.ln_1.weight" in names
    loss = model.loss(_idx(rng), _idx(rng))
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    with pytest.raises(ValueError, match="bias=False"):
        model.to_hf_state_dict()


def test_flops_per_token():
    model = GPT(CFG)
    n = model.num_params() - CFG.block_size * CFG.n_embd
    assert model.num_params(non_embedding=True) == n
    assert model.flops_per_token(8) == 6 * n + 12 * CFG.n_layer * CFG.n_embd * 8
