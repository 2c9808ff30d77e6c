"""Pipelines without a flush on a GPT (ModelPipeline with a per-stage optimizer): pb with one
stage is the plain loop's AdamW step per micro-batch, bit for bit (float64, dropout too); pb with SC+LWP and
local (the causal LM's default heads) on two stages train a tiny GPT (the loss falls); a
Llama under pb; a checkpoint's optimizer state of the per-stage optimizers round-trips."""
import numpy as np
import pytest

import tiletrain as tt
from tiletrain.nn import GPT
from tiletrain.nn.gpt import GPTConfig, Tiling
from tiletrain.optim import AdamW
from tiletrain.pipeline import ModelPipeline, schedules

CFG = GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=8, dropout=0.0)
TILING = Tiling(batch=2, time=4, width=4, hidden=16, vocab=8)


def _gpt(dropout=0.0):
    return GPT(GPTConfig(**{**CFG.__dict__, "dropout": dropout}), TILING, dtype=np.float64, seed=1)


def _adamw(comp=None):
    return lambda ps, d=0: AdamW(ps, lr=1e-2, weight_decay=0.1, compensation=comp, delay=d)


def _batches(m, seed=3):
    rng = np.random.default_rng(seed)
    ids = [rng.integers(0, 16, size=(2, 9)) for _ in range(m)]
    return [x[:, :-1] for x in ids], [x[:, 1:] for x in ids]


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_pb_with_one_stage_is_the_plain_adamw_loop(dropout):
    xs, ys = _batches(4)
    tt.manual_seed(5)
    ref = _gpt(dropout)
    opt = _adamw()(list(ref.parameters()))
    want = []
    for x, y in zip(xs, ys):
        loss = ref.loss(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        want.append(float(loss))
    tt.manual_seed(5)
    model = _gpt(dropout)
    pp = ModelPipeline(model, schedules.get("pb", 1, 4), optimizer=_adamw("sc+lwp"))
    got = [float(v) for v in pp.step(xs, ys).losses]
    assert got == want                                   # delay 0: SC and LWP change nothing
    for (n, a), b in zip(model.named_parameters(), ref.parameters()):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy(), err_msg=n)


@pytest.mark.parametrize("name", ["pb", "local"])
def test_two_stages_train_a_tiny_gpt(name):
    xs, ys = _batches(4)
    model = _gpt()
    pp = ModelPipeline(model, schedules.get(name, 2, 4), optimizer=_adamw("sc+lwp" if name == "pb" else None))
    first = [float(v) for v in pp.step(xs, ys).losses]
    for _ in range(4):
        last = [float(v) for v in pp.step(xs, ys).losses]
    assert np.mean(last) < np.mean(first) - 0.1, (first, last)
    if name == "local":    # one default head per boundary: a norm and a Linear to the vocabulary
        assert len(pp.heads) == 1 and pp.heads[0][1].weight.shape == (16, 8)
        assert len(pp.optimizer.param_groups) == 2


def test_pb_on_llama_and_the_optimizer_state_round_trips():
    from tiletrain.nn.llama import Llama, LlamaConfig
    cfg = LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8)
    xs, ys = _batches(4)
    model = Llama(cfg, dtype=np.float64, seed=1)
    pp = ModelPipeline(model, schedules.get("pb", 2, 4), optimizer=_adamw("sc+lwp"))
    assert all(np.isfinite(float(v)) for v in pp.step(xs, ys).losses)
    sd = pp.optimizer.state_dict()
    n = len(list(model.parameters()))
    assert sorted(sd["state"]) == list(range(n)) and [g["delay"] for g in sd["param_groups"]] == [2, 0]
    other = ModelPipeline(Llama(cfg, dtype=np.float64, seed=1), schedules.get("pb", 2, 4), optimizer=_adamw("sc+lwp"))
    other.optimizer.load_state_dict(sd)
    again = other.optimizer.state_dict()
    for i, st in sd["state"].items():
        for k, v in st.items():
            np.testing.assert_array_equal(again["state"][i][k], v)
    with pytest.raises(ValueError, match="1 parameter groups, these per-stage optimizers have 2"):
        other.optimizer.load_state_dict({"state": {}, "param_groups": sd["param_groups"][:1]})
