"""generate_pipeline in one process (one stage): the request streams give the tokens of the
cached generate, greedy and sampled (temperature, top-k, top-p) with the same seed, with eos
(rows padded, the output as short as generate's), with a draft (speculative greedy equals
plain greedy; one sampled stream equals generate's speculative sampling) and past the
context (generate's sliding window); bad input is
rejected with generate's messages before anything is submitted; `tiletrain generate --dist
pipeline` prints the one-process text.  The multi-rank runs are in tests/mpi/test_serve_mpi.py."""
import numpy as np
import pytest

from tiletrain.inference import generate
from tiletrain.inference.serving import generate_pipeline
from tiletrain.nn import GPT, GPTConfig, Llama, LlamaConfig, Tiling


def _gpt(n_layer=2, seed=2):
    return GPT(GPTConfig(vocab_size=30, block_size=24, n_layer=n_layer, n_head=2, n_embd=16),
               Tiling(time=4, width=8), dtype=np.float64, seed=seed)


def _llama(n_layer=2, seed=2):
    return Llama(LlamaConfig(vocab_size=30, hidden_size=16, intermediate_size=24, num_hidden_layers=n_layer,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=24),
                 Tiling(time=4, width=8), dtype=np.float64, seed=seed)


@pytest.mark.parametrize("make", [_gpt, _llama])
@pytest.mark.parametrize("streams", [1, 2, 3])
def test_streams_give_the_greedy_tokens_of_generate(make, streams):
    m = make()
    prompts = np.random.default_rng(1).integers(0, 30, (5, 4))   # 3 streams: rows 2 + 2 + 1
    want = generate(m, prompts, 7, temperature=0, time_tile=4)
    got, stats = generate_pipeline(m, prompts, 7, streams=streams, time_tile=4, return_stats=True)
    assert got.dtype == np.int64 and got.shape == (5, 11)
    np.testing.assert_array_equal(got, want)
    assert (stats.streams, stats.stages, stats.batch, stats.new_tokens) == (streams, 1, 5, 7)
    assert stats.tokens_per_s > 0


@pytest.mark.parametrize("streams", [1, 2, 3])
@pytest.mark.parametrize("filters", [dict(top_k=5), dict(top_p=0.8), dict(top_k=6, top_p=0.9)])
def test_streams_sample_as_generate(streams, filters):
    m = _gpt()
    prompts = np.random.default_rng(3).integers(0, 30, (3, 4))
    want = generate(m, prompts, 6, temperature=1.5, seed=11, **filters)
    got = generate_pipeline(m, prompts, 6, streams=streams, temperature=1.5, seed=11, **filters)
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(want, generate(m, prompts, 6, temperature=0))  # it really sampled


def _eos_hit_by_some_rows(want, T, row):
    """An eos id that ends ``row`` early (one of its 2nd, 3rd new tokens) but that another row
    never emits."""
    for e in want[row, T + 1:T + 3]:
        if not all(e in r[T:] for r in want):
            return int(e)
    pytest.fail(f"no eos candidate in {want}")


@pytest.mark.parametrize("make", [_gpt, _llama])
@pytest.mark.parametrize("streams", [1, 2, 3])
@pytest.mark.parametrize("temperature", [0, 1.3])
def test_eos_ends_rows_as_generate(make, streams, temperature):
    """Rows that emit eos stop and are padded with the first eos id; streams whose rows have all
    ended stop (3 streams: the last row alone, its tokens padded to the others' length); with
    every row ended, the output is as short as generate's."""
    m = make()
    prompts = np.random.default_rng(5).integers(0, 30, (5, 4))
    free = generate(m, prompts, 8, temperature=temperature, seed=3, time_tile=4)
    eos = _eos_hit_by_some_rows(free, 4, row=4)
    want = generate(m, prompts, 8, temperature=temperature, seed=3, eos_token_id=[eos, 29], time_tile=4)
    got, stats = generate_pipeline(m, prompts, 8, streams=streams, temperature=temperature, seed=3,
                                   eos_token_id=[eos, 29], time_tile=4, return_stats=True)
    np.testing.assert_array_equal(got, want)
    assert want.shape == (5, 12) and want[4, -2:].tolist() == [eos, eos]  # the last row ended early, padded
    assert stats.new_tokens == 8
    # every row ends: the output stops at the last row's eos
    ends = [int(row[4]) for row in free]  # each row's first new token
    want = generate(m, prompts, 8, temperature=temperature, seed=3, eos_token_id=ends, time_tile=4)
    got = generate_pipeline(m, prompts, 8, streams=streams, temperature=temperature, seed=3, eos_token_id=ends,
                            time_tile=4)
    assert want.shape == (5, 5)
    np.testing.assert_array_equal(got, want)


def _draft(target, make):
    """A 1-layer draft that agrees with the model sometimes: a random GPT; a Llama with the
    model's embeddings, norm and head (a random one never agrees)."""
    d = make(n_layer=1, seed=9)
    if make is _gpt:
        return d
    d.load_state_dict({k: v for k, v in target.state_dict().items() if ".h." not in k and ".layers." not in k},
                      strict=False)
    return d


@pytest.mark.parametrize("make", [_gpt, _llama])
@pytest.mark.parametrize("streams, k", [(1, 1), (2, 3), (3, 5)])
def test_speculative_greedy_streams_equal_plain_greedy(make, streams, k):
    m = make()
    prompts = np.random.default_rng(6).integers(0, 30, (5, 4))
    want = generate(m, prompts, 12, temperature=0, time_tile=4)
    got, stats = generate_pipeline(m, prompts, 12, streams=streams, draft=_draft(m, make), num_draft_tokens=k,
                                   time_tile=4, return_stats=True)
    np.testing.assert_array_equal(got, want)
    assert len(stats.accepted) == len(stats.drafted) >= streams and max(stats.drafted) == k
    assert 0 in stats.accepted and max(stats.accepted) >= 1  # rejections and acceptances both happened


def test_speculative_sampling_one_stream_equals_generate():
    """One stream is generate's batch: the same accept/reject draws, the same tokens."""
    m = _gpt()
    kw = dict(temperature=1.2, top_k=8, seed=4, draft=_draft(m, _gpt), num_draft_tokens=3)
    prompts = np.random.default_rng(8).integers(0, 30, (3, 4))
    want, st = generate(m, prompts, 10, return_stats=True, **kw)
    got, stats = generate_pipeline(m, prompts, 10, return_stats=True, **kw)
    np.testing.assert_array_equal(got, want)
    assert stats.accepted == tuple(st.accepted) and len(stats.accepted) >= 2


@pytest.mark.parametrize("streams, speculative", [(2, False), (1, True)])
def test_sliding_window_as_generate(streams, speculative):
    """Past the model's context (24), each stream's full cache restarts from the last half of
    the context, as generate's does (with a draft the rounds decide where: one stream)."""
    m = _gpt()
    spec = dict(draft=_draft(m, _gpt), num_draft_tokens=3) if speculative else {}
    prompts = np.random.default_rng(9).integers(0, 30, (3, 4))
    want = generate(m, prompts, 30, temperature=0.9, seed=1, sliding_window=True, time_tile=4, **spec)
    got = generate_pipeline(m, prompts, 30, streams=streams, temperature=0.9, seed=1, sliding_window=True,
                            time_tile=4, **spec)
    assert want.shape == (3, 34)
    np.testing.assert_array_equal(got, want)


def test_zero_new_tokens_returns_the_prompt():
    prompts = np.arange(8).reshape(2, 4)
    np.testing.assert_array_equal(generate_pipeline(_gpt(), prompts, 0, streams=2), prompts)


@pytest.mark.parametrize("kwargs, message", [
    (dict(streams=0), "generate: streams must be an int between 1 and the batch size 2, got 0"),
    (dict(streams=3), "generate: streams must be an int between 1 and the batch size 2, got 3"),
    (dict(streams=True), "generate: streams must be an int between 1 and the batch size 2, got True"),
    (dict(max_new_tokens=-1), "generate: max_new_tokens must be an int >= 0"),
    (dict(max_new_tokens=21), "generate: the prompt (4) plus max_new_tokens (21) exceed the model's context of 24"),
    (dict(input_ids=np.ones((2, 25), np.int64)), "generate: the prompt (25 tokens) is longer than the model's "
                                                 "context of 24"),
    (dict(temperature=-0.5), "generate: temperature must be a finite number >= 0"),
    (dict(top_k=0), "generate: top_k must be an int >= 1 or None, got 0"),
    (dict(top_p=1.5), "generate: top_p must be in (0, 1] or None, got 1.5"),
    (dict(eos_token_id=30), "generate: eos_token_id must be a token id or a non-empty list of token ids in 0..29"),
    (dict(seed="a"), "generate: seed must be an int or None"),
    (dict(time_tile=0), "generate: time_tile must be an int >= 1, got 0"),
    (dict(num_draft_tokens=0), "generate: num_draft_tokens must be an int >= 1, got 0"),
    (dict(input_ids=[[1, 2], [3]]), "generate: the prompts of a batch must have equal lengths, got lengths 1, 2"),
    (dict(input_ids=np.zeros((2, 3))), "generate: input_ids must be a non-empty 2-D integer array"),
    (dict(input_ids=np.full((2, 3), 30)), "generate: input_ids must be token ids in 0..29"),
])
def test_bad_input_is_rejected(kwargs, message):
    """generate's checks, with generate's messages, before anything is submitted."""
    args = dict(input_ids=np.ones((2, 4), np.int64), max_new_tokens=3) | kwargs
    with pytest.raises(ValueError) as e:
        generate_pipeline(_gpt(), **args)
    assert message in str(e.value)


def test_bad_draft_is_rejected():
    ids = np.ones((2, 4), np.int64)
    with pytest.raises(TypeError, match="generate: draft must be a tiletrain GPT or Llama"):
        generate_pipeline(_gpt(), ids, 3, draft="x")
    other = GPT(GPTConfig(vocab_size=31, block_size=24, n_layer=1, n_head=2, n_embd=16), dtype=np.float64, seed=3)
    with pytest.raises(ValueError, match="the draft's vocab_size 31 differs from the model's 30"):
        generate_pipeline(_gpt(), ids, 3, draft=other)


def test_cli_dist_pipeline_prints_the_one_process_text(tmp_path, capsys):
    """`tiletrain generate --dist pipeline --streams 2` (one process: one stage) with --top-p,
    --eos or --draft (and 60 tokens: the sliding window past the context of 48) prints the text
    of `tiletrain generate` without --dist."""
    from tiletrain.cli import main
    from tiletrain.testing.tiny_hf import tiny_gpt2_folder
    model = tiny_gpt2_folder(tmp_path / "m", vocab_size=256, n_positions=48, n_layer=2, n_head=2, n_embd=32, seed=5)
    draft = tiny_gpt2_folder(tmp_path / "d", vocab_size=256, n_positions=48, n_layer=1, n_head=2, n_embd=16, seed=6)

    def run(*argv):
        assert main([str(a) for a in ("generate", "--model", model, "--prompt", "tile", "--tokens", 12, *argv)]) == 0
        return capsys.readouterr()

    sampled = ["--batch", 3, "--top-k", 20, "--top-p", 0.95, "--temperature", 1.0, "--seed", 2]
    outs = []
    for opts in (sampled, [*sampled, "--eos", 122, 67],
                 ["--batch", 2, "--temperature", 0, "--draft", draft, "--num-draft-tokens", 3, "--tokens", 60]):
        one = run(*opts)
        served = run(*opts, "--dist", "pipeline", "--streams", 2)
        assert served.out == one.out and one.out.count("--- sample ") == opts[1], (opts, one, served)
        assert "(2 stream(s), 1 stage(s), batch " in served.err, served.err
        assert ("speculative decoding: " in served.err) == ("--draft" in opts), served.err
        outs.append(served.out.split("--- sample ")[1:])
    cut = [len(a) > len(b) for a, b in zip(*outs[:2])]
    assert any(cut) and not all(cut), outs[:2]  # eos ended some samples early, not all


@pytest.mark.parametrize("tied", [False, True])
def test_pipeline_plan_of_a_llama(tied):
    """plan() splits a Llama as it splits a GPT: embedding on the first stage, decoder layers
    evenly, the final norm and the head on the last (a tied head's weight stays with the
    embedding)."""
    from tiletrain.parallel import plan
    m = Llama(LlamaConfig(vocab_size=30, hidden_size=16, intermediate_size=24, num_hidden_layers=4,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=24,
                          tie_word_embeddings=tied), Tiling(width=8), seed=2)
    pl = plan(m, "pipeline", world=3)
    assert [pl.stage(f"model.layers.{i}") for i in range(4)] == [0, 0, 1, 2]
    assert (pl.stage("model.embed_tokens"), pl.stage("model.norm"), pl.stage("lm_head")) == (0, 2, 2)
    assert pl.owner("model.embed_tokens.weight") == 0 and pl.owner("model.norm.weight") == 2
    assert pl.owner("model.layers.2.mlp.up_proj.weight") == 1
    names = dict(pl.owners)
    assert ("lm_head.weight" in names) == (not tied) and names.get("lm_head.weight", 2) == 2
