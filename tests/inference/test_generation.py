"""Generation with a key/value cache: each step's logits equal the uncached model's on the
whole context, greedy output equals the uncached loop and transformers' greedy generate, and
decode attention equals causal attention on any cache tiling (positions beyond a query are
never read)."""
import numpy as np
import pytest

import tiletrain as tt
from tiletrain.nn import GPT, GPTConfig, Tiling
from tiletrain.inference import KVCache, generate as generate_cached
from tiletrain.ops.attention import decode_attention

import torch


def _model(tiling, seed=1):
    cfg = GPTConfig(vocab_size=50, block_size=40, n_layer=2, n_head=2, n_embd=16)
    return GPT(cfg, tiling, dtype=np.float64, seed=seed).eval()


@pytest.mark.parametrize("tiling,time_tile", [(Tiling(time=4, width=8), 5), (Tiling(), 64),
                                              (Tiling(batch=1, time=3, width=16), 3)])
def test_cached_logits_equal_the_whole_context(tiling, time_tile):
    m = _model(tiling)
    ids = np.random.default_rng(0).integers(0, 50, (2, 19))
    cache = KVCache(2, 19, time_tile)
    with tt.no_grad():
        full = m(ids).numpy()
        got = [m.forward_cached(ids[:, :7], cache, 0).numpy()]          # prefill
        for p in range(7, 19, 3):                                           # then a few tokens at a time
            got.append(m.forward_cached(ids[:, p:p + 3], cache, p).numpy())
    np.testing.assert_allclose(np.concatenate(got, axis=1), full, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["gpt", "llama"])
def test_cached_logits_of_the_last_positions(kind):
    """forward_cached(..., last=n): the logits of the last n positions only, as the whole
    context's; the keys and values of every position still go into the cache."""
    m = _model(Tiling(time=4, width=8)) if kind == "gpt" else _llama()
    ids = np.random.default_rng(2).integers(0, 50, (2, 12))
    cache = KVCache(2, 12, 4)
    with tt.no_grad():
        full = m(ids).numpy()
        first = m.forward_cached(ids[:, :7], cache, 0, last=1)           # prefill: one position's logits
        assert first.shape == (2, 1, 50)
        mid = m.forward_cached(ids[:, 7:10], cache, 7, last=2).numpy()   # verification of drafted tokens
        tail = m.forward_cached(ids[:, 10:], cache, 10, last=5).numpy()  # last > n: all n
    np.testing.assert_allclose(first.numpy(), full[:, 6:7], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(mid, full[:, 8:10], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(tail, full[:, 10:], rtol=1e-10, atol=1e-12)


def test_generate_leaves_no_tensor_behind():
    """generate's step temporaries are freed (their tiles kept for reuse by the C library,
    csrc/tile.c): the bytes of live tensors come back to what they were."""
    from tiletrain._ffi import lib
    m = _model(Tiling(time=4, width=8))
    ids = np.random.default_rng(3).integers(0, 50, (2, 5))
    m.generate(ids, 3, temperature=0)   # a first run: parameters' lazily made tensors exist
    tt.wait()
    before = lib.tt_bytes_live()
    m.generate(ids, 8, temperature=0)
    tt.wait()
    assert lib.tt_bytes_live() == before

def test_greedy_equals_the_uncached_loop():
    m = _model(Tiling(time=4, width=8), seed=3)
    prompt = np.random.default_rng(2).integers(0, 50, (3, 5))
    got = generate_cached(m, prompt, 14, temperature=0, time_tile=4)
    idx = prompt
    with tt.no_grad():
        for _ in range(14):
            idx = np.concatenate([idx, m(idx).numpy()[:, -1].argmax(-1)[:, None]], axis=1)
    assert got.dtype == np.int64 and got.shape == (3, 19)
    np.testing.assert_array_equal(got, idx)


def test_greedy_equals_transformers_generate(tmp_path):
    from tiletrain.testing.tiny_hf import tiny_gpt2_folder
    folder = tiny_gpt2_folder(tmp_path / "hf", vocab_size=64, n_positions=32, n_layer=2, n_head=2, n_embd=32, seed=5)
    import transformers
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64).eval()
    m = tt.nn.from_pretrained(folder, dtype=np.float64)
    prompt = np.random.default_rng(4).integers(0, 64, (2, 6))
    want = hf.generate(torch.tensor(prompt), max_new_tokens=10, do_sample=False, pad_token_id=0).numpy()
    np.testing.assert_array_equal(generate_cached(m, prompt, 10, temperature=0), want)


@pytest.mark.parametrize("tk", [2, 5, 16])
def test_decode_attention_reads_only_visible_positions(tk):
    rng = np.random.default_rng(0)
    B, H, Hkv, T, D = 2, 4, 2, 11, 8
    q, k, v = (rng.standard_normal(s) for s in ((B, H, T, D), (B, Hkv, T, D), (B, Hkv, T, D)))
    want = torch.nn.functional.scaled_dot_product_attention(
        torch.tensor(q), torch.tensor(k).repeat_interleave(2, 1), torch.tensor(v).repeat_interleave(2, 1),
        is_causal=True).numpy()
    ck, cv = (np.full((B, Hkv, 16, D), np.nan) for _ in range(2))  # never-read positions hold NaN
    ck[:, :, :T], cv[:, :, :T] = k, v
    K, V = tt.from_numpy(ck, (1, 1, tk, D)), tt.from_numpy(cv, (1, 1, tk, D))
    with tt.no_grad():
        for s, n in ((0, T), (4, 3), (10, 1)):
            Q = tt.from_numpy(np.ascontiguousarray(q[:, :, s:s + n]), (1, 2, 2, D))
            np.testing.assert_allclose(decode_attention(Q, K, V, s).numpy(), want[:, :, s:s + n], atol=1e-12)


def test_bad_input():
    m = _model(Tiling())
    with pytest.raises(ValueError, match="exceed the model's context of 40"):
        generate_cached(m, np.zeros((1, 30), np.int64), 11)
    with pytest.raises(ValueError, match="2-D integer"):
        generate_cached(m, np.zeros((1, 3)), 2)
    q = tt.from_numpy(np.ones((1, 2, 2, 4)))
    kv = tt.from_numpy(np.ones((1, 2, 5, 4)))
    with pytest.raises(ValueError, match="need a cache of at least 6"):
        decode_attention(q, kv, kv, 4)
    with pytest.raises(RuntimeError, match="no backward"):
        decode_attention(q.requires_grad_(), kv, kv, 0)


def test_gpt_generate_method_samples_reproducibly():
    m = _model(Tiling(time=4, width=8))
    prompt = np.random.default_rng(6).integers(0, 50, (2, 4))
    a, b = (m.generate(prompt, 6, temperature=0.8, top_k=10, seed=7) for _ in range(2))
    np.testing.assert_array_equal(a, b)
    assert a.shape == (2, 10) and (a[:, :4] == prompt).all() and ((0 <= a) & (a < 50)).all()
    np.testing.assert_array_equal(m.generate(prompt, 3, temperature=0), generate_cached(m, prompt, 3, temperature=0))


def _llama(tie=False):
    cfg = tt.nn.LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=40, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=40,
                            tie_word_embeddings=tie)
    return tt.nn.Llama(cfg, Tiling(time=4, width=8), dtype=np.float64, seed=2).eval()


def test_llama_cached_logits_equal_the_whole_context():
    """Grouped-query attention over the cache, rotary angles from the cached position."""
    m = _llama()
    ids = np.random.default_rng(1).integers(0, 50, (2, 15))
    cache = KVCache(2, 15, 4)
    with tt.no_grad():
        full = m(ids).numpy()
        got = [m.forward_cached(ids[:, :6], cache, 0).numpy()]
        got += [m.forward_cached(ids[:, p:p + 1], cache, p).numpy() for p in range(6, 15)]
    np.testing.assert_allclose(np.concatenate(got, axis=1), full, rtol=1e-10, atol=1e-12)


def test_llama_greedy_equals_transformers_generate(tmp_path):
    import transformers
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                   bos_token_id=0, eos_token_id=0)
    torch.manual_seed(3)
    hf = transformers.LlamaForCausalLM(cfg).eval()
    hf.save_pretrained(tmp_path / "llama")
    m = tt.nn.from_pretrained(tmp_path / "llama")
    prompt = np.random.default_rng(5).integers(1, 64, (2, 5))
    want = hf.generate(torch.tensor(prompt), max_new_tokens=10, do_sample=False, pad_token_id=0, eos_token_id=None).numpy()
    np.testing.assert_array_equal(m.generate(prompt, 10, temperature=0), want)


def test_rotary_embedding_offset_is_a_shift_of_positions():
    x = np.random.default_rng(0).standard_normal((1, 2, 9, 8))
    with tt.no_grad():
        whole = tt.functional.rotary_embedding(tt.from_numpy(x, (1, 1, 4, 8))).numpy()
        tail = tt.functional.rotary_embedding(tt.from_numpy(np.ascontiguousarray(x[:, :, 5:]), (1, 1, 3, 8)),
                                              offset=5).numpy()
    np.testing.assert_allclose(tail, whole[:, :, 5:], rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="offset must be >= 0"):
        tt.functional.rotary_embedding(tt.from_numpy(x), offset=-1)


def test_top_k_1_is_greedy():
    m = _model(Tiling(time=4, width=8))
    prompt = np.random.default_rng(8).integers(0, 50, (2, 4))
    np.testing.assert_array_equal(m.generate(prompt, 5, temperature=0.7, top_k=1, seed=3),
                                  m.generate(prompt, 5, temperature=0))


@pytest.mark.parametrize("kind", ["gpt", "llama"])
def test_greedy_submitted_ahead_equals_the_step_by_step_loop(kind, monkeypatch):
    """Greedy decoding picks tokens with argmax tasks and submits steps ahead (inference.
    generate.AHEAD); the output equals the loop that reads each step's logits first: plain,
    with eos ending some rows (padded) and ending every row (output cut at the last one),
    and with no new token."""
    import sys
    G = sys.modules["tiletrain.inference.generate"]
    m = _model(Tiling(time=4, width=8)) if kind == "gpt" else _llama()
    ids = np.random.default_rng(4).integers(0, 50, (3, 5))

    def both(**kw):
        ahead = generate_cached(m, ids, **kw)
        monkeypatch.setattr(G, "AHEAD", 0)
        step = generate_cached(m, ids, **kw)
        monkeypatch.setattr(G, "AHEAD", 4)
        np.testing.assert_array_equal(ahead, step)
        return ahead

    free = both(max_new_tokens=12, temperature=0)
    assert free.shape == (3, 17)
    some = int(free[1, 7])                           # row 1's 3rd new token: row 1 ends early
    out = both(max_new_tokens=12, temperature=0, eos_token_id=[some, 49])
    assert (out[1, 8:] == some).all()
    ends = sorted({int(free[b, 5 + b]) for b in range(3)})  # every row ends by its (b+1)-th token
    out = both(max_new_tokens=12, temperature=0, eos_token_id=ends)
    assert out.shape[1] < 17
    assert both(max_new_tokens=0, temperature=0).shape == (3, 5)


def test_generation_config_has_transformers_names_and_defaults():
    """Every GenerationConfig field is transformers.GenerationConfig's, with the value its
    generate uses when the field is unset."""
    import dataclasses

    import transformers
    from tiletrain.inference import GenerationConfig
    theirs, applied = transformers.GenerationConfig(), transformers.GenerationConfig._get_default_generation_params()
    for f in dataclasses.fields(GenerationConfig):
        assert hasattr(theirs, f.name), f.name
        assert getattr(GenerationConfig(), f.name) == applied.get(f.name, getattr(theirs, f.name)), f.name


def test_generation_config_carries_the_options():
    """generate(generation_config=...) samples as the keywords do; max_length counts the
    prompt; pad_token_id pads ended rows; options given both ways are refused."""
    from tiletrain.inference import GenerationConfig
    m = _model(Tiling(time=4, width=8))
    prompt = np.random.default_rng(5).integers(0, 50, (2, 4))
    sampled = GenerationConfig(max_new_tokens=6, do_sample=True, temperature=0.8, top_k=10, top_p=0.9)
    np.testing.assert_array_equal(generate_cached(m, prompt, generation_config=sampled, seed=7),
                                  generate_cached(m, prompt, 6, temperature=0.8, top_k=10, top_p=0.9, seed=7))
    np.testing.assert_array_equal(m.generate(prompt, generation_config=GenerationConfig(max_length=9)),
                                  m.generate(prompt, 5, temperature=0))
    free = m.generate(prompt, 8, temperature=0)
    eos = int(free[0, 4])  # row 0's first new token ends it
    padded = m.generate(prompt, generation_config=GenerationConfig(max_new_tokens=8, eos_token_id=eos,
                                                                   pad_token_id=49))
    assert padded[0, 4] == eos and padded.shape[1] > 5 and (padded[0, 5:] == 49).all()
    with pytest.raises(ValueError, match="pass temperature in generation_config or as keywords, not both"):
        m.generate(prompt, 3, temperature=0.5, generation_config=GenerationConfig())
    with pytest.raises(ValueError, match="temperature must be a finite number > 0 with do_sample"):
        m.generate(prompt, generation_config=GenerationConfig(do_sample=True, temperature=0.0))
