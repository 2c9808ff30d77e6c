"""Generation features on real models: speculative greedy output equals plain greedy (k = 1,
3, 5, a draft that often disagrees, GPT and Llama); the sampling variant gives the model's
token distribution (exact probabilities from the model, chi-square over seeded draws); eos
stops rows as transformers' generate does; the sliding window; the cache's crop; bad input."""
import numpy as np
import pytest

import tiletrain as tt
from tiletrain.inference import KVCache, generate, sampling_probs
from tiletrain.nn import GPT, GPTConfig, Tiling

from conftest import submits_nothing
from test_sampling import chi2, chi2_critical

import torch


def _gpt(n_layer, seed, vocab=50, block=48, tiling=None):
    cfg = GPTConfig(vocab_size=vocab, block_size=block, n_layer=n_layer, n_head=2, n_embd=16)
    return GPT(cfg, tiling, dtype=np.float64, seed=seed).eval()


def _llama(n_layer, seed, vocab=50):
    cfg = tt.nn.LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=40, num_hidden_layers=n_layer,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=48)
    return tt.nn.Llama(cfg, Tiling(time=4, width=8), dtype=np.float64, seed=seed).eval()


def _draft(target, make, seed=9):
    """A 1-layer draft with a random layer and the target's embeddings, norm and head."""
    draft = make(1, seed)
    shared = {k: v for k, v in target.state_dict().items() if ".h." not in k and ".layers." not in k}
    draft.load_state_dict(shared, strict=False)
    return draft


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_speculative_greedy_equals_plain_greedy(k, family):
    make = _gpt if family == "gpt" else _llama
    target = make(2, 3)
    # GPT: a random 1-layer draft; Llama's random one never agrees: give it the target's embeddings
    draft = make(1, 9) if family == "gpt" else _draft(target, make)
    prompt = np.random.default_rng(2).integers(0, 50, (3, 5))
    want = generate(target, prompt, 30, temperature=0)
    for rows in (slice(None), slice(0, 1)):
        got, stats = generate(target, prompt[rows], 30, temperature=0, draft=draft, num_draft_tokens=k,
                              return_stats=True)
        np.testing.assert_array_equal(got, want[rows])
        assert 0 in stats.accepted and max(stats.accepted) >= 1  # rejections and acceptances both happened
        assert len(stats.accepted) == len(stats.drafted) and max(stats.drafted) == k
        assert stats.new_tokens == 30 == sum(stats.accepted) + stats.model_calls  # accepted + 1 per call
    assert np.array_equal(target.generate(prompt, 30, temperature=0, draft=draft, num_draft_tokens=k), want)


def test_speculative_greedy_with_a_draft_of_another_family():
    target, draft = _llama(2, 4), _gpt(1, 5)
    prompt = np.random.default_rng(3).integers(0, 50, (2, 4))
    np.testing.assert_array_equal(generate(target, prompt, 20, temperature=0, draft=draft, num_draft_tokens=3),
                                  generate(target, prompt, 20, temperature=0))


def test_speculative_sampling_gives_the_models_distribution():
    """Vocabulary of 6, 3 new tokens, 2 drafted per round, batches of 8 rows with their own
    streams: the joint of the first two tokens and the marginal of the third equal the
    target's exact probabilities (chi-square at 0.999) and differ from the draft's."""
    V, temp, T = 6, 0.2, 3
    target, draft = _gpt(2, 3, vocab=V, block=16), _gpt(1, 9, vocab=V, block=16)
    prompt = np.array([[1, 4, 2]])

    def exact(m):  # joint of tokens 1, 2 (V, V) and marginal of token 3 (V,)
        with tt.no_grad():
            p1 = sampling_probs(m(prompt).numpy()[0, -1], temp)
            one = np.concatenate([np.repeat(prompt, V, 0), np.arange(V)[:, None]], 1)
            p2 = sampling_probs(m(one).numpy()[:, -1], temp)                       # (V, V): p(t2 | t1)
            two = np.concatenate([np.repeat(one, V, 0), np.tile(np.arange(V), V)[:, None]], 1)
            p3 = sampling_probs(m(two).numpy()[:, -1], temp).reshape(V, V, V)      # p(t3 | t1, t2)
        joint = p1[:, None] * p2
        return joint.ravel(), (joint[:, :, None] * p3).sum((0, 1))

    out, accepted = [], []
    for seed in range(300):
        ids, stats = generate(target, np.repeat(prompt, 8, 0), 3, temperature=temp, draft=draft,
                              num_draft_tokens=2, seed=seed, return_stats=True)
        out.append(ids[:, T:])
        accepted += stats.accepted
    out = np.concatenate(out)
    assert set(accepted) == {0, 1, 2}  # rejections, one accepted, all accepted (the bonus token)
    counts12 = np.bincount(out[:, 0] * V + out[:, 1], minlength=V * V)
    counts3 = np.bincount(out[:, 2], minlength=V)
    (j12, m3), (dj12, dm3) = exact(target), exact(draft)
    for counts, p, q in ((counts12, j12, dj12), (counts3, m3, dm3)):
        stat, df = chi2(counts, p)
        assert stat < chi2_critical(df), stat
        assert chi2(counts, q)[0] > chi2_critical(df)  # the draft's distribution would be detected


def test_sampled_generation_is_reproducible_per_row():
    m, d = _gpt(2, 3, tiling=Tiling(time=4, width=8)), _gpt(1, 8)
    prompt = np.random.default_rng(6).integers(0, 50, (3, 4))
    for kw in ({}, dict(draft=d, num_draft_tokens=3)):
        a = m.generate(prompt, 8, temperature=0.9, top_k=20, top_p=0.9, seed=7, **kw)
        np.testing.assert_array_equal(a, m.generate(prompt, 8, temperature=0.9, top_k=20, top_p=0.9, seed=7, **kw))
        assert a.shape == (3, 12) and (a[:, :4] == prompt).all() and ((0 <= a) & (a < 50)).all()
    # row b draws from the b-th stream of the seed: a batch's first row is the single prompt's
    one = m.generate(prompt[:1], 8, temperature=0.9, seed=7)
    np.testing.assert_array_equal(m.generate(prompt[[0, 0]], 8, temperature=0.9, seed=7)[0], one[0])
    np.testing.assert_array_equal(m.generate(prompt, 6, temperature=0.8, top_p=1e-9, seed=1),
                                  m.generate(prompt, 6, temperature=0))  # the nucleus of one token is greedy


@pytest.fixture
def hf_gpt2(tmp_path):
    from tiletrain.testing.tiny_hf import tiny_gpt2_folder
    import transformers
    folder = tiny_gpt2_folder(tmp_path / "hf", vocab_size=64, n_positions=40, n_layer=2, n_head=2, n_embd=32,
                              seed=5)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64).eval()
    return hf, tt.nn.from_pretrained(folder, dtype=np.float64)


def test_eos_stops_rows_as_transformers(hf_gpt2):
    hf, m = hf_gpt2
    prompt = np.random.default_rng(4).integers(0, 64, (2, 6))
    free = m.generate(prompt, 16, temperature=0)
    e0, e1 = int(free[0, 9]), int(free[1, 12])  # tokens that occur: row 0 emits e0 by its 4th new token
    draft = GPT(GPTConfig(vocab_size=64, block_size=40, n_layer=1, n_head=2, n_embd=16), dtype=np.float64, seed=2)
    for eos, rows in ((e0, [0, 1]), (e0, [0]), ([e1, e0], [0, 1]), ([e1, e0], [1])):
        pad = eos if isinstance(eos, int) else eos[0]
        want = hf.generate(torch.tensor(prompt[rows]), max_new_tokens=16, do_sample=False, eos_token_id=eos,
                           pad_token_id=pad).numpy()
        np.testing.assert_array_equal(m.generate(prompt[rows], 16, temperature=0, eos_token_id=eos), want)
        np.testing.assert_array_equal(m.generate(prompt[rows], 16, temperature=0, eos_token_id=eos, draft=draft,
                                                 num_draft_tokens=3), want)
    # one row that stops early: the output is shorter, as transformers'
    assert m.generate(prompt[:1], 16, temperature=0, eos_token_id=e0).shape[1] < 6 + 16
    # rows that stopped are padded while others go on, also when sampling
    got = m.generate(prompt, 16, temperature=1.0, seed=3, eos_token_id=[int(t) for t in range(0, 64, 2)])
    stopped = 0
    for row in got[:, 6:]:
        hits = np.flatnonzero(row % 2 == 0)
        if hits.size:
            stopped += 1
            assert (row[hits[0] + 1:] == 0).all()  # the pad: the first eos id
    assert stopped >= 1


def test_top_k_top_p_on_the_folders_logits_keep_transformers_set(hf_gpt2):
    """The next-token distribution of both implementations of the same folder, filtered."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper
    hf, m = hf_gpt2
    prompt = np.random.default_rng(7).integers(0, 64, (3, 9))
    with torch.no_grad():
        theirs = hf(torch.tensor(prompt)).logits[:, -1]
    with tt.no_grad():
        ours = m(prompt).numpy()[:, -1]
    for temperature, top_k, top_p in ((1.0, None, 0.9), (0.6, 20, 0.5), (1.5, 40, 0.95)):
        scores = TemperatureLogitsWarper(temperature)(None, theirs)
        if top_k is not None:
            scores = TopKLogitsWarper(top_k)(None, scores)
        scores = TopPLogitsWarper(top_p)(None, scores)
        kept = sampling_probs(ours, temperature, top_k, top_p) > 0
        np.testing.assert_array_equal(kept, torch.isfinite(scores).numpy())
        assert 1 < kept.sum(-1).min() and kept.sum(-1).max() < 64  # the filter did cut


def test_sliding_window_re_prefills_half_the_context():
    """Past the context, a full cache restarts from the last block_size // 2 tokens: the same
    tokens as the uncached loop over that window."""
    m = _gpt(2, 3, block=12, tiling=Tiling(time=4, width=8))
    prompt = np.random.default_rng(1).integers(0, 50, (2, 5))
    got = generate(m, prompt, 25, temperature=0, sliding_window=True)
    seq, start = prompt, 0
    with tt.no_grad():
        for _ in range(25):
            if seq.shape[1] - start > 12:
                start = seq.shape[1] - 6
            seq = np.concatenate([seq, m(seq[:, start:]).numpy()[:, -1].argmax(-1)[:, None]], axis=1)
    np.testing.assert_array_equal(got, seq)
    long = np.random.default_rng(2).integers(0, 50, (1, 20))  # a prompt longer than the context
    d = _gpt(1, 4, block=12)
    assert generate(m, long, 15, temperature=0.8, seed=0, draft=d, num_draft_tokens=3,
                    sliding_window=True).shape == (1, 35)
    with pytest.raises(ValueError, match="longer than the model's context of 12"):
        generate(m, long, 1)


def test_cache_crop_then_overwrite():
    m = _gpt(2, 1, tiling=Tiling(time=4, width=8))
    ids = np.random.default_rng(0).integers(0, 50, (2, 12))
    other = (ids + 1) % 50
    cache = KVCache(2, 12, 5)
    with tt.no_grad():
        full = m(ids).numpy()
        m.forward_cached(ids[:, :6], cache, 0)
        m.forward_cached(other[:, 6:10], cache, 6)    # rejected tokens...
        cache.crop(6)                                 # ...dropped without a copy
        assert cache.length == 6
        got = m.forward_cached(ids[:, 6:], cache, 6).numpy()
        with pytest.raises(ValueError, match="would leave a gap"):
            m.forward_cached(ids[:, :1], KVCache(2, 12), 3)
    np.testing.assert_allclose(got, full[:, 6:], rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="crop: length must be in 0..12"):
        cache.crop(13)


def test_bad_input():
    m, d = _gpt(2, 1, block=40), _gpt(1, 2, block=40)
    p = np.zeros((1, 4), np.int64)
    cases = [
        (dict(input_ids=np.zeros((1, 41), np.int64)), "prompt \\(41 tokens\\) is longer than the model's context of 40"),
        (dict(draft=_gpt(1, 2, vocab=60)), "draft's vocab_size 60 differs from the model's 50"),
        (dict(draft=_gpt(1, 2, block=20), max_new_tokens=20), "exceed the draft's context of 20"),
        (dict(draft=d, num_draft_tokens=0), "num_draft_tokens must be an int >= 1"),
        (dict(input_ids=[[1, 2, 3], [4, 5]]), "equal lengths, got lengths 2, 3"),
        (dict(top_p=0.0), "top_p must be in \\(0, 1\\]"),
        (dict(top_p=1.5), "top_p must be in \\(0, 1\\]"),
        (dict(top_k=0), "top_k must be an int >= 1"),
        (dict(temperature=-1.0), "temperature must be"),
        (dict(eos_token_id=50), "eos_token_id must be"),
        (dict(eos_token_id=[]), "eos_token_id must be"),
        (dict(input_ids=[[1, 50]]), "token ids in 0..49"),
        (dict(draft="gpt2"), "draft must be a tiletrain GPT or Llama"),
    ]
    for kw, match in cases:
        args = dict(input_ids=p, max_new_tokens=5) | kw
        with submits_nothing(), pytest.raises((ValueError, TypeError), match=match):
            m.generate(**args)
