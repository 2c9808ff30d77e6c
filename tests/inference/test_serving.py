"""generate_pipeline in one process (one stage): the request streams give the tokens of the
cached generate, greedy and (one stream, same seed) sampled; bad input is rejected before
anything is submitted.  The multi-rank runs are in tests/mpi/test_serve_mpi.py."""
import numpy as np
import pytest

from tiletrain.inference import generate
from tiletrain.inference.serving import generate_pipeline
from tiletrain.nn import GPT, GPTConfig, Llama, LlamaConfig, Tiling


def _gpt():
    return GPT(GPTConfig(vocab_size=30, block_size=24, n_layer=2, n_head=2, n_embd=16), Tiling(time=4, width=8),
               dtype=np.float64, seed=2)


def _llama():
    return Llama(LlamaConfig(vocab_size=30, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=24),
                 Tiling(time=4, width=8), dtype=np.float64, seed=2)


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


@pytest.mark.parametrize("streams", [1, 2])
def test_streams_sample_as_generate(streams):
    m = _gpt()
    prompts = np.random.default_rng(3).integers(0, 30, (3, 4))
    want = generate(m, prompts, 6, temperature=1.5, top_k=5, seed=11)
    got = generate_pipeline(m, prompts, 6, streams=streams, temperature=1.5, top_k=5, seed=11)
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(want, generate(m, prompts, 6, temperature=0))  # it really sampled


def test_zero_new_tokens_returns_the_prompt():
    prompts = np.arange(8).reshape(2, 4)
    np.testing.assert_array_equal(generate_pipeline(_gpt(), prompts, 0, streams=2), prompts)


@pytest.mark.parametrize("kwargs, message", [
    (dict(streams=0), "streams must be an int between 1 and the batch size 2, got 0"),
    (dict(streams=3), "streams must be an int between 1 and the batch size 2, got 3"),
    (dict(streams=True), "streams must be an int between 1 and the batch size 2, got True"),
    (dict(max_new_tokens=-1), "max_new_tokens must be an int >= 0"),
    (dict(max_new_tokens=21), "the prompt (4) plus max_new_tokens (21) exceed the model's context of 24"),
    (dict(temperature=-0.5), "temperature must be >= 0"),
    (dict(top_k=0), "top_k must be None or an int >= 1, got 0"),
    (dict(time_tile=0), "time_tile must be an int >= 1, got 0"),
    (dict(input_ids=[[1, 2], [3]]), "input_ids must be a batch of equal-length prompts (B, T)"),
    (dict(input_ids=np.zeros((2, 3))), "input_ids must be a non-empty 2-D integer array"),
])
def test_bad_input_is_rejected(kwargs, message):
    args = dict(input_ids=np.ones((2, 4), np.int64), max_new_tokens=3) | kwargs
    with pytest.raises(ValueError) as e:
        generate_pipeline(_gpt(), **args)
    assert message in str(e.value)


def test_cli_options_serving_does_not_have_are_refused():
    import argparse

    from tiletrain.inference.serving import cli_generate
    args = argparse.Namespace(prompt="ab", tokens=2, streams=1, temperature=0, top_k=None, seed=0, draft="x")
    with pytest.raises(NotImplementedError, match="--dist pipeline does not support --draft"):
        cli_generate(_gpt(), None, args)


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
